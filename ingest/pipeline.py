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
"""

from __future__ import annotations

import gc
import hashlib
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from tiermem.errors import ValidationError
from tiermem.ids import format_ts, to_ms, utcnow
from tiermem.log.events import validate
from tiermem.log.store import AppendResult, EventLog
from tiermem.output import Progress
from tiermem.settings import FsyncPolicy, Settings

BATCH_RECORDS = 20_000
CHUNK_BYTES = 8 << 20


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


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Complete lines of a binary stream, read in large chunks (the last line may lack its newline)."""
    carry = b""
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            break
        data = carry + chunk if carry else chunk
        parts = data.split(b"\n")
        carry = parts.pop()
        yield from parts
    if carry:
        yield carry


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


def ingest_file(
    settings: Settings,
    source: str | Path | IO[bytes],
    *,
    progress: Progress | bool | None = None,
    fsync: FsyncPolicy | None = None,
    batch_records: int = BATCH_RECORDS,
) -> IngestInfo:
    """Bulk-load a JSONL file (a path, "-" for stdin, or a binary stream). Idempotent on re-run."""
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
        good: list[dict[str, Any]] = []
        bad: list[tuple[Any, ValidationError]] = []

        def flush() -> None:
            if bad:
                path = log.reject_many(bad, source=f"ingest:{name}")
                info.rejects_path = str(path) if path else info.rejects_path
            if good:
                for res in log.append_validated(good):
                    if res.duplicate:
                        info.duplicates += 1
                    else:
                        info.accepted += 1
                        info.streams[res.stream] = info.streams.get(res.stream, 0) + 1
            bar.update(len(good) + len(bad))
            info.batches += 1
            good.clear()
            bad.clear()

        for raw in _lines(handle):
            line = raw.rstrip(b"\r")
            info.lines += 1
            if not line.strip():
                info.blank_lines += 1
                continue
            try:
                good.append(parse_line(line, default_ts))
            except ValidationError as exc:
                bad.append((line, exc))
                info.rejected += 1
                fields[exc.field.split("[")[0]] += 1
            if len(good) + len(bad) >= batch_records:
                flush()
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
