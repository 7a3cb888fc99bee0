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
`_quarantine/` are scrubbed of matching records. Until the next seal, readers
hide erased events with `erased_filter(settings)`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tiermem.log.catalog import _q, jsonl_reader, stream_files
from tiermem.log.events import STREAMS, stream_fields, upcast
from tiermem.log.store import ERASED_MARK, EventLog, fsync_path, line_event_id, write_atomic
from tiermem.settings import Settings

ERASURE_STREAM = "erasures"
TOMBSTONE_FIELDS = ("event_id", "type", "ts", "schema_version")


@dataclass
class ErasureTargets:
    agents: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    event_ids: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.agents or self.users or self.event_ids)

    def matches(self, event: Mapping[str, Any]) -> bool:
        """Does this event name a target directly (not counting derivation)?"""
        if event.get("event_id") in self.event_ids or event.get("agent_id") in self.agents:
            return True
        if not self.users:
            return False
        if event.get("user") in self.users or event.get("participant") in self.users:
            return True
        participants = event.get("participants")
        return isinstance(participants, list) and any(p in self.users for p in participants)


@dataclass
class ErasureReport:
    erased_events: int = 0  # events turned into tombstones by this run
    files_rewritten: int = 0
    scrubbed_records: int = 0  # rejects / quarantine lines removed
    targets: int = 0
    rewritten: list[str] = field(default_factory=list)


def load_targets(settings: Settings, log: EventLog | None = None) -> ErasureTargets:
    own = log is None
    log = log or EventLog(settings)
    targets = ErasureTargets()
    try:
        for _seg, _line, ev in log.read(ERASURE_STREAM):
            kind, target = ev.get("target_kind"), str(ev.get("target"))
            if kind == "agent":
                targets.agents.add(target)
            elif kind == "user":
                targets.users.add(target)
            elif kind == "event":
                targets.event_ids.add(target)
            targets.event_ids.update(ev.get("erased_event_ids") or [])
    finally:
        if own:
            log.close()
    return targets


def _stream_scan(settings: Settings, stream: str) -> str | None:
    """Every row of a stream (tombstones included) with the columns erasure needs and its file."""
    cols = stream_fields(stream)
    parquet, jsonl = stream_files(settings.log_dir, stream)
    wanted = ["event_id", "agent_id", "user", "participant", "participants", "source_event_ids"]

    def select(present: Iterable[str]) -> str:
        have = set(present)
        parts = []
        for c in wanted:
            if c in have:
                parts.append(f'"{c}"')
            else:
                kind = "VARCHAR[]" if c in ("participants", "source_event_ids") else "VARCHAR"
                parts.append(f'CAST(NULL AS {kind}) AS "{c}"')
        parts.append(f'coalesce("{ERASED_MARK}", false) AS erased')
        return ", ".join(parts)

    queries = []
    if parquet:
        files = ", ".join(_q(str(p)) for p in parquet)
        queries.append(
            f"SELECT {select(cols)}, filename FROM read_parquet([{files}], union_by_name = true, filename = true)"
        )
    if jsonl:
        queries.append(f"SELECT {select(cols)}, filename FROM {jsonl_reader(jsonl, stream, filename=True)}")
    return " UNION ALL ".join(queries) if queries else None


def compute_erased(settings: Settings, targets: ErasureTargets) -> tuple[set[str], dict[str, set[str]]]:
    """(erased event ids, file -> ids in it still holding content) for these targets."""
    if not targets:
        return set(), {}
    con = duckdb.connect(":memory:")
    rows: list[
        tuple[str, str | None, str | None, str | None, list[str] | None, list[str] | None, bool, str]
    ] = []
    try:
        for stream in STREAMS:
            if stream == ERASURE_STREAM:
                continue
            query = _stream_scan(settings, stream)
            if query:
                rows.extend(con.execute(query).fetchall())
    finally:
        con.close()
    erased: set[str] = set(targets.event_ids)
    derived: list[tuple[str, list[str]]] = []
    for eid, agent, user, participant, participants, sources, is_tomb, _file in rows:
        event: dict[str, Any] = {"event_id": eid, "agent_id": agent, "user": user, "participant": participant}
        if participants:
            event["participants"] = participants
        if is_tomb or targets.matches(event):
            erased.add(eid)
        elif sources:
            derived.append((eid, sources))
    # Derived events built from erased ones carry their content (quotes, summaries).
    changed = True
    while changed:
        changed = False
        remaining = []
        for eid, sources in derived:
            if any(s in erased for s in sources):
                erased.add(eid)
                changed = True
            else:
                remaining.append((eid, sources))
        derived = remaining
    affected: dict[str, set[str]] = {}
    for eid, *_rest, is_tomb, file in rows:
        if eid in erased and not is_tomb:
            affected.setdefault(file, set()).add(eid)
    return erased, affected


def erased_ids(settings: Settings) -> set[str]:
    return compute_erased(settings, load_targets(settings))[0]


def erased_filter(settings: Settings) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate that is True for an event that has been erased (hide it).

    Computed once from the log; events appended later that name a target
    directly, or derive from an erased event, are caught too.
    """
    targets = load_targets(settings)
    if not targets:
        return lambda event: False
    ids = compute_erased(settings, targets)[0]

    def is_erased(event: Mapping[str, Any]) -> bool:
        if event.get(ERASED_MARK) or event.get("event_id") in ids or targets.matches(event):
            return True
        sources = event.get("source_event_ids") or []
        return any(s in ids for s in sources)

    return is_erased


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


def apply_erasures(settings: Settings, log: EventLog) -> ErasureReport:
    """Rewrite every file that still holds content of an erased event (see module doc)."""
    report = ErasureReport()
    targets = load_targets(settings, log)
    if not targets:
        return report
    report.targets = len(targets.agents) + len(targets.users) + len(targets.event_ids)
    ids, affected = compute_erased(settings, targets)
    for file, file_ids in sorted(affected.items()):
        path = Path(file)
        if path.suffix == ".parquet":
            n = rewrite_parquet(settings, path, file_ids)
        else:
            n = rewrite_jsonl(settings, log, path, file_ids)
        if n:
            report.erased_events += n
            report.files_rewritten += 1
            report.rewritten.append(str(path))
    report.scrubbed_records = scrub_side_files(settings, targets, ids)
    return report
