"""Ingest: one turn, or a JSONL file of them, validated, enriched and appended.

`ingest_record` is the hot path (one durable append). `ingest_file` is the bulk
path: it reads the source in chunks, validates each line (the schema's fast
path handles well-formed interactions), and appends a batch at a time under
one lock and one fsync per batch and day.

Replay safety. A record without an `event_id` gets a deterministic one,
derived from its timestamp and the exact bytes of its line, so a bulk ingest
killed at any point (even SIGKILL) and re-run appends each record exactly
once: what already reached the log is counted as a duplicate. A record that
also has no `ts` gets the source file's modification time (stable across
re-runs of the same file); on stdin it gets the ingest's start time, so such
records are replay-safe only when they carry `ts` or `event_id`.

Trust. Everything read here comes from outside, so it is checked as a
caller's: only caller event types (`interaction`, `session_ended`; see
`tiermem.registry`) pass, within the limits of `settings.limits`, and each
line is decoded strictly (`tiermem.ingest.lines`: duplicate keys, depth, huge
integers, lines over the size limit skipped without being read whole).

Bad records are never lost and never stop the file: each goes to `_rejects/`
with the source file, its line number, the field and the reason, every good
line around it is stored, and the exit code says 3 (partial).

Encoding. Each block goes first through the compiled scanner
(`tiermem.ingest.compiled`: one pass per line in C, ~2 us a record), then
the lines it left through the Python columnar path and the per-record
validator (10-20 us a record of Python). With `compiled=False` the Arrow pass
(`tiermem.ingest.native`) goes first instead.

Parallelism. On a machine with several cores, a file the slower paths must
read is cut into blocks of whole lines that worker processes encode
(`encode_block`) while this process, the only writer, takes the results back
in file order and appends them (`EventLog.append_encoded`: id index + write +
fsync). The stored bytes and ids are the same either way; small inputs, and
with the automatic worker count files the scanner settles almost whole, stay
in one process (handing a line to a worker and back costs more than scanning
it).
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import multiprocessing
import os
import signal
import sys
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson
from tiermem.ingest import compiled as scanner
from tiermem.ingest.columnar import STREAM, Row, fast_rows
from tiermem.ingest.lines import BLOCK_BYTES, HEAD_BYTES, Oversize, decode_line, read_blocks
from tiermem.ingest.native import native_rows

from tiermem.errors import InputError, StorageError, ValidationError, os_reason
from tiermem.eventlog import AppendResult, EventLog
from tiermem.events import CALLER, stream_of, validate
from tiermem.ids import format_ts, parse_ts, to_ms, utcnow
from tiermem.output import Progress
from tiermem.rejects import Rejected
from tiermem.settings import FsyncPolicy, LimitSettings, Settings

BATCH_RECORDS = 20_000
BATCH_BYTES = 64 << 20  # a batch is flushed at this many input bytes too (bounded memory on big lines)
PARALLEL_AFTER_BYTES = 8 << 20  # smaller inputs are not worth starting workers for
SCANNED_INLINE = 0.9  # share of lines the compiled scanner settles from which one process is faster
__all__ = ["BLOCK_BYTES", "IngestInfo", "ingest_file", "ingest_record"]


@dataclass
class IngestInfo:
    source: str
    accepted: int = 0
    rejected: int = 0
    duplicates: int = 0
    lines: int = 0
    blank_lines: int = 0
    rejects_path: str | None = None
    reject_fields: dict[str, int] = field(default_factory=dict)
    streams: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    fsync: str = "always"
    elapsed_s: float = 0.0
    rate_per_s: float = 0.0

    @property
    def exit_code(self) -> int:
        """0 when every record was accepted (or already there), 3 when some were quarantined."""
        return 3 if self.rejected else 0


def ingest_record(settings: Settings, record: Mapping[str, Any], log: EventLog | None = None) -> AppendResult:
    """Validate (as a caller's record), enrich and durably append one turn.

    Raises ValidationError after keeping the record in `_rejects/`.
    """
    own = log is None
    log = log or EventLog(settings)
    try:
        return log.append(record, writer=CALLER)
    finally:
        if own:
            log.close()


def replay_safe_id(record: dict[str, Any], line: bytes, default_ts: str) -> None:
    """Give a record without `event_id` a deterministic one (from its ts and its line's bytes)."""
    if "event_id" in record:
        return
    ts = record.get("ts", record.get("timestamp"))
    if ts is None:
        record["ts"] = ts = default_ts
    if not isinstance(ts, str):
        return  # validation will name the bad field
    try:
        # The validator's own reading of the time, so every time it accepts gives a
        # replay-safe id (a lower-case `z` once fell through to a random one).
        stamp = parse_ts(ts)
    except ValueError:
        return  # validation will name the bad field
    record["event_id"] = line_event_id(stamp, line)


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]  # 10 bits -> two digits
_SHIFTS = tuple(range(120, -1, -10))


def line_event_id(stamp: datetime, line: bytes) -> str:
    """`derived_event_id(stamp, "ingest", line)`, computed faster (the bulk hot path)."""
    digest = hashlib.blake2b(b"ingest\x1f" + line, digest_size=10).digest()
    value = (to_ms(stamp) << 80) | int.from_bytes(digest, "big")
    # 26 Crockford digits = 13 pairs of 5-bit digits, most significant first.
    return "".join([_PAIRS[(value >> shift) & 1023] for shift in _SHIFTS])


def parse_line(line: bytes, default_ts: str, limits: LimitSettings) -> dict[str, Any]:
    """One JSONL line from outside to a validated event (raises ValidationError naming the field)."""
    record = decode_line(line, limits)
    replay_safe_id(record, line, default_ts)
    return validate(record, writer=CALLER, limits=limits)


@dataclass
class EncodedBlock:
    """One block of lines, validated and serialised (by a worker or inline), in line order."""

    lines: int = 0
    blank_lines: int = 0
    streams: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    stored: list[bytes] = field(default_factory=list)  # the exact lines to append
    rejects: list[tuple[int, bytes, str, str]] = field(
        default_factory=list
    )  # (index in block, line, field, reason)
    scanned: int = 0  # lines settled by the compiled scanner


_INTERN: dict[str, str] = {}


def _interned(text: str) -> str:
    # One object per stream/partition name, so a block pickles each name once.
    return _INTERN.setdefault(text, text)


def encode_block(
    block: bytes,
    default_ts: str,
    limits: LimitSettings,
    columnar: bool = True,
    native: bool = True,
    compiled: bool = True,
) -> EncodedBlock:
    """Validate and serialise every line of a block (whole lines; the last may lack its newline).

    `columnar`: settle the ordinary interactions a column at a time, the rest
    one record at a time; False: every line one record at a time. `native`
    (with `columnar`): first parse and check the block in Arrow
    (`tiermem.ingest.native`), then give the lines it left to the Python
    columnar path (`tiermem.ingest.columnar`); False: the Python columnar path
    only. `compiled` (with both, when the scanner is built): the compiled
    scanner (`tiermem.ingest.compiled`) goes first over the whole block. The
    stored bytes, ids and quarantine reasons are the same every way.
    """
    if columnar and native and compiled and scanner.available():
        return _encode_scanned(block, default_ts, limits)
    out = EncodedBlock()
    raw = block.split(b"\n")
    out.lines = len(raw)
    lines = [line.rstrip(b"\r") if line.endswith(b"\r") else line for line in raw]
    settled = _fast(lines, default_ts, limits, native) if columnar else {}
    others: dict[int, str] = {}  # index -> stream, for lines of another stream than interactions
    for index in [i for i in range(len(lines)) if i not in settled]:
        line = lines[index]
        if not line.strip():
            out.blank_lines += 1
        else:
            _encode_one(settled, others, out, index, line, default_ts, limits)
    # Assembled in line order a column at a time (a per-line loop here costs as much as a check).
    order = sorted(settled)
    if order:
        ids, partitions, stored = zip(*map(settled.__getitem__, order), strict=True)
        out.ids, out.stored = list(ids), list(stored)
        out.partitions = list(map(sys.intern, partitions))  # each name pickled once per block
        out.streams = [STREAM] * len(order)
        if others:
            position = {index: k for k, index in enumerate(order)}
            for index, stream in others.items():
                out.streams[position[index]] = stream
    return out


def _encode_scanned(block: bytes, default_ts: str, limits: LimitSettings) -> EncodedBlock:
    """The compiled scanner over the block, then the other paths for the lines it left, merged in line order."""
    count, ids, partitions, stored, rest, left = scanner.scan_block(block, default_ts, limits)
    out = EncodedBlock(lines=count, scanned=len(ids))
    if not rest:  # the usual block: the scanner's lists are the block's
        out.ids, out.partitions, out.stored = ids, partitions, stored
        out.streams = [STREAM] * len(ids)
        return out
    # The scanner settles every line the Arrow pass would settle: the left lines skip that pass.
    settled = {rest[k]: row for k, row in fast_rows(left, default_ts, limits).items()}
    others: dict[int, str] = {}
    for index, line in zip(rest, left, strict=True):
        if index in settled:
            continue
        if not line.strip():
            out.blank_lines += 1
        else:
            _encode_one(settled, others, out, index, line, default_ts, limits)
    # The scanner's rows are those of every line not in `rest`, in order: the rows of the
    # left lines go between them, a slice at a time.
    prev = 0
    moved: dict[int, str] = {}  # position in the block's output -> stream, for other streams
    for k, index in enumerate(rest):
        cut = index - k  # scanner rows for the lines before this one
        out.ids += ids[prev:cut]
        out.partitions += partitions[prev:cut]
        out.stored += stored[prev:cut]
        prev = cut
        row = settled.get(index)
        if row is not None:
            out.ids.append(row[0])
            out.partitions.append(sys.intern(row[1]))
            out.stored.append(row[2])
            if index in others:
                moved[len(out.ids) - 1] = others[index]
    out.ids += ids[prev:]
    out.partitions += partitions[prev:]
    out.stored += stored[prev:]
    out.streams = [STREAM] * len(out.ids)
    for position, stream in moved.items():
        out.streams[position] = stream
    return out


def _fast(lines: list[bytes], default_ts: str, limits: LimitSettings, native: bool) -> dict[int, Row]:
    """The lines settled without the per-record path: natively first, then the Python columnar path."""
    fast = native_rows(lines, default_ts, limits) if native else {}
    if len(fast) == len(lines):
        return fast
    rest = [i for i in range(len(lines)) if i not in fast]
    more = fast_rows([lines[i] for i in rest], default_ts, limits)
    for k, row in more.items():
        fast[rest[k]] = row
    return fast


def _encode_one(
    settled: dict[int, Row],
    others: dict[int, str],
    out: EncodedBlock,
    index: int,
    line: bytes,
    default_ts: str,
    limits: LimitSettings,
) -> None:
    """One line through the per-record path: settled, or refused naming the field."""
    try:
        event = parse_line(line, default_ts, limits)
        stream = stream_of(event["type"])
        stored = orjson.dumps(event) + b"\n"
    except ValidationError as exc:
        out.rejects.append((index, line, exc.field, exc.reason))
        return
    except orjson.JSONEncodeError as exc:  # validation should have caught it: still one line's problem
        out.rejects.append((index, line, "<record>", f"cannot be stored as JSON: {exc}"))
        return
    if stream != STREAM:
        others[index] = _interned(stream)
    settled[index] = (event["event_id"], "date=" + event["ts"][:10], stored)


def _worker_init(parent: int) -> None:
    gc.disable()  # fresh dicts without cycles, as in the parent
    # Die with the ingest: a SIGKILLed parent must not leave workers behind.
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def ingest_workers(requested: int | None) -> int:
    """How many encoding processes to use (0: encode in this process)."""
    if requested is not None:
        return max(0, requested)
    if "fork" not in multiprocessing.get_all_start_methods():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(cores, 4) if cores > 1 else 0


def _skipped(item: Oversize, limits: LimitSettings) -> EncodedBlock:
    """A line too long to read: one reject holding its head and length."""
    out = EncodedBlock(lines=1)
    reason = f"{item.length:,} bytes, over max_record_bytes = {limits.max_record_bytes:,} (skipped unread)"
    out.rejects.append((0, item.head, "<record>", reason))
    return out


def encoded_blocks(
    blocks: Iterable[bytes | Oversize],
    default_ts: str,
    workers: int,
    limits: LimitSettings,
    columnar: bool = True,
    native: bool = True,
    compiled: bool = True,
    adaptive: bool = False,
) -> Iterator[tuple[EncodedBlock, int]]:
    """(encoded block, its input bytes) in order: inline at first, then (large inputs) in worker processes.

    `adaptive` (the automatic worker count): when the compiled scanner settled
    nearly every line of the first blocks, the rest stays in this process too.
    Then encoding costs less per line than handing the line to a worker and its
    result back (copying both through pipes), and the writer here is the slower
    part anyway; workers pay off only for files the slower paths must read.
    """
    blocks = iter(blocks)
    consumed = lines = scanned = 0
    for block in blocks:
        if isinstance(block, Oversize):
            yield _skipped(block, limits), block.length
            consumed += block.length
        else:
            encoded = encode_block(block, default_ts, limits, columnar, native, compiled)
            lines, scanned = lines + encoded.lines, scanned + encoded.scanned
            yield encoded, len(block)
            consumed += len(block)
        if workers and consumed >= PARALLEL_AFTER_BYTES:
            if adaptive and scanned >= SCANNED_INLINE * lines:
                workers = 0  # and go on inline
                continue
            break
    else:
        return
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_worker_init, initargs=(os.getpid(),)) as pool:
        # A bounded window of blocks in flight: memory stays flat on any file size.
        window: deque[tuple[Any, int]] = deque()
        for block in blocks:
            if isinstance(block, Oversize):
                window.append((_skipped(block, limits), block.length))
            else:
                window.append(
                    (
                        pool.apply_async(
                            encode_block, (block, default_ts, limits, columnar, native, compiled)
                        ),
                        len(block),
                    )
                )
            if len(window) >= 2 * workers + 2:
                yield _done(window.popleft())
        while window:
            yield _done(window.popleft())


def _done(item: tuple[Any, int]) -> tuple[EncodedBlock, int]:
    pending, size = item
    return (pending if isinstance(pending, EncodedBlock) else pending.get()), size


def open_source(source: str | Path) -> tuple[IO[bytes], str, str]:
    """(binary handle, display name, default ts) of a path; InputError naming the problem."""
    path = Path(source)
    try:
        if path.is_dir():
            raise InputError(f"{path}: is a directory, not a JSONL file")
        handle: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed by the caller
        mtime = os.fstat(handle.fileno()).st_mtime
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied (cannot read it)") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    return handle, str(path), format_ts(datetime.fromtimestamp(mtime, UTC))


def ingest_file(
    settings: Settings,
    source: str | Path | IO[bytes],
    *,
    progress: Progress | bool | None = None,
    fsync: FsyncPolicy | None = None,
    batch_records: int = BATCH_RECORDS,
    workers: int | None = None,
    columnar: bool = True,
    native: bool = True,
    compiled: bool = True,
) -> IngestInfo:
    """Bulk-load a JSONL file (a path, "-" for stdin, or a binary stream). Idempotent on re-run.

    `workers`: encoding processes (None: one per core up to 4 when there are
    several cores and the file needs the slower paths, see `encoded_blocks`;
    0: all in this process). `columnar`: check ordinary
    interactions a column at a time (False: every line one record at a time);
    `native`: parse and check whole blocks in Arrow first (False: the Python
    columnar path alone); `compiled`: the compiled scanner first, when built
    (False: the Arrow pass first). Results are identical every way.
    """
    from dataclasses import replace

    started = time.perf_counter()
    if fsync is not None:
        settings = replace(settings, fsync=fsync)
    own_handle = isinstance(source, str | Path) and str(source) != "-"
    if isinstance(source, str | Path) and str(source) != "-":
        handle, name, default_ts = open_source(source)
    else:
        handle = sys.stdin.buffer if isinstance(source, str | Path) else source
        name = "<stdin>" if isinstance(source, str | Path) else getattr(source, "name", "<stream>")
        default_ts = format_ts(utcnow())
    try:
        return _ingest_stream(
            settings,
            handle,
            name,
            default_ts,
            progress,
            batch_records,
            workers,
            started,
            columnar,
            native,
            compiled,
        )
    finally:
        if own_handle:
            handle.close()


def _ingest_stream(
    settings: Settings,
    handle: IO[bytes],
    name: str,
    default_ts: str,
    progress: Progress | bool | None,
    batch_records: int,
    workers: int | None,
    started: float,
    columnar: bool = True,
    native: bool = True,
    compiled: bool = True,
) -> IngestInfo:
    bar = Progress("ingest", enabled=progress if isinstance(progress, bool) else None)
    if isinstance(progress, Progress):
        bar = progress
    limits = settings.limits
    info = IngestInfo(source=name, fsync=settings.fsync)
    fields: Counter[str] = Counter()
    log = EventLog(settings)
    # A batch is tens of thousands of fresh dicts: the cyclic GC would rescan them
    # over and over (they hold no cycles), costing more than the parsing itself.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        # stream -> (ids, partitions, lines) waiting for the next flush, in file order
        good: dict[str, tuple[list[str], list[str], list[bytes]]] = {}
        bad: list[Rejected] = []
        waiting = waiting_bytes = 0
        next_line = 1  # the file's line number of the next block's first line

        def flush() -> None:
            try:
                if bad:
                    path = log.reject_many(bad, source=f"ingest:{name}")
                    info.rejects_path = str(path) if path else info.rejects_path
                for stream, (ids, partitions, lines) in good.items():
                    accepted, duplicates = log.append_encoded(stream, ids, partitions, lines)
                    info.accepted += accepted
                    info.duplicates += duplicates
                    if accepted:
                        info.streams[stream] = info.streams.get(stream, 0) + accepted
            except (StorageError, OSError) as exc:
                why = (
                    exc
                    if isinstance(exc, StorageError)
                    else f"{getattr(exc, 'filename', '')}: {os_reason(exc)}"
                )
                raise StorageError(
                    f"ingest of {name} stopped in the lines before line {next_line}: {why}. "
                    f"{info.accepted:,} record(s) of earlier batches are stored; run the same ingest again "
                    "once there is room (what is already stored counts as duplicates)"
                ) from exc
            bar.update(waiting)
            info.batches += 1
            good.clear()
            bad.clear()

        blocks = read_blocks(handle, limits.max_record_bytes)
        for block, size in encoded_blocks(
            blocks,
            default_ts,
            ingest_workers(workers),
            limits,
            columnar,
            native,
            compiled,
            adaptive=workers is None,
        ):
            info.lines += block.lines
            info.blank_lines += block.blank_lines
            _collect_rejects(block, name, next_line, limits.max_record_bytes, bad, fields)
            next_line += block.lines
            info.rejected += len(block.rejects)
            _queue_by_stream(block, good)
            waiting += len(block.streams) + len(block.rejects)
            waiting_bytes += size
            if waiting >= batch_records or waiting_bytes >= BATCH_BYTES:
                flush()
                waiting = waiting_bytes = 0
        flush()
    finally:
        if gc_was_enabled:
            gc.enable()
        log.close()
        bar.close()
    _finish_info(info, fields, started)
    return info


def _collect_rejects(
    block: EncodedBlock,
    name: str,
    first_line: int,
    max_record_bytes: int,
    bad: list[Rejected],
    fields: Counter[str],
) -> None:
    """A block's refused lines, numbered in the file and cut to their head when oversized."""
    for index, line, fname, reason in block.rejects:
        record: bytes = line if len(line) <= max_record_bytes else line[:HEAD_BYTES]
        bad.append(Rejected(record, ValidationError(fname, reason), file=name, line=first_line + index))
        fields[fname.split("[")[0]] += 1


def _queue_by_stream(block: EncodedBlock, good: dict[str, tuple[list[str], list[str], list[bytes]]]) -> None:
    """A block's accepted lines added, in file order, to what waits for the next flush of their stream."""
    streams = block.streams
    if streams and streams.count(streams[0]) == len(streams):  # the usual case: one stream
        ids, partitions, lines = good.setdefault(streams[0], ([], [], []))
        ids.extend(block.ids)
        partitions.extend(block.partitions)
        lines.extend(block.stored)
    else:
        for k, stream in enumerate(streams):
            ids, partitions, lines = good.setdefault(stream, ([], [], []))
            ids.append(block.ids[k])
            partitions.append(block.partitions[k])
            lines.append(block.stored[k])


def _finish_info(info: IngestInfo, fields: Counter[str], started: float) -> None:
    info.reject_fields = dict(fields.most_common())
    info.elapsed_s = round(time.perf_counter() - started, 3)
    info.rate_per_s = (
        round((info.accepted + info.duplicates + info.rejected) / info.elapsed_s, 1)
        if info.elapsed_s
        else 0.0
    )
