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

Bad records are never lost: they go to `_rejects/` with the field and reason,
and are counted per field.

Parallelism. Parsing, validating and serialising is CPU-bound Python (about
10-20 us a record), so on a machine with several cores the file is cut into
blocks of whole lines that worker processes encode (`encode_block`) while this
process, the only writer, takes the results back in file order and appends them
(`EventLog.append_encoded`: id index + write + fsync). The stored bytes and ids
are the same either way; small inputs stay in one process.
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

from tiermem.errors import ValidationError
from tiermem.eventlog import AppendResult, EventLog
from tiermem.events import stream_of, validate
from tiermem.ids import format_ts, to_ms, utcnow
from tiermem.output import Progress
from tiermem.settings import FsyncPolicy, Settings

BATCH_RECORDS = 20_000
BLOCK_BYTES = 1 << 20  # unit of work sent to an encoding worker (~1,500 turns)
PARALLEL_AFTER_BYTES = 8 << 20  # smaller inputs are not worth starting workers for


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
    """Validate, enrich and durably append one turn (raises ValidationError after rejecting it)."""
    own = log is None
    log = log or EventLog(settings)
    try:
        return log.append(record)
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
        stamp = datetime.fromisoformat(ts)
    except ValueError:
        return
    if stamp.tzinfo is None:
        return
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


def parse_line(line: bytes, default_ts: str) -> dict[str, Any]:
    """One JSONL line to a validated event (raises ValidationError naming the field)."""
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ValidationError("<line>", f"not valid JSON: {exc}") from None
    if type(record) is not dict:
        raise ValidationError("<record>", f"expected a JSON object, got {type(record).__name__}")
    replay_safe_id(record, line, default_ts)
    return validate(record)


@dataclass
class EncodedBlock:
    """One block of lines, validated and serialised (by a worker or inline), in line order."""

    lines: int = 0
    blank_lines: int = 0
    streams: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    stored: list[bytes] = field(default_factory=list)  # the exact lines to append
    rejects: list[tuple[bytes, str, str]] = field(default_factory=list)  # (line, field, reason)


_INTERN: dict[str, str] = {}


def _interned(text: str) -> str:
    # One object per stream/partition name, so a block pickles each name once.
    return _INTERN.setdefault(text, text)


def encode_block(block: bytes, default_ts: str) -> EncodedBlock:
    """Validate and serialise every line of a block (whole lines; the last may lack its newline)."""
    out = EncodedBlock()
    for raw in block.split(b"\n"):
        line = raw.rstrip(b"\r")
        out.lines += 1
        if not line.strip():
            out.blank_lines += 1
            continue
        try:
            event = parse_line(line, default_ts)
            stream = stream_of(event["type"])
        except ValidationError as exc:
            out.rejects.append((line, exc.field, exc.reason))
            continue
        out.streams.append(_interned(stream))
        out.ids.append(event["event_id"])
        out.partitions.append(_interned("date=" + event["ts"][:10]))
        out.stored.append(orjson.dumps(event) + b"\n")
    return out


def _blocks(stream: IO[bytes]) -> Iterator[bytes]:
    """Blocks of whole lines (without their final newline) of a binary stream."""
    carry = b""
    while True:
        chunk = stream.read(BLOCK_BYTES)
        if not chunk:
            break
        data = carry + chunk if carry else chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            carry = data
            continue
        carry = data[cut + 1 :]
        yield data[:cut]
    if carry:
        yield carry


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


def encoded_blocks(blocks: Iterable[bytes], default_ts: str, workers: int) -> Iterator[EncodedBlock]:
    """Encode blocks in order: inline at first, then (for large inputs) in worker processes."""
    blocks = iter(blocks)
    consumed = 0
    for block in blocks:
        yield encode_block(block, default_ts)
        consumed += len(block)
        if workers and consumed >= PARALLEL_AFTER_BYTES:
            break
    else:
        return
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(workers, initializer=_worker_init, initargs=(os.getpid(),)) as pool:
        # A bounded window of blocks in flight: memory stays flat on any file size.
        window: deque[Any] = deque()
        for block in blocks:
            window.append(pool.apply_async(encode_block, (block, default_ts)))
            if len(window) >= 2 * workers + 2:
                yield window.popleft().get()
        while window:
            yield window.popleft().get()


def ingest_file(
    settings: Settings,
    source: str | Path | IO[bytes],
    *,
    progress: Progress | bool | None = None,
    fsync: FsyncPolicy | None = None,
    batch_records: int = BATCH_RECORDS,
    workers: int | None = None,
) -> IngestInfo:
    """Bulk-load a JSONL file (a path, "-" for stdin, or a binary stream). Idempotent on re-run.

    `workers`: encoding processes (None: one per core up to 4 when there are
    several cores; 0: all in this process). Results are identical either way.
    """
    from dataclasses import replace

    started = time.perf_counter()
    if fsync is not None:
        settings = replace(settings, fsync=fsync)
    if isinstance(source, str | Path) and str(source) != "-":
        path = Path(source)
        handle: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed below
        name = str(path)
        default_ts = format_ts(datetime.fromtimestamp(os.stat(path).st_mtime, UTC))
    else:
        handle = sys.stdin.buffer if isinstance(source, str | Path) else source
        name = "<stdin>" if isinstance(source, str | Path) else getattr(source, "name", "<stream>")
        default_ts = format_ts(utcnow())
    bar = Progress("ingest", enabled=progress if isinstance(progress, bool) else None)
    if isinstance(progress, Progress):
        bar = progress
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
        bad: list[tuple[Any, ValidationError]] = []
        waiting = 0

        def flush() -> None:
            if bad:
                path = log.reject_many(bad, source=f"ingest:{name}")
                info.rejects_path = str(path) if path else info.rejects_path
            for stream, (ids, partitions, lines) in good.items():
                accepted, duplicates = log.append_encoded(stream, ids, partitions, lines)
                info.accepted += accepted
                info.duplicates += duplicates
                if accepted:
                    info.streams[stream] = info.streams.get(stream, 0) + accepted
            bar.update(waiting)
            info.batches += 1
            good.clear()
            bad.clear()

        for block in encoded_blocks(_blocks(handle), default_ts, ingest_workers(workers)):
            info.lines += block.lines
            info.blank_lines += block.blank_lines
            for line, fname, reason in block.rejects:
                bad.append((line, ValidationError(fname, reason)))
                fields[fname.split("[")[0]] += 1
            info.rejected += len(block.rejects)
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
            waiting += len(streams) + len(block.rejects)
            if waiting >= batch_records:
                flush()
                waiting = 0
        flush()
    finally:
        if gc_was_enabled:
            gc.enable()
        log.close()
        bar.close()
        if isinstance(source, str | Path) and str(source) != "-":
            handle.close()
    info.reject_fields = dict(fields.most_common())
    info.elapsed_s = round(time.perf_counter() - started, 3)
    info.rate_per_s = (
        round((info.accepted + info.duplicates + info.rejected) / info.elapsed_s, 1)
        if info.elapsed_s
        else 0.0
    )
    return info
