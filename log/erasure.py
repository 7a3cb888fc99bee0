"""Erasure: a user's deletion request reaches the cold files at the next seal.

An `erasure` event (stream `erasures`) names a target: an agent, a user, or one
event. The erased set is every event whose `agent_id` (agent), `user` /
`participant` / `participants` (user) or `event_id` (event) matches a target,
every id an erasure lists in `erased_event_ids`, and, transitively, every
derived event whose `source_event_ids` meet the set (an episode built from an
erased turn quotes it). Erasure events themselves hold ids only, never content.

`apply_erasures` (called by `tiermem seal`) rewrites every file holding an
erased event, sealed Parquet or JSONL (today's open segments too, under the
stream lock; writers notice the new inode and reopen), replacing the event by a
tombstone that keeps only `event_id`, `type`, `ts`, `schema_version` and
`_erased: true`. Keeping the line keeps every checkpoint position valid, and
keeping the id in the index means re-ingesting the same turn stays a duplicate:
what was forgotten is not brought back by a replay. `_rejects/` and
`_quarantine/` are scrubbed of matching records. `forget` runs this at once
for JSONL and the side files (`parquet=False`); sealed Parquet is rewritten at
the next seal. Until then, readers hide erased events with
`erased_filter(settings)`.

With an object-store cold tier (`cold_url`), the same pass (`parquet=True`)
deletes the erased events from the stream tables through the table format's
own delete and vacuums the replaced files out of the bucket
(`tiermem.log.cold_table`). The table keeps no tombstone: nothing there
counts positions, and the local log keeps the id for replays.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tiermem.durable_files import fsync_path, line_event_id, write_atomic
from tiermem.erased import ErasureTargets, compute_erased, load_targets
from tiermem.eventlog import ERASED_MARK, EventLog
from tiermem.events import upcast
from tiermem.groupcommit import forget_synced
from tiermem.settings import Settings

TOMBSTONE_FIELDS = ("event_id", "type", "ts", "schema_version")


@dataclass
class ErasureReport:
    erased_events: int = 0  # events turned into tombstones by this run
    files_rewritten: int = 0
    scrubbed_records: int = 0  # rejects / quarantine lines removed
    targets: int = 0
    table_deleted_rows: int = 0  # rows deleted from the object-store tables
    table_files_removed: int = 0  # their replaced data files, vacuumed out of the bucket
    rewritten: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ rewriting


def tombstone(event: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: event[k] for k in TOMBSTONE_FIELDS if event.get(k) is not None}
    out[ERASED_MARK] = True
    return out


def rewrite_jsonl(settings: Settings, log: EventLog, path: Path, ids: set[str]) -> int:
    """Tombstone these events in a JSONL segment, under the stream lock; return how many."""
    from tiermem.log.seal import StreamLock  # local: seal imports this module

    stream, partition, stem = path.parent.parent.name, path.parent.name, path.stem
    with StreamLock(settings, stream):
        if not path.exists():
            return 0
        fd = os.open(path, os.O_RDWR)
        try:
            log.repair_tail(stream, partition, stem, fd)  # also brings the id index up to date
        finally:
            os.close(fd)
        lines = path.read_bytes().split(b"\n")
        count = 0
        for i, line in enumerate(lines):
            if line and line_event_id(line) in ids:
                event = orjson.loads(line)
                if not event.get(ERASED_MARK):
                    lines[i] = orjson.dumps(tombstone(event))
                    count += 1
        if count:
            data = b"\n".join(lines)
            write_atomic(path, data)
            # A new file, maybe under a recycled inode number and shorter than the old one:
            # the stream's "durable up to" no longer says anything about its bytes.
            forget_synced(path.parent.parent / ".sync")
            segment = f"{stream}/{partition}/{stem}"
            # Every line of the new file is already indexed: say so, in its own byte offsets.
            conn = log._index()
            conn.execute("INSERT OR REPLACE INTO indexed VALUES (?, ?)", (segment, len(data)))
            log.forget_segment(segment)
    return count


def rewrite_parquet(settings: Settings, path: Path, ids: set[str]) -> int:
    """Tombstone these events in a sealed segment (same schema, same row order); return how many."""
    from tiermem.log.seal import StreamLock, verify_parquet

    table = pq.read_table(path)
    mask = pc.is_in(table.column("event_id"), value_set=pa.array(sorted(ids), type=pa.string()))
    if ERASED_MARK in table.column_names:
        mask = pc.and_(mask, pc.invert(pc.fill_null(table.column(ERASED_MARK), False)))
    count = pc.sum(mask).as_py() or 0
    if not count:
        return 0
    columns = []
    for name in table.column_names:
        col = table.column(name)
        if name == ERASED_MARK:
            col = pc.if_else(mask, pa.scalar(True), col)
        elif name not in TOMBSTONE_FIELDS:
            col = pc.if_else(mask, pa.nulls(len(table), col.type), col)
        columns.append(col)
    new = pa.table(columns, schema=table.schema)
    tmp = path.with_name(f".{path.name}.erase.tmp")
    pq.write_table(new, tmp, compression="zstd")
    verify_parquet(tmp, [e.encode() for e in table.column("event_id").to_pylist()])
    with StreamLock(settings, path.parent.parent.name):
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fsync_path(path.parent)
    return int(count)


def _side_record_matches(line: bytes, targets: ErasureTargets, ids: set[str]) -> bool:
    """Does a rejects/quarantine line hold content of an erased target?"""
    try:
        outer = orjson.loads(line)
    except orjson.JSONDecodeError:
        outer = None
    raw = ""
    if isinstance(outer, dict):
        raw = str(outer.get("record") or outer.get("bytes") or "")
    text = raw or line.decode("utf-8", errors="replace")
    try:
        inner = orjson.loads(text)
        if isinstance(inner, dict):
            event = upcast(inner)
            if targets.matches(event) or event.get("event_id") in ids:
                return True
            sources = event.get("source_event_ids")
            if isinstance(sources, list) and any(s in ids for s in sources):
                return True
    except (orjson.JSONDecodeError, TypeError, ValueError, Exception):
        pass
    # Unparseable (a torn line, a broken record): match the target as a JSON string.
    needles = [orjson.dumps(t).decode() for t in targets.agents | targets.users]
    needles += [t for t in targets.event_ids | ids if len(t) >= 8]
    return any(n in text for n in needles)


def scrub_side_files(settings: Settings, targets: ErasureTargets, ids: set[str]) -> int:
    """Remove matching records from `_rejects/` and `_quarantine/`; return how many."""
    removed = 0
    for root in (settings.rejects_dir, settings.quarantine_dir):
        if not root.exists():
            continue
        for path in sorted(root.rglob("*.jsonl")):
            lines = path.read_bytes().split(b"\n")
            kept = [ln for ln in lines if not (ln and _side_record_matches(ln, targets, ids))]
            if len(kept) != len(lines):
                removed += len(lines) - len(kept)
                write_atomic(path, b"\n".join(kept))
    return removed


def apply_erasures(settings: Settings, log: EventLog, *, parquet: bool = True) -> ErasureReport:
    """Rewrite every file that still holds content of an erased event (see module doc).

    `parquet=False`: the JSONL segments and the rejects/quarantine files only
    (what `forget` does at once, so that not even a raw read of today's files
    finds the content); sealed Parquet waits for the next seal.
    """
    report = ErasureReport()
    targets = load_targets(settings, log)
    if not targets:
        return report
    report.targets = len(targets.agents) + len(targets.users) + len(targets.event_ids)
    ids, affected = compute_erased(settings, targets)
    for file, file_ids in sorted(affected.items()):
        path = Path(file)
        if path.suffix == ".parquet":
            if not parquet:
                continue
            n = rewrite_parquet(settings, path, file_ids)
        else:
            n = rewrite_jsonl(settings, log, path, file_ids)
        if n:
            report.erased_events += n
            report.files_rewritten += 1
            report.rewritten.append(str(path))
    report.scrubbed_records = scrub_side_files(settings, targets, ids)
    if parquet and settings.cold_url:
        from tiermem.log import cold_table  # local: only with an object-store cold tier

        cold = cold_table.delete_events(settings, ids)
        report.table_deleted_rows, report.table_files_removed = cold.deleted_rows, cold.files_removed
    return report
