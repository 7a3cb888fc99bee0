"""Which events are erased: the targets of `erasure` events and everything derived from them.

An `erasure` event (stream `erasures`) names a target: an agent, a user, or one
event. The erased set is every event whose `agent_id` (agent), `user` /
`participant` / `participants` (user) or `event_id` (event) matches a target,
every id an erasure lists in `erased_event_ids`, and, transitively, every
derived event whose `source_event_ids` meet the set (an episode built from an
erased turn quotes it). Erasure events themselves hold ids only, never content.

Every reader hides erased events with `erased_filter(settings)` until the log's
seal rewrites the files (`tiermem.log.erasure`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import duckdb

from tiermem.catalog import _q, jsonl_reader, stream_files
from tiermem.eventlog import ERASED_MARK, EventLog
from tiermem.events import STREAMS, stream_fields
from tiermem.settings import Settings

ERASURE_STREAM = "erasures"


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


# One scanned row: event_id, agent_id, user, participant, participants, source_event_ids,
# is a tombstone, file.
_Row = tuple[str, str | None, str | None, str | None, list[str] | None, list[str] | None, bool, str]


def _scan_rows(settings: Settings) -> list[_Row]:
    """The erasure-relevant columns of every event in every stream but the erasures."""
    con = duckdb.connect(":memory:")
    rows: list[_Row] = []
    try:
        for stream in STREAMS:
            if stream == ERASURE_STREAM:
                continue
            query = _stream_scan(settings, stream)
            if query:
                rows.extend(con.execute(query).fetchall())
    finally:
        con.close()
    return rows


def _add_derived(erased: set[str], derived: list[tuple[str, list[str]]]) -> None:
    """Grow `erased` with every event derived, directly or through others, from an erased one:
    derived events built from erased ones carry their content (quotes, summaries)."""
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


def compute_erased(settings: Settings, targets: ErasureTargets) -> tuple[set[str], dict[str, set[str]]]:
    """(erased event ids, file -> ids in it still holding content) for these targets."""
    if not targets:
        return set(), {}
    rows = _scan_rows(settings)
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
    _add_derived(erased, derived)
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
