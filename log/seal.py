"""Sealing: closed days of JSONL segments become zstd Parquet, verified, renamed atomically.

For each segment of a day before `before` (default: today, UTC) that is still
JSONL, DuckDB converts it (``COPY (SELECT … FROM read_json(… explicit columns …))``)
to a temporary ``.<stem>.parquet.tmp`` in the same partition. The Parquet file
is then checked against the JSONL: same number of rows and the same event ids
in the same order (line order is what checkpoints count). Only then, under the
stream's lock and after checking nobody appended meanwhile, it is renamed to
``<stem>.parquet`` and the JSONL removed. A crash at any point leaves either the
JSONL alone, or both (readers take the Parquet), never a half file in view.

Erasure happens here too (see `tiermem.log.erasure`): before converting, every
file holding an erased event is rewritten without its content.

With `cold_url` set, the sealed segments of closed days are then committed to
the object-store tables (`tiermem.log.cold_table`), each in one transaction
that the table remembers, so a seal run again after a crash commits only what
is missing.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tiermem.catalog import DUCK_TYPES, _q, jsonl_reader
from tiermem.durable_files import fsync_path, line_event_id
from tiermem.errors import LogCorruptionError, StorageError, ValidationError, os_reason
from tiermem.eventlog import ERASED_MARK, EventLog, sealing_mark
from tiermem.events import (
    BOOL,
    FLOAT,
    INT,
    JSON,
    STR,
    STREAMS,
    STRLIST,
    TS,
    USAGE,
    USAGE_FIELDS,
    stream_fields,
)
from tiermem.ids import format_ts, utcnow
from tiermem.settings import Settings

ARROW_TYPES: dict[str, pa.DataType] = {
    STR: pa.string(),
    INT: pa.int64(),
    FLOAT: pa.float64(),
    BOOL: pa.bool_(),
    TS: pa.timestamp("us", tz="UTC"),
    STRLIST: pa.list_(pa.string()),
    JSON: pa.string(),  # JSON text: any shape, read back with a JSON parser
    USAGE: pa.struct([(name, pa.int64()) for name in USAGE_FIELDS]),
}

_ID_PREFIX = b'\n{"event_id":"'


def arrow_schema(stream: str) -> pa.Schema:
    """The explicit schema of a sealed segment of `stream` (the erasure mark last)."""
    cols = {**stream_fields(stream), ERASED_MARK: BOOL}
    return pa.schema([(name, ARROW_TYPES[kind]) for name, kind in cols.items()])


@dataclass
class SegmentSeal:
    segment: str  # "<stream>/date=YYYY-MM-DD/<stem>"
    rows: int
    jsonl_bytes: int
    parquet_bytes: int
    seconds: float
    convert_s: float = 0.0  # DuckDB JSONL -> Parquet
    verify_s: float = 0.0  # ids and row count checked against the JSONL


@dataclass
class SealInfo:
    before: str
    sealed_segments: int = 0
    sealed_rows: int = 0
    already_sealed: int = 0
    skipped_open: int = 0  # segments of today (or later), left as JSONL
    jsonl_bytes: int = 0
    parquet_bytes: int = 0
    erased_events: int = 0
    erased_files_rewritten: int = 0
    scrubbed_records: int = 0
    cold_url: str = ""  # the object-store tables' location ("" : local only)
    cold_segments: int = 0  # segments committed to the tables by this run
    cold_rows: int = 0
    cold_already: int = 0  # sealed segments the tables already held
    cold_deleted_rows: int = 0  # erased rows deleted from the tables
    cold_files_removed: int = 0  # replaced files vacuumed out of the bucket
    elapsed_s: float = 0.0
    rows_per_s: float = 0.0
    manifest: str = ""
    segments: list[SegmentSeal] = field(default_factory=list)


# ------------------------------------------------------------------ writing


def duck(memory_limit: str = "1GB") -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    con.execute(f"SET memory_limit = '{memory_limit}'")
    con.execute("SET preserve_insertion_order = true")  # line order is what checkpoints count
    con.execute("SET enable_progress_bar = false")
    return con


def write_parquet_from_jsonl(con: duckdb.DuckDBPyConnection, stream: str, src: Path, dst: Path) -> None:
    """Convert one JSONL segment with the stream's explicit types (JSON kept as text)."""
    # Reading JSON fields as VARCHAR gives their JSON text directly (no cast pass).
    reader = (
        jsonl_reader([src], stream)
        .replace("ignore_errors = true", "ignore_errors = false")
        .replace(f"{_q(DUCK_TYPES[JSON])}", _q("VARCHAR"))
    )
    con.execute(
        f"COPY (SELECT * FROM {reader}) TO {_q(str(dst))} "
        "(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 122880)"
    )


def jsonl_ids(path: Path, size: int) -> list[bytes]:
    """Event ids of the first `size` bytes of a segment, in line order (chunked: bounded memory)."""
    ids: list[bytes] = []
    with open(path, "rb") as fh:
        carry = b""
        remaining = size
        while remaining > 0:
            chunk = fh.read(min(32 << 20, remaining))
            if not chunk:
                break
            remaining -= len(chunk)
            data = carry + chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            block = data[:cut]
            # Every line this log writes starts with the id: split on that prefix (C speed).
            parts = (b"\n" + block).split(_ID_PREFIX)
            found = [part[: part.find(b'"')] for part in parts[1:]]
            if len(found) != block.count(b"\n") or any(b"\\" in eid for eid in found):
                found = []  # a line not written by this log (or an escaped id): parse each
                for line in block.split(b"\n")[:-1]:
                    eid = line_event_id(line)
                    if eid is None:
                        raise LogCorruptionError(f"{path}: a line without an event_id")
                    found.append(eid.encode())
            ids.extend(found)
        if carry:
            raise LogCorruptionError(f"{path}: ends without a newline (torn tail not yet quarantined)")
    return ids


def verify_parquet(path: Path, expected_ids: list[bytes]) -> None:
    """Raise LogCorruptionError unless the Parquet file holds exactly these ids in this order."""
    got = pq.read_table(path, columns=["event_id"]).column("event_id").combine_chunks()
    if len(got) != len(expected_ids):
        raise LogCorruptionError(f"{path}: {len(got)} rows, JSONL has {len(expected_ids)}")
    if got.null_count:
        raise LogCorruptionError(f"{path}: rows without an event_id")
    # Compare one joined blob per side (C speed) rather than a million Python strings.
    as_bytes = got.cast(pa.large_binary())
    one_list = pa.LargeListArray.from_arrays(pa.array([0, len(got)], pa.int64()), as_bytes)
    joined = pc.binary_join(one_list, pa.scalar(b"\n", pa.large_binary()))
    if joined[0].as_py() != b"\n".join(expected_ids):
        raise LogCorruptionError(f"{path}: event ids differ from the JSONL")


def count_lines(path: Path, size: int) -> int:
    count = 0
    with open(path, "rb") as fh:
        remaining = size
        while remaining > 0 and (chunk := fh.read(min(32 << 20, remaining))):
            remaining -= len(chunk)
            count += chunk.count(b"\n")
    return count


_LINE_PREFIX = np.frombuffer(b'{"event_id":"', dtype=np.uint8)
_WINDOW_BYTES = 32 << 20  # the JSONL is checked a window of whole lines at a time (bounded memory)


def _window_matches(buf: np.ndarray, ends: np.ndarray, offsets: np.ndarray, id_bytes: np.ndarray) -> bool:
    """Whether line i of `buf` (ending at ends[i]) starts with `{"event_id":"` + id i + `"`."""
    n = len(ends)
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    lengths = np.diff(offsets)
    prefix = len(_LINE_PREFIX)
    # The id, its closing quote and at least "}" must fit inside the line.
    if ((ends - starts) < prefix + lengths + 2).any():
        return False
    for k in range(prefix):
        if not (buf[starts + k] == _LINE_PREFIX[k]).all():
            return False
    if not (buf[starts + prefix + lengths] == 0x22).all():  # the closing quote
        return False
    # Byte j of id i sits at starts[i] + prefix + j here and at offsets[i] + j in the Parquet.
    at = np.arange(offsets[0], offsets[-1], dtype=np.int64)
    shift = np.repeat(starts + prefix - offsets[:-1], lengths)
    return bool(np.array_equal(buf[at + shift], id_bytes[at]))


def verify_ids_by_bytes(parquet: Path, jsonl: Path, size: int) -> int | None:
    """Exact check without parsing JSON: line i of the JSONL starts with `{"event_id":"<id i>"`.

    The ids are read back from the Parquet file; the JSONL is read as bytes, its
    lines found by their newlines, and at the start of each line the id bytes are
    compared with the Parquet's, as vectorised numpy comparisons. A JSON string
    whose raw bytes hold no backslash or quote decodes to itself, so equal bytes
    mean equal ids, and one line per row means equal counts. Returns the row
    count, or None when the file is not in the shape this log writes (an escaped
    id, a line without the id first) or does not match: the caller then takes
    the general check, which decides.
    """
    got = pq.read_table(parquet, columns=["event_id"]).column("event_id").combine_chunks()
    if got.null_count or got.type not in (pa.string(), pa.large_string()):
        return None
    n = len(got)
    offset_type = np.int32 if got.type == pa.string() else np.int64
    offsets = np.frombuffer(got.buffers()[1], dtype=offset_type)[got.offset : got.offset + n + 1].astype(
        np.int64
    )
    id_bytes = np.frombuffer(got.buffers()[2], dtype=np.uint8) if n else np.empty(0, np.uint8)
    row = 0
    with open(jsonl, "rb") as fh:
        carry = b""
        remaining = size
        while remaining > 0:
            chunk = fh.read(min(_WINDOW_BYTES, remaining))
            if not chunk:
                return None
            remaining -= len(chunk)
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if not cut:
                continue
            buf = np.frombuffer(data, dtype=np.uint8, count=cut)
            ends = np.flatnonzero(buf == 10)
            if row + len(ends) > n or not _window_matches(
                buf, ends, offsets[row : row + len(ends) + 1], id_bytes
            ):
                return None
            row += len(ends)
    return n if not carry and row == n else None


def verify_against_jsonl(con: duckdb.DuckDBPyConnection, parquet: Path, jsonl: Path, size: int) -> int:
    """Check a converted segment: as many rows as the JSONL has lines, the same ids in the same order.

    The fast check compares the Parquet's ids with the id bytes at the start of
    every JSONL line (`verify_ids_by_bytes`). When it cannot decide, the ids are
    read back from both files (DuckDB for the JSONL, Arrow for the Parquet) and
    the row count against a plain newline count, so a dropped or reordered line
    fails the seal either way. Returns the row count.
    """
    fast = verify_ids_by_bytes(parquet, jsonl, size)
    if fast is not None:
        return fast
    lines = count_lines(jsonl, size)
    want = (
        con.sql(
            f"SELECT event_id FROM read_json({_q(str(jsonl))}, format = 'newline_delimited', "
            "columns = {'event_id': 'VARCHAR'}, hive_partitioning = false)"
        )
        .to_arrow_table()
        .column(0)
        .combine_chunks()
    )
    got = pq.read_table(parquet, columns=["event_id"]).column("event_id").combine_chunks()
    if len(want) != lines or len(got) != lines:
        raise LogCorruptionError(f"{parquet}: {len(got)} rows, {jsonl} has {lines} lines ({len(want)} read)")
    if want.null_count or not got.equals(want):
        raise LogCorruptionError(f"{parquet}: event ids differ from {jsonl}")
    return lines


class StreamLock:
    """The same exclusive flock every writer of the stream takes."""

    def __init__(self, settings: Settings, stream: str) -> None:
        root = settings.log_dir / stream
        root.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)

    def __enter__(self) -> StreamLock:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _closed_partitions(settings: Settings, stream: str, before: str) -> Iterator[Path]:
    root = settings.log_dir / stream
    if not root.exists():
        return
    for part in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("date=")):
        if part.name[5:] < before:
            yield part


def seal_segment(
    settings: Settings, log: EventLog, con: duckdb.DuckDBPyConnection, stream: str, jsonl: Path
) -> SegmentSeal | None:
    """Seal one JSONL segment; None when there was nothing to do. Idempotent.

    The segment is marked as being sealed (under the stream lock) before it is
    converted: from then on writers send late events for its day to a new
    segment, so the one being converted no longer changes.
    """
    mark = sealing_mark(jsonl)
    # Quarantine a torn tail first (same code path as a writer opening the segment).
    with StreamLock(settings, stream):
        if not jsonl.exists():
            mark.unlink(missing_ok=True)
            return None
        fd = os.open(jsonl, os.O_RDWR)
        try:
            log.repair_tail(stream, jsonl.parent.name, jsonl.stem, fd)
            st = os.fstat(fd)
        finally:
            os.close(fd)
        mark.touch()
    try:
        return _seal_marked(settings, log, con, stream, jsonl, st)
    finally:
        mark.unlink(missing_ok=True)


def _seal_marked(
    settings: Settings,
    log: EventLog,
    con: duckdb.DuckDBPyConnection,
    stream: str,
    jsonl: Path,
    st: os.stat_result,
) -> SegmentSeal | None:
    started = time.perf_counter()
    part = jsonl.parent
    stem = jsonl.stem
    final = part / f"{stem}.parquet"
    tmp = part / f".{stem}.parquet.tmp"
    segment = f"{stream}/{part.name}/{stem}"
    if final.exists():
        # A previous seal crashed between rename and unlink: check, then finish it.
        verify_against_jsonl(con, final, jsonl, st.st_size)
        with StreamLock(settings, stream):
            jsonl.unlink(missing_ok=True)
            fsync_path(part)
        return None
    if st.st_size == 0:
        with StreamLock(settings, stream):
            if jsonl.stat().st_size == 0:
                jsonl.unlink()
        return None
    for _attempt in range(3):
        t0 = time.perf_counter()
        try:
            write_parquet_from_jsonl(con, stream, jsonl, tmp)
            t1 = time.perf_counter()
            rows = verify_against_jsonl(con, tmp, jsonl, st.st_size)
        except BaseException:
            tmp.unlink(missing_ok=True)  # never leave a half-checked file behind
            raise
        t2 = time.perf_counter()
        fsync_path(tmp)
        with StreamLock(settings, stream):
            now = jsonl.stat()
            if (now.st_ino, now.st_size) != (st.st_ino, st.st_size):
                st = now  # rewritten meanwhile (an erasure applied at once): convert again
                continue
            os.replace(tmp, final)
            fsync_path(part)
            jsonl.unlink()
            fsync_path(part)
        log.forget_segment(segment)
        return SegmentSeal(
            segment,
            rows,
            st.st_size,
            final.stat().st_size,
            round(time.perf_counter() - started, 3),
            round(t1 - t0, 3),
            round(t2 - t1, 3),
        )
    tmp.unlink(missing_ok=True)
    raise LogCorruptionError(f"{segment}: kept being rewritten while being sealed; try again")


def _parse_before(before: date | datetime | str | None) -> str:
    if before is None:
        return format_ts(utcnow())[:10]
    if isinstance(before, datetime):
        return format_ts(before)[:10]
    if isinstance(before, date):
        return before.isoformat()
    try:
        return date.fromisoformat(before).isoformat()
    except (TypeError, ValueError):
        raise ValidationError("before", f"not a date (YYYY-MM-DD): {before[:40]!r}") from None


def seal(settings: Settings, before: date | datetime | str | None = None, *, erase: bool = True) -> SealInfo:
    """Seal every closed day (partitions before `before`, default today UTC); apply erasures first."""
    from tiermem.log import erasure, manifest  # local: they import this module

    started = time.perf_counter()
    info = SealInfo(before=_parse_before(before))
    log = EventLog(settings)
    con = duck()
    try:
        if erase:
            report = erasure.apply_erasures(settings, log)
            info.erased_events = report.erased_events
            info.erased_files_rewritten = report.files_rewritten
            info.scrubbed_records = report.scrubbed_records
            info.cold_deleted_rows = report.table_deleted_rows
            info.cold_files_removed = report.table_files_removed
        for stream in STREAMS:
            root = settings.log_dir / stream
            if not root.exists():
                continue
            for part in sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("date=")):
                jsonls = sorted(part.glob("*.jsonl"))
                if part.name[5:] >= info.before:
                    info.skipped_open += len(jsonls)
                    continue
                info.already_sealed += sum(1 for _ in part.glob("*.parquet"))
                for jsonl in jsonls:
                    try:
                        done = seal_segment(settings, log, con, stream, jsonl)
                    except (OSError, duckdb.IOException) as exc:
                        raise StorageError(
                            f"seal stopped at {jsonl}: {os_reason(exc)}; that segment is unchanged (still "
                            f"JSONL, read by every view as before) and {info.sealed_segments} segment(s) were "
                            "sealed before it; run `tiermem seal` again once there is room"
                        ) from exc
                    if done is None:
                        continue
                    info.segments.append(done)
                    info.sealed_segments += 1
                    info.sealed_rows += done.rows
                    info.jsonl_bytes += done.jsonl_bytes
                    info.parquet_bytes += done.parquet_bytes
        if settings.cold_url:
            from tiermem.log import cold_table  # local: only with an object-store cold tier

            info.cold_url = settings.cold_url
            committed = cold_table.commit_sealed(settings, info.before)
            info.cold_segments, info.cold_rows, info.cold_already = (
                committed.segments,
                committed.rows,
                committed.already,
            )
            # Files of a commit that never happened (a crash after the upload) are referenced
            # by no version: removed here, so the bucket holds only what the tables read.
            info.cold_files_removed += cold_table.vacuum(settings)
        try:
            info.manifest = str(manifest.refresh(settings))
        except OSError as exc:
            raise StorageError(
                f"sealed {info.sealed_segments} segment(s), then writing the manifest failed: "
                f"{os_reason(exc)}; the log is sealed and readable, the next seal writes the manifest"
            ) from exc
    finally:
        con.close()
        log.close()
    info.elapsed_s = round(time.perf_counter() - started, 3)
    info.rows_per_s = round(info.sealed_rows / info.elapsed_s, 1) if info.elapsed_s else 0.0
    return info
