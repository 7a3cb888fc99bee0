"""Applying log events to the SQLite hot store: the SQLite backend's projection handlers.

Every handler is idempotent and order-tolerant (inserts keyed by event id,
upserts that keep the newest `(ts, event_id)`), so the same events applied
twice, or applied directly by a runtime process and later again by the
projector, give the same rows. That is what makes `rebuild` reproduce the
live store exactly (`SQLiteHotStore.digest`).

Every row gets its `owner` (the user(s) it was derived from, which decides
who may read it: `tiermem.runtime.visibility`) from the event and the rows it
cites: a turn's user; a derived event's participant(s) plus the owners of the
turns, proposals and episodes in its `source_event_ids`. The projector
applies turns before what is derived from them, so those rows exist.

An erasure deletes everything it covers from every table in one
transaction, and its tombstones refuse the same content later.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from typing import Any

import orjson
from tiermem.runtime import hotstore
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.store import ProjectionInfo, kv_fact_id
from tiermem.runtime.visibility import merge_owners, owner_key

from tiermem.attachments import with_attachments
from tiermem.registry import EVENT_TYPES
from tiermem.topics import detect_topic

OWNER_LOOKUP_CHUNK = 400  # ids per lookup query (well under SQLite's variable limit)

TRANSITION_MESSAGES = {
    "task": "[ACTIONS]: <Task actions filtered for brevity>",
    "project": "[ACTIONS]: <Project actions filtered for brevity>",
    "global": "[ACTIONS]: <Actions filtered for brevity>",
}


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


def json_values(conn: Any, column: str) -> str:
    """A FROM item `j` with one row per element of the JSON list in `column` (its text: `j.value`)."""
    if getattr(conn, "dialect", "sqlite") == "postgres":
        return f"jsonb_array_elements_text(coalesce({column}, '[]')::jsonb) AS j(value)"
    return f"json_each({column}) AS j"


def _targets(conn: sqlite3.Connection) -> _Targets:
    # Cached on hot-store connections (hotstore.HotConnection, pg_hotstore.PgConnection);
    # plain connections load each time.
    t: _Targets | None = getattr(conn, "erasure_targets", None)
    if t is None:
        t = _Targets()
        if hasattr(conn, "erasure_targets"):
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


def _owners_of(conn: sqlite3.Connection, ids: Iterable[str]) -> set[str]:
    """The owners of the rows made from these events (turns, proposals, episodes)."""
    wanted = sorted({i for i in ids if i})
    found: set[str] = set()
    for start in range(0, len(wanted), OWNER_LOOKUP_CHUNK):
        chunk = wanted[start : start + OWNER_LOOKUP_CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT owner FROM wm_items WHERE item_id IN ({marks}) AND owner IS NOT NULL"
            f" UNION SELECT owner FROM proposals WHERE proposal_id IN ({marks}) AND owner IS NOT NULL"
            f" UNION SELECT owner FROM episodes WHERE episode_id IN ({marks}) AND owner IS NOT NULL",
            (*chunk, *chunk, *chunk),
        )
        for (owner,) in rows:
            found.add(owner)
    return found


def _derived_owner(conn: sqlite3.Connection, ev: Mapping[str, Any], *direct: str | None) -> str | None:
    """Owner of a derived row: the users named directly plus the owners of its sources."""
    return merge_owners(*direct, *_owners_of(conn, ev.get("source_event_ids") or ()))


def _apply_interaction(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    user_message, agent_response = ev.get("user_message") or "", ev.get("agent_response") or ""
    # Shared media are read with the side that shared them (see tiermem.attachments).
    if ev.get("attachments"):
        if user_message.strip() or not agent_response.strip():
            user_message = with_attachments(user_message, ev["attachments"])
        else:
            agent_response = with_attachments(agent_response, ev["attachments"])
    conn.execute(
        'INSERT INTO wm_items (item_id, event_id, agent_id, ts, kind, level, "user", session_id,'
        " project_id, task_id, user_message, agent_response, text, owner, topic)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL,?,?) ON CONFLICT DO NOTHING",
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
            user_message,
            agent_response,
            ev.get("user") or None,
            detect_topic(user_message, agent_response),
        ),
    )


def _session_owners(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> set[str]:
    """The users of the session's turns up to this event (work done for them)."""
    if not ev.get("session_id"):
        return set()
    rows = conn.execute(
        "SELECT DISTINCT owner FROM wm_items WHERE agent_id=? AND session_id=? AND ts <= ?"
        " AND kind='interaction' AND owner IS NOT NULL",
        (ev["agent_id"], ev["session_id"], ev["ts"]),
    )
    return {r[0] for r in rows}


def _apply_transition(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    level = ev["to_level"]  # both items belong to the level the agent returns to
    marker = TRANSITION_MESSAGES.get(ev["from_level"], TRANSITION_MESSAGES["global"])
    # A summary of work done in a user's session (or from their turns) is theirs.
    owner = _derived_owner(conn, ev, *_session_owners(conn, ev))
    for suffix, kind, text in ((":1", "transition", marker), (":2", "summary", ev["summary"])):
        conn.execute(
            'INSERT INTO wm_items (item_id, event_id, agent_id, ts, kind, level, "user", session_id,'
            " project_id, task_id, user_message, agent_response, text, owner)"
            " VALUES (?,?,?,?,?,?,NULL,?,?,?,NULL,NULL,?,?) ON CONFLICT DO NOTHING",
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
                owner,
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
        "INSERT INTO identity (agent_id, content, source, ts, event_id) VALUES (?,?,?,?,?)"
        " ON CONFLICT (agent_id) DO UPDATE SET content=excluded.content, source=excluded.source,"
        " ts=excluded.ts, event_id=excluded.event_id",
        (ev["agent_id"], ev["content"], ev.get("source"), ev["ts"], ev["event_id"]),
    )


def _upsert_fact(
    conn: sqlite3.Connection, fact_id: str, ev: Mapping[str, Any], values: dict[str, Any]
) -> None:
    """Apply one version of a fact if it is newer than the stored one.

    Versions are ordered exactly as the knowledge view orders them: by time,
    then revision, then event id. The evolver writes several decisions about a
    fact in one run with one timestamp and content-hashed event ids, so only
    the revision says which of them is the latest.
    """
    row = conn.execute(
        "SELECT updated_at, revision, event_id, owner FROM facts WHERE fact_id=?", (fact_id,)
    ).fetchone()
    revision = int(ev.get("revision") or 0)
    if row is not None and (ev["ts"], revision, ev["event_id"]) <= (row[0], row[1], row[2]):
        return
    values = {
        **values,
        "fact_id": fact_id,
        "updated_at": ev["ts"],
        "revision": revision,
        "event_id": ev["event_id"],
    }
    # Owners only ever grow: a revision may add a user's words to a fact, never take them away.
    values["owner"] = merge_owners(values.get("owner"), row[3] if row is not None else None)
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
    about = ev.get("participant") if scope == "agent" else None
    fact_id = ev.get("fact_id") or kv_fact_id(
        ev["agent_id"], scope, ev.get("agent_type"), ev.get("project_id"), ev["key"], about
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
            "topic": detect_topic(ev["key"].replace("_", " "), ev["value"]),
            "participant": ev.get("participant"),
            "status": "active",
            "source": ev.get("source") or "agent",
            "source_event_ids": _j(ev.get("source_event_ids")),
            "owner": _derived_owner(conn, ev, ev.get("participant")),
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
        "INSERT INTO proposals (proposal_id, agent_id, origin, is_correction, participant, ts, owner)"
        " VALUES (?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
        (
            ev["event_id"],
            ev["agent_id"],
            ev.get("origin"),
            int(bool(ev.get("is_correction"))),
            ev.get("participant"),
            ev["ts"],
            _derived_owner(conn, ev, ev.get("participant")),
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
    for name in (
        "content",
        "original",
        "scope",
        "category",
        "topic",
        "key",
        "participant",
        "project_id",
        "agent_type",
    ):
        if ev.get(name) is not None:
            values[name] = ev[name]
    if ev.get("topic") is None and ev.get("content"):
        # A decision that names no topic: the one its words suggest (the same on every rebuild).
        values["topic"] = detect_topic(ev["content"])
    ids = [i for i in (ev.get("proposal_id"), *(ev.get("source_event_ids") or ())) if i]
    values["source_event_ids"] = _j(ids)
    values["owner"] = merge_owners(ev.get("participant"), *_owners_of(conn, ids))
    if exists is None:
        values.setdefault("scope", "agent")
        values.update(agent_id=ev["agent_id"], kind="knowledge")
    if (values.get("scope") == "agent_type" and not ev.get("agent_type")) or (
        values.get("scope") in ("project", "override") and not ev.get("project_id")
    ):
        # A shared scope without its owner (an agent with no type, work outside a project) is one
        # no reader resolves: the fact would be invisible. It stays the agent's own instead.
        values["scope"] = "agent"
    _upsert_fact(conn, fact_id, ev, values)


def _apply_episode(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, key_quotes, participants, start_ts, end_ts,"
        " importance, important, emotional_context, kind, project_id, source_event_ids, recall_count, owner)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,0,?) ON CONFLICT (episode_id) DO NOTHING",
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
            _derived_owner(conn, ev, *(ev.get("participants") or ())),
        ),
    )
    conn.executemany(
        "INSERT INTO folded_turns (event_id, episode_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
        [(i, ev["event_id"]) for i in ev.get("source_event_ids") or () if i],
    )


def _apply_note(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    sources = [i for i in ev.get("source_event_ids") or () if i]
    if not sources:
        return
    conn.execute(
        "INSERT INTO notes (note_id, agent_id, source_event_id, speaker, kind, text, ts, owner)"
        " VALUES (?,?,?,?,?,?,?,?)"
        " ON CONFLICT (note_id) DO NOTHING",
        (
            ev["event_id"],
            ev["agent_id"],
            sources[0],
            ev.get("speaker") or "",
            ev["kind"],
            ev["text"],
            ev["ts"],
            _derived_owner(conn, ev, ev.get("user")),
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
        "INSERT INTO relationships (agent_id, participant, summary, rapport, trust, last_spoke_ts,"
        " interactions, ts, event_id, owner) VALUES (?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT (agent_id, participant) DO UPDATE SET summary=excluded.summary,"
        " rapport=excluded.rapport, trust=excluded.trust, last_spoke_ts=excluded.last_spoke_ts,"
        " interactions=excluded.interactions, ts=excluded.ts, event_id=excluded.event_id,"
        " owner=excluded.owner",
        (
            *key,
            ev["summary"],
            ev.get("rapport"),
            ev.get("trust"),
            ev.get("last_spoke_ts"),
            ev.get("interactions"),
            ev["ts"],
            ev["event_id"],
            owner_key([ev["participant"]]),
        ),
    )


def _apply_retrieval(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    item_ids = list(ev.get("item_ids") or [])
    cur = conn.execute(
        "INSERT INTO retrievals (event_id, agent_id, ts, tool, query, participant, item_ids, scores,"
        " tokens, reason, session_id, owner) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
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
            owner_key([ev.get("participant")]),
        ),
    )
    if cur.rowcount != 1:
        return  # already counted
    for item_id in item_ids:
        conn.execute("UPDATE facts SET recall_count = recall_count + 1 WHERE fact_id=?", (item_id,))
        conn.execute("UPDATE episodes SET recall_count = recall_count + 1 WHERE episode_id=?", (item_id,))


def _apply_session_ended(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    conn.execute(
        "INSERT INTO sessions (session_id, agent_id, ended_ts, event_id) VALUES (?,?,?,?)"
        " ON CONFLICT DO NOTHING",
        (ev["session_id"], ev["agent_id"], ev["ts"], ev["event_id"]),
    )


def _apply_erasure(conn: sqlite3.Connection, ev: Mapping[str, Any]) -> None:
    """Delete everything the erasure covers from every table at once (one transaction)."""
    conn.execute(
        "INSERT INTO erasures (event_id, target_kind, target, ts) VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
        (ev["event_id"], ev["target_kind"], ev["target"], ev["ts"]),
    )
    ids = set(ev.get("erased_event_ids") or ())
    if ev["target_kind"] == "event":
        ids.add(ev["target"])
    conn.executemany(
        "INSERT INTO erased_ids (event_id) VALUES (?) ON CONFLICT DO NOTHING", [(i,) for i in ids]
    )
    kind, target = ev["target_kind"], ev["target"]
    if kind == "agent":
        for table in (
            "wm_items",
            "identity",
            "facts",
            "episodes",
            "notes",
            "relationships",
            "retrievals",
            "sessions",
            "proposals",
        ):
            conn.execute(f"DELETE FROM {table} WHERE agent_id=?", (target,))
    elif kind == "user":
        # Everything the user owns, alone or with others: turns, what was derived from them,
        # what was saved while the agent talked to them.
        owned, params = hotstore.owned_by_clause(target)
        for table in ("wm_items", "facts", "episodes", "notes", "relationships", "retrievals", "proposals"):
            conn.execute(f"DELETE FROM {table} WHERE {owned}", params)
        conn.execute('DELETE FROM wm_items WHERE "user"=?', (target,))
        conn.execute("DELETE FROM facts WHERE participant=?", (target,))
        conn.execute(
            f"DELETE FROM episodes WHERE EXISTS (SELECT 1 FROM {json_values(conn, 'episodes.participants')}"
            " WHERE j.value=?)",
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
        f" OR EXISTS (SELECT 1 FROM {json_values(conn, 'facts.source_event_ids')}"
        " WHERE j.value IN (SELECT event_id FROM erased_ids))"
    )
    conn.execute(
        "DELETE FROM episodes WHERE episode_id IN (SELECT event_id FROM erased_ids)"
        f" OR EXISTS (SELECT 1 FROM {json_values(conn, 'episodes.source_event_ids')}"
        " WHERE j.value IN (SELECT event_id FROM erased_ids))"
    )
    conn.execute(
        "DELETE FROM notes WHERE note_id IN (SELECT event_id FROM erased_ids)"
        " OR source_event_id IN (SELECT event_id FROM erased_ids)"
    )
    # A turn whose episode is gone is reachable as a turn again (if it is still there itself).
    conn.execute(
        "DELETE FROM folded_turns WHERE event_id IN (SELECT event_id FROM erased_ids)"
        " OR episode_id NOT IN (SELECT episode_id FROM episodes)"
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
    "note": _apply_note,
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
        erased(conn)
        hotstore.scrub_after_erasure(conn)
    return info


def erased(conn: sqlite3.Connection) -> None:
    """(After an erasure's commit.) This process's caches of the store's text drop it now."""
    TEXTS.erasure_done(hotstore.database_key(conn))
