"""The projector: applies log events to the hot store, from its checkpoint.

Every event handler here is idempotent and order-tolerant (inserts keyed by
event id, upserts that keep the newest `(ts, event_id)`), so the same events
applied twice, or applied directly by a runtime process (`apply_events`, used
by `record_turn` and the memory tools to read their own writes) and later
again by the projector, give the same rows. That is what makes
`rebuild` reproduce the live store exactly (`content_digest`).

Streams are applied in dependency order: erasures first (so that nothing they
cover is ever added), then knowledge, episodes, relationships, interactions,
transitions, sessions, and retrievals last (their recall-count bumps need the
items they name to exist).

Position: the authoritative position (lines and bytes read per segment) lives
in the hot store's `meta` table and commits together with the rows, so a crash
can never leave the two out of step; it is mirrored to the `projector`
checkpoint (`tiermem.eventlog.Checkpoints`) for operators. Open JSONL segments
are read from the byte offset where the last pass stopped, so catching up
costs what is new, not the size of the log.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from tiermem.runtime import hotstore

from tiermem.eventlog import ERASED_MARK, Checkpoints, EventLog
from tiermem.events import upcast
from tiermem.registry import EVENT_TYPES, PROJECTION_ORDER
from tiermem.settings import Settings

CONSUMER = "projector"
STREAM_ORDER = PROJECTION_ORDER  # declared with the event types (tiermem.registry)
BATCH_EVENTS = 5000
OFFSETS_KEY = "projector_offsets"

TRANSITION_MESSAGES = {
    "task": "[ACTIONS]: <Task actions filtered for brevity>",
    "project": "[ACTIONS]: <Project actions filtered for brevity>",
    "global": "[ACTIONS]: <Actions filtered for brevity>",
}


@dataclass
class ProjectionInfo:
    applied: int = 0
    refused: int = 0  # events covered by an erasure: never (re-)added
    by_type: dict[str, int] = field(default_factory=dict)
    erasures: int = 0
    segments: int = 0
    seconds: float = 0.0
    path: str = "offline"


@dataclass
class RebuildInfo:
    applied: int
    refused: int
    counts: dict[str, int]
    digest: str
    seconds: float
    path: str = "offline"


def kv_fact_id(agent_id: str, scope: str, agent_type: str | None, project_id: str | None, key: str) -> str:
    """`kv:<agent_id>:<scope>:<scope_owner>:<key>` (docs/CONTRACTS.md)."""
    if scope in ("project",):
        owner = project_id or "-"
    elif scope == "agent_type":
        owner = agent_type or "-"
    elif scope == "override":
        owner = f"{project_id or '-'}/{agent_type or '-'}"
    else:
        owner = "-"
    return f"kv:{agent_id}:{scope}:{owner}:{key}"


# ---------------------------------------------------------------- erasure targets


class _Targets:
    """Erasure tombstones loaded from the store; refreshed when the erasure count changes."""

    def __init__(self) -> None:
        self.count = -1
        self.agents: set[str] = set()
        self.users: set[str] = set()
        self.ids: set[str] = set()

    def refresh(self, conn: sqlite3.Connection) -> None:
        count = int(conn.execute("SELECT count(*) FROM erasures").fetchone()[0])
        if count == self.count:
            return
        self.count = count
        self.agents, self.users = set(), set()
        for kind, target in conn.execute("SELECT target_kind, target FROM erasures"):
            (self.agents if kind == "agent" else self.users if kind == "user" else self.ids).add(target)
        self.ids |= {r[0] for r in conn.execute("SELECT event_id FROM erased_ids")}

    def covers(self, event: Mapping[str, Any]) -> bool:
        if self.count <= 0:
            return False
        if event.get("event_id") in self.ids or event.get("agent_id") in self.agents:
            return True
        if self.users:
            if event.get("user") in self.users or event.get("participant") in self.users:
                return True
            if any(p in self.users for p in event.get("participants") or ()):
                return True
        sources = event.get("source_event_ids") or ()
        return any(s in self.ids for s in sources)


def _targets(conn: sqlite3.Connection) -> _Targets:
    # Cached on hot-store connections (hotstore.HotConnection); plain connections load each time.
    t: _Targets | None = getattr(conn, "erasure_targets", None)
    if t is None:
        t = _Targets()
        if isinstance(conn, hotstore.HotConnection):
            conn.erasure_targets = t
    t.refresh(conn)
    return t


# ---------------------------------------------------------------- event handlers


def _newer(conn: sqlite3.Connection, sql: str, key: tuple[Any, ...], ts: str, event_id: str) -> bool | None:
    """None when no row exists, else whether (ts, event_id) is newer than the stored one."""
    row = conn.execute(sql, key).fetchone()
    if row is None:
        return None
    return (ts, event_id) > (row[0], row[1])


def _j(value: Any) -> str:
    return orjson.dumps(value if value is not None else []).decode()


def _apply_interaction(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO wm_items (item_id, event_id, agent_id, ts, kind, level, user, session_id,"
        " project_id, task_id, user_message, agent_response, text) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL)",
        (
            ev["event_id"],
            ev["event_id"],
            ev["agent_id"],
            ev["ts"],
            "interaction",
            ev.get("memory_level") or "global",
            ev.get("user"),
            ev.get("session_id"),
            ev.get("project_id"),
            ev.get("task_id"),
            ev.get("user_message"),
            ev.get("agent_response"),
        ),
    )


def _apply_transition(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    level = ev["to_level"]  # both items belong to the level the agent returns to
    marker = TRANSITION_MESSAGES.get(ev["from_level"], TRANSITION_MESSAGES["global"])
    for suffix, kind, text in ((":1", "transition", marker), (":2", "summary", ev["summary"])):
        conn.execute(
            "INSERT OR IGNORE INTO wm_items (item_id, event_id, agent_id, ts, kind, level, user, session_id,"
            " project_id, task_id, user_message, agent_response, text) VALUES (?,?,?,?,?,?,NULL,?,?,?,NULL,NULL,?)",
            (
                ev["event_id"] + suffix,
                ev["event_id"],
                ev["agent_id"],
                ev["ts"],
                kind,
                level,
                ev.get("session_id"),
                ev.get("project_id"),
                ev.get("task_id"),
                text,
            ),
        )


def _apply_identity(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    newer = _newer(
        conn,
        "SELECT ts, event_id FROM identity WHERE agent_id=?",
        (ev["agent_id"],),
        ev["ts"],
        ev["event_id"],
    )
    if newer is False:
        return
    conn.execute(
        "INSERT OR REPLACE INTO identity (agent_id, content, source, ts, event_id) VALUES (?,?,?,?,?)",
        (ev["agent_id"], ev["content"], ev.get("source"), ev["ts"], ev["event_id"]),
    )


def _upsert_fact(
    conn: sqlite3.Connection, fact_id: str, ev: Mapping[str, Any], values: dict[str, Any]
) -> None:
    row = conn.execute(
        "SELECT updated_at, event_id, created_at FROM facts WHERE fact_id=?", (fact_id,)
    ).fetchone()
    if row is not None and (ev["ts"], ev["event_id"]) <= (row[0], row[1]):
        return
    values = {**values, "fact_id": fact_id, "updated_at": ev["ts"], "event_id": ev["event_id"]}
    if row is None:
        values["created_at"] = ev["ts"]
        cols = ", ".join(values)
        conn.execute(
            f"INSERT INTO facts ({cols}) VALUES ({', '.join('?' * len(values))})", tuple(values.values())
        )
    else:
        sets = ", ".join(f"{k}=?" for k in values if k != "fact_id")
        conn.execute(
            f"UPDATE facts SET {sets} WHERE fact_id=?",
            (*(v for k, v in values.items() if k != "fact_id"), fact_id),
        )


def _apply_fact_set(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    scope = ev.get("scope") or "agent"
    fact_id = ev.get("fact_id") or kv_fact_id(
        ev["agent_id"], scope, ev.get("agent_type"), ev.get("project_id"), ev["key"]
    )
    _upsert_fact(
        conn,
        fact_id,
        ev,
        {
            "agent_id": ev["agent_id"],
            "kind": "kv",
            "scope": scope,
            "agent_type": ev.get("agent_type"),
            "project_id": ev.get("project_id"),
            "key": ev["key"],
            "content": ev["value"],
            "category": "kv",
            "topic": None,
            "participant": ev.get("participant"),
            "status": "active",
            "source": ev.get("source") or "agent",
            "source_event_ids": _j(ev.get("source_event_ids")),
        },
    )


def _apply_fact_removed(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    scope = ev.get("scope") or "agent"
    fact_id = ev.get("fact_id") or kv_fact_id(
        ev["agent_id"], scope, ev.get("agent_type"), ev.get("project_id"), ev["key"]
    )
    exists = conn.execute("SELECT 1 FROM facts WHERE fact_id=?", (fact_id,)).fetchone()
    values: dict[str, Any] = {"status": "removed"}
    if exists is None:
        values.update(
            agent_id=ev["agent_id"],
            kind="kv",
            scope=scope,
            agent_type=ev.get("agent_type"),
            project_id=ev.get("project_id"),
            key=ev["key"],
            content="",
            category="kv",
            source="agent",
        )
    _upsert_fact(conn, fact_id, ev, values)


DECISION_STATUS = {
    "deactivated": "inactive",
    "superseded": "active",
    "archived": "archived",
    "rejected": "rejected",
    "pending": "pending",
}


def _apply_proposed(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO proposals (proposal_id, agent_id, origin, is_correction, participant, ts)"
        " VALUES (?,?,?,?,?,?)",
        (
            ev["event_id"],
            ev["agent_id"],
            ev.get("origin"),
            int(bool(ev.get("is_correction"))),
            ev.get("participant"),
            ev["ts"],
        ),
    )


def _apply_decided(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    fact_id = ev.get("fact_id") or ev.get("proposal_id") or ev["event_id"]
    exists = conn.execute("SELECT 1 FROM facts WHERE fact_id=?", (fact_id,)).fetchone()
    if exists is None and not ev.get("content"):
        return  # a decision about nothing we know (e.g. a rejection): nothing to show
    status = ev.get("status") or DECISION_STATUS.get(ev["decision"], "active")
    origin, is_correction = None, 0
    if ev.get("proposal_id"):
        row = conn.execute(
            "SELECT origin, is_correction FROM proposals WHERE proposal_id=?", (ev["proposal_id"],)
        ).fetchone()
        if row is not None:
            origin, is_correction = row[0], int(row[1])
    decided_by = ev.get("decided_by") or "auto"
    source = "user" if decided_by == "user" or origin == "user" else origin or decided_by
    values: dict[str, Any] = {"status": status, "source": source, "is_correction": is_correction}
    for name in ("content", "scope", "category", "topic", "key", "participant", "project_id", "agent_type"):
        if ev.get(name) is not None:
            values[name] = ev[name]
    ids = [i for i in (ev.get("proposal_id"), *(ev.get("source_event_ids") or ())) if i]
    values["source_event_ids"] = _j(ids)
    if exists is None:
        values.setdefault("scope", "agent")
        values.update(agent_id=ev["agent_id"], kind="knowledge")
    _upsert_fact(conn, fact_id, ev, values)


def _apply_episode(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, key_quotes, participants, start_ts, end_ts,"
        " importance, important, emotional_context, kind, project_id, source_event_ids, recall_count)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,0) ON CONFLICT (episode_id) DO NOTHING",
        (
            ev["event_id"],
            ev["agent_id"],
            ev["name"],
            ev["summary"],
            _j(ev.get("key_quotes")),
            _j(ev.get("participants")),
            ev["start_ts"],
            ev["end_ts"],
            int(ev["importance"]),
            int(bool(ev.get("important"))),
            ev.get("emotional_context"),
            ev.get("kind") or "episode",
            ev.get("project_id"),
            _j(ev.get("source_event_ids")),
        ),
    )


def _apply_relationship(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    key = (ev["agent_id"], ev["participant"])
    newer = _newer(
        conn,
        "SELECT ts, event_id FROM relationships WHERE agent_id=? AND participant=?",
        key,
        ev["ts"],
        ev["event_id"],
    )
    if newer is False:
        return
    conn.execute(
        "INSERT OR REPLACE INTO relationships (agent_id, participant, summary, rapport, trust, last_spoke_ts,"
        " interactions, ts, event_id) VALUES (?,?,?,?,?,?,?,?,?)",
        (
            *key,
            ev["summary"],
            ev.get("rapport"),
            ev.get("trust"),
            ev.get("last_spoke_ts"),
            ev.get("interactions"),
            ev["ts"],
            ev["event_id"],
        ),
    )


def _apply_retrieval(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    item_ids = list(ev.get("item_ids") or [])
    cur = conn.execute(
        "INSERT OR IGNORE INTO retrievals (event_id, agent_id, ts, tool, query, participant, item_ids, scores,"
        " tokens, reason, session_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            ev["event_id"],
            ev["agent_id"],
            ev["ts"],
            ev["tool"],
            ev.get("query"),
            ev.get("participant"),
            _j(item_ids),
            orjson.dumps(ev.get("scores")).decode() if ev.get("scores") is not None else None,
            ev.get("tokens"),
            ev.get("reason"),
            ev.get("session_id"),
        ),
    )
    if cur.rowcount != 1:
        return  # already counted
    for item_id in item_ids:
        conn.execute("UPDATE facts SET recall_count = recall_count + 1 WHERE fact_id=?", (item_id,))
        conn.execute("UPDATE episodes SET recall_count = recall_count + 1 WHERE episode_id=?", (item_id,))


def _apply_session_ended(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO sessions (session_id, agent_id, ended_ts, event_id) VALUES (?,?,?,?)",
        (ev["session_id"], ev["agent_id"], ev["ts"], ev["event_id"]),
    )


def _apply_erasure(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    """Delete everything the erasure covers from every table at once (one transaction)."""
    conn.execute(
        "INSERT OR IGNORE INTO erasures (event_id, target_kind, target, ts) VALUES (?,?,?,?)",
        (ev["event_id"], ev["target_kind"], ev["target"], ev["ts"]),
    )
    ids = set(ev.get("erased_event_ids") or ())
    if ev["target_kind"] == "event":
        ids.add(ev["target"])
    conn.executemany("INSERT OR IGNORE INTO erased_ids (event_id) VALUES (?)", [(i,) for i in ids])
    kind, target = ev["target_kind"], ev["target"]
    if kind == "agent":
        for table in (
            "wm_items",
            "identity",
            "facts",
            "episodes",
            "relationships",
            "retrievals",
            "sessions",
            "proposals",
        ):
            conn.execute(f"DELETE FROM {table} WHERE agent_id=?", (target,))
    elif kind == "user":
        conn.execute("DELETE FROM wm_items WHERE user=?", (target,))
        conn.execute("DELETE FROM facts WHERE participant=?", (target,))
        conn.execute(
            "DELETE FROM episodes WHERE EXISTS (SELECT 1 FROM json_each(episodes.participants) WHERE value=?)",
            (target,),
        )
        conn.execute("DELETE FROM relationships WHERE participant=?", (target,))
        conn.execute("DELETE FROM retrievals WHERE participant=?", (target,))
        conn.execute("DELETE FROM proposals WHERE participant=?", (target,))
    # Every row made from an erased event goes too, whatever the target kind.
    conn.execute("DELETE FROM wm_items WHERE event_id IN (SELECT event_id FROM erased_ids)")
    conn.execute("DELETE FROM identity WHERE event_id IN (SELECT event_id FROM erased_ids)")
    conn.execute("DELETE FROM relationships WHERE event_id IN (SELECT event_id FROM erased_ids)")
    conn.execute("DELETE FROM retrievals WHERE event_id IN (SELECT event_id FROM erased_ids)")
    conn.execute("DELETE FROM proposals WHERE proposal_id IN (SELECT event_id FROM erased_ids)")
    conn.execute(
        "DELETE FROM facts WHERE event_id IN (SELECT event_id FROM erased_ids) OR fact_id IN (SELECT event_id FROM erased_ids)"
        " OR EXISTS (SELECT 1 FROM json_each(facts.source_event_ids) j WHERE j.value IN (SELECT event_id FROM erased_ids))"
    )
    conn.execute(
        "DELETE FROM episodes WHERE episode_id IN (SELECT event_id FROM erased_ids)"
        " OR EXISTS (SELECT 1 FROM json_each(episodes.source_event_ids) j WHERE j.value IN (SELECT event_id FROM erased_ids))"
    )


# Projection kind (declared per event type in tiermem.registry) -> handler.
HANDLERS = {
    "turn": _apply_interaction,
    "transition": _apply_transition,
    "identity": _apply_identity,
    "fact_set": _apply_fact_set,
    "fact_removed": _apply_fact_removed,
    "proposal": _apply_proposed,
    "decision": _apply_decided,
    "episode": _apply_episode,
    "relationship": _apply_relationship,
    "retrieval": _apply_retrieval,
    "session_end": _apply_session_ended,
    "erasure": _apply_erasure,
}


def unhandled_types() -> list[str]:
    """Event types the registry says are projected, with no handler here for their kind."""
    return sorted(
        f"{t.name} ({t.projection})"
        for t in EVENT_TYPES.values()
        if t.projection and t.projection not in HANDLERS
    )


if unhandled_types():  # fail at import, not by silently skipping events
    raise RuntimeError(f"projector: no handler for the projection kind of {', '.join(unhandled_types())}")


def apply_events(
    conn: sqlite3.Connection, events: Iterable[Mapping[str, Any]], info: ProjectionInfo | None = None
) -> ProjectionInfo:
    """Apply validated events to the hot store; call inside a write transaction."""
    info = info or ProjectionInfo()
    targets = _targets(conn)
    for ev in events:
        etype = ev.get("type")
        spec = EVENT_TYPES.get(str(etype))
        kind = spec.projection if spec is not None else None
        if kind is None:
            continue
        handler = HANDLERS[kind]
        if kind == "erasure":
            handler(conn, ev)
            targets.count = -1
            targets.refresh(conn)
            info.erasures += 1
        elif targets.covers(ev):
            info.refused += 1
            continue
        else:
            handler(conn, ev)
        info.applied += 1
        info.by_type[str(etype)] = info.by_type.get(str(etype), 0) + 1
    return info


def apply_now(conn: sqlite3.Connection, events: Iterable[Mapping[str, Any]]) -> ProjectionInfo:
    """Apply events in their own transaction (the runtime reading its own writes)."""
    with hotstore.write_transaction(conn):
        info = apply_events(conn, events)
    if info.erasures:
        hotstore.scrub_after_erasure(conn)
    return info


# ---------------------------------------------------------------- reading the log


def _segment_events(
    log: EventLog, stream: str, offsets: dict[str, list[int]]
) -> Iterator[tuple[str, int, int, dict[str, Any] | None]]:
    """Yield (segment, lines_after, bytes_after, event|None) for what is new since `offsets`.

    `offsets[segment] = [lines, bytes, inode]` for JSONL, `[lines, -1, mtime_ns]` for Parquet.
    An erased line (a tombstone) advances the position but yields event None.
    """
    for partition, stem, path in log.segments(stream):
        segment = f"{stream}/{partition}/{stem}"
        lines, nbytes, stamp = (offsets.get(segment) or [0, 0, 0])[:3]
        try:
            st = path.stat()
        except FileNotFoundError:
            path = path.with_suffix(".parquet")
            st = path.stat()
        if path.suffix == ".parquet":
            if nbytes == -1 and stamp == st.st_mtime_ns:
                continue
            from tiermem.sealed import parquet_events  # pyarrow only for sealed data

            n = -1
            for n, event in enumerate(parquet_events(path, keep_erased=True)):
                if n >= lines:
                    yield segment, n + 1, -1, None if event.get(ERASED_MARK) else event
            # Record the stamp even when nothing was new, so the file is not read again.
            yield segment, max(lines, n + 1), -2, {"_mtime_ns": st.st_mtime_ns}
            continue
        if st.st_ino == stamp and st.st_size == nbytes:
            continue
        with open(path, "rb") as fh:
            if st.st_ino == stamp and st.st_size > nbytes:
                fh.seek(nbytes)
                base_lines, base_bytes = lines, nbytes
                data = fh.read()
            else:  # new, rewritten (erasure) or replaced: count lines from the start
                data = fh.read()
                base_lines, base_bytes = 0, 0
        end = data.rfind(b"\n") + 1  # a line still being written is not yet visible
        pos = 0
        n = base_lines
        while pos < end:
            nl = data.index(b"\n", pos)
            line = data[pos:nl]
            pos = nl + 1
            n += 1
            if n <= lines:
                continue
            event = orjson.loads(line)
            yield segment, n, base_bytes + pos, None if event.get(ERASED_MARK) else upcast(event)
        yield segment, n, base_bytes + end, {"_ino": st.st_ino}


class _ProjectorLock:
    """One projector per data root at a time; others wait, then find little left to do."""

    def __init__(self, settings: Settings) -> None:
        settings.locks_dir.mkdir(parents=True, exist_ok=True)
        self.path = settings.locks_dir / "projector.lock"
        self.fd = -1

    def __enter__(self) -> _ProjectorLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _flush(
    conn: sqlite3.Connection,
    batch: list[dict[str, Any]],
    pending: dict[str, list[int]],
    offsets: dict[str, list[int]],
    info: ProjectionInfo,
) -> None:
    """Apply a batch and move the position in the same transaction."""
    with hotstore.write_transaction(conn):
        apply_events(conn, batch, info)
        offsets.update(pending)
        hotstore.set_meta(conn, OFFSETS_KEY, orjson.dumps(offsets).decode())
    batch.clear()
    pending.clear()


def _project_locked(settings: Settings, conn: sqlite3.Connection) -> ProjectionInfo:
    started = time.perf_counter()
    info = ProjectionInfo()
    offsets: dict[str, list[int]] = orjson.loads(hotstore.get_meta(conn, OFFSETS_KEY) or "{}")
    log = EventLog(settings)
    try:
        for stream in STREAM_ORDER:
            batch: list[dict[str, Any]] = []
            pending: dict[str, list[int]] = {}

            for segment, lines, nbytes, event in _segment_events(log, stream, offsets):
                old = offsets.get(segment) or [0, 0, 0]
                cur = pending.get(segment) or list(old)
                if event is not None and "_ino" in event:
                    pending[segment] = [lines, nbytes, event["_ino"]]
                    continue
                if event is not None and "_mtime_ns" in event:
                    pending[segment] = [lines, -1, event["_mtime_ns"]]
                    continue
                pending[segment] = [lines, nbytes, cur[2]]
                if event is not None:
                    batch.append(event)
                if len(batch) >= BATCH_EVENTS:
                    _flush(conn, batch, pending, offsets, info)
            if batch or pending:
                _flush(conn, batch, pending, offsets, info)
    finally:
        log.close()
    if info.erasures:
        hotstore.scrub_after_erasure(conn)
    info.segments = len(offsets)
    Checkpoints(settings).save(CONSUMER, {seg: pos[0] for seg, pos in offsets.items()})
    info.seconds = round(time.perf_counter() - started, 4)
    return info


def project(settings: Settings, conn: sqlite3.Connection | None = None) -> ProjectionInfo:
    """Bring the hot store up to date with the log; returns what was applied."""
    own = conn is None
    conn = conn or hotstore.open_hot_store(settings)
    try:
        with _ProjectorLock(settings):
            return _project_locked(settings, conn)
    finally:
        if own:
            conn.close()


def _remove_hot_files(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        p = db.with_name(db.name + suffix)
        if p.exists():
            p.unlink()


def rebuild(settings: Settings) -> RebuildInfo:
    """Delete the hot store and rebuild it from the log; same log, same content digest."""
    started = time.perf_counter()
    with _ProjectorLock(settings):
        _remove_hot_files(settings.hot_db)
        (settings.checkpoints_dir / f"{CONSUMER}.json").unlink(missing_ok=True)
        conn = hotstore.open_hot_store(settings)
        try:
            info = _project_locked(settings, conn)
            counts = hotstore.table_counts(conn)
            digest = hotstore.store_digest(conn)
        finally:
            conn.close()
    return RebuildInfo(
        applied=info.applied,
        refused=info.refused,
        counts=counts,
        digest=digest,
        seconds=round(time.perf_counter() - started, 3),
    )


def content_digest(settings: Settings) -> str:
    """Order-independent hash of the hot store's content tables."""
    conn = hotstore.open_hot_store(settings)
    try:
        return hotstore.store_digest(conn)
    finally:
        conn.close()
