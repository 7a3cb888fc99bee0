"""What the memory panel shows, read from the hot store (the same rows the runtime serves).

The panel is a person's view of one agent as one principal (agent, user):
what that principal may read, with where each memory came from. These are
read-only queries on the runtime's SQLite connection, and every one of them
is narrowed by the hot store's own visibility clauses (`item_clause`,
`fact_clause`: the SQLite translation of `tiermem.runtime.visibility`), so
the panel shows exactly what the runtime would serve that principal and never
keeps a second copy of the rule. Every change the panel makes goes through
`Memory` (approve, reject, facts, forget), so it lands in the log like any
other write.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tiermem.runtime.hotstore import fact_clause, item_clause
from tiermem.runtime.visibility import Principal
from tiermem.settings import Settings

RECENT_PER_LEVEL = 15
RETRIEVALS_SHOWN = 25


def _rows(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    return [dict(r) for r in conn.execute(sql, params).fetchall()]


def _json_list(text: object) -> list[Any]:
    if not text:
        return []
    try:
        value = orjson.loads(str(text))
    except orjson.JSONDecodeError:
        return []
    return value if isinstance(value, list) else []


def agents(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every agent the hot store knows, with its counts of turns, facts and episodes.

    The operator's list: numbers only, no memory content, so it needs no principal.
    """
    return _rows(
        conn,
        """
        WITH ids AS (
            SELECT agent_id FROM wm_items UNION SELECT agent_id FROM facts WHERE scope = 'agent'
            UNION SELECT agent_id FROM episodes WHERE agent_id IS NOT NULL UNION SELECT agent_id FROM identity)
        SELECT ids.agent_id,
            (SELECT count(*) FROM wm_items w WHERE w.agent_id = ids.agent_id AND w.kind = 'interaction') AS turns,
            (SELECT count(*) FROM facts f WHERE f.agent_id = ids.agent_id AND f.status = 'active') AS facts,
            (SELECT count(*) FROM episodes e WHERE e.agent_id = ids.agent_id) AS episodes,
            (SELECT max(ts) FROM wm_items w WHERE w.agent_id = ids.agent_id) AS last_ts
        FROM ids ORDER BY ids.agent_id
        """,
    )


@dataclass
class AgentView:
    agent_id: str
    identity: dict[str, Any] | None
    pinned: list[dict[str, Any]]
    knowledge: dict[str, list[dict[str, Any]]]  # scope -> facts
    episodes: list[dict[str, Any]]
    turns: dict[str, list[dict[str, Any]]]  # memory level -> recent turns
    retrievals: list[dict[str, Any]]
    users: list[str]
    labels: dict[str, str] = field(default_factory=dict)  # memory id -> what it is, for retrievals
    turn_ids: set[str] = field(default_factory=set)  # source ids that are turns still held
    viewed_user: str | None = None  # whose memory is shown besides the agent-level memory


def users_of(conn: sqlite3.Connection, agent_id: str) -> list[str]:
    """The users an agent has talked to (the operator's selector and forget list)."""
    return [
        str(r["user"])
        for r in conn.execute(
            'SELECT DISTINCT "user" FROM wm_items WHERE agent_id=? AND "user" IS NOT NULL ORDER BY "user"',
            (agent_id,),
        )
    ]


def visible_proposals(conn: sqlite3.Connection, who: Principal, proposal_ids: list[str]) -> set[str]:
    """The proposals `who` may read: the hot store keeps each one's owners (its participant and
    the users of the turns it cites), so the review queue follows the same rule as the memory."""
    wanted = sorted(set(proposal_ids))
    if not wanted:
        return set()
    marks = ",".join("?" * len(wanted))
    where, params = item_clause(who, "p")
    rows = conn.execute(
        f"SELECT p.proposal_id FROM proposals p WHERE p.proposal_id IN ({marks}) AND {where}",
        (*wanted, *params),
    )
    return {str(r[0]) for r in rows}


def agent_view(conn: sqlite3.Connection, who: Principal, users: list[str]) -> AgentView:
    """What `who` may read of its agent (`users`: the user list shown, decided by the caller)."""
    agent_id = who.agent_id
    identity = conn.execute(
        "SELECT content, source, ts FROM identity WHERE agent_id=?", (agent_id,)
    ).fetchone()
    facts_where, facts_params = fact_clause(who, "f")
    pinned = _rows(
        conn,
        "SELECT f.fact_id, f.scope, f.key, f.content, f.source, f.updated_at FROM facts f "
        f"WHERE f.kind='kv' AND f.status='active' AND {facts_where} ORDER BY f.scope, f.key",
        tuple(facts_params),
    )
    knowledge: dict[str, list[dict[str, Any]]] = {}
    for row in _rows(
        conn,
        "SELECT f.fact_id, f.scope, f.category, f.topic, f.content, f.status, f.source, f.participant, "
        "f.updated_at, f.source_event_ids, f.recall_count FROM facts f "
        f"WHERE f.kind='knowledge' AND f.agent_id=? AND {facts_where} "
        "ORDER BY CASE f.status WHEN 'active' THEN 0 WHEN 'pending' THEN 1 ELSE 2 END, f.updated_at DESC",
        (agent_id, *facts_params),
    ):
        row["sources"] = list(dict.fromkeys(str(i) for i in _json_list(row.pop("source_event_ids"))))
        knowledge.setdefault(row["scope"], []).append(row)
    where, params = item_clause(who, "e")
    episodes = _rows(
        conn,
        "SELECT e.episode_id, e.name, e.summary, e.participants, e.start_ts, e.end_ts, e.importance, "
        f"e.key_quotes, e.source_event_ids, e.recall_count FROM episodes e WHERE {where} "
        "ORDER BY e.importance DESC, e.end_ts DESC LIMIT 100",
        tuple(params),
    )
    for e in episodes:
        e["participants"] = _json_list(e["participants"])
        e["key_quotes"] = _json_list(e["key_quotes"])
        e["sources"] = _json_list(e.pop("source_event_ids"))
    turns: dict[str, list[dict[str, Any]]] = {}
    where, params = item_clause(who, "w")
    for level in ("task", "project", "global"):
        rows = _rows(
            conn,
            "SELECT w.event_id, w.ts, w.user, w.session_id, w.project_id, w.task_id, w.user_message, "
            f"w.agent_response FROM wm_items w WHERE {where} AND w.kind='interaction' AND w.level=? "
            "ORDER BY w.ts DESC, w.item_id DESC LIMIT ?",
            (*params, level, RECENT_PER_LEVEL),
        )
        if rows:
            turns[level] = rows
    where, params = item_clause(who, "r")
    retrievals = _rows(
        conn,
        "SELECT r.event_id, r.ts, r.tool, r.query, r.participant, r.item_ids, r.scores, r.tokens, r.reason, "
        f"r.session_id FROM retrievals r WHERE {where} ORDER BY r.ts DESC LIMIT ?",
        (*params, RETRIEVALS_SHOWN),
    )
    for r in retrievals:
        r["item_ids"] = [str(i) for i in _json_list(r["item_ids"])]
    view = AgentView(
        agent_id, dict(identity) if identity else None, pinned, knowledge, episodes, turns, retrievals, users
    )
    view.labels = memory_labels(conn, who, [i for r in retrievals for i in r["item_ids"]])
    sources = sorted({str(i) for facts in knowledge.values() for f in facts for i in f["sources"]})
    view.turn_ids = set(turns_by_id(conn, who, sources))
    return view


def memory_labels(conn: sqlite3.Connection, who: Principal, ids: list[str]) -> dict[str, str]:
    """A short description of each memory id (fact, episode or turn) that still exists and `who` may read."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    marks = ",".join("?" * len(wanted))
    labels: dict[str, str] = {}
    where, params = fact_clause(who, "f")
    for row in conn.execute(
        f"SELECT f.fact_id, coalesce(f.key, f.topic, ''), f.content FROM facts f "
        f"WHERE f.fact_id IN ({marks}) AND {where}",
        (*wanted, *params),
    ):
        labels[row[0]] = f"fact {row[1]}: {row[2]}".replace("fact : ", "fact: ")
    where, params = item_clause(who, "e")
    for row in conn.execute(
        f"SELECT e.episode_id, e.name FROM episodes e WHERE e.episode_id IN ({marks}) AND {where}",
        (*wanted, *params),
    ):
        labels[row[0]] = f"episode: {row[1]}"
    where, params = item_clause(who, "w")
    for row in conn.execute(
        f"SELECT w.event_id, w.user, w.user_message FROM wm_items w WHERE w.event_id IN ({marks}) AND {where}",
        (*wanted, *params),
    ):
        labels[row[0]] = f"turn by {row[1]}: {row[2]}"
    return labels


@dataclass
class TurnView:
    turn: dict[str, Any]
    retrievals: list[dict[str, Any]]
    labels: dict[str, str]


def turn_view(conn: sqlite3.Connection, who: Principal, event_id: str) -> TurnView | None:
    """One turn `who` may read and the retrievals that fed it: those of its session since the turn before it."""
    where, params = item_clause(who, "w")
    row = conn.execute(
        "SELECT w.event_id, w.ts, w.user, w.session_id, w.level, w.user_message, w.agent_response "
        f"FROM wm_items w WHERE w.event_id=? AND w.kind='interaction' AND {where}",
        (event_id, *params),
    ).fetchone()
    if row is None:
        return None
    turn = dict(row)
    before = conn.execute(
        f"SELECT max(w.ts) FROM wm_items w WHERE {where} AND w.kind='interaction' "
        "AND w.session_id IS ? AND w.ts < ?",
        (*params, turn["session_id"], turn["ts"]),
    ).fetchone()[0]
    # Retrievals made over the API carry no session: those for this user (or for nobody) count too.
    where, params = item_clause(who, "r")
    retrievals = _rows(
        conn,
        "SELECT r.event_id, r.ts, r.tool, r.query, r.participant, r.item_ids, r.scores, r.tokens, r.reason "
        f"FROM retrievals r WHERE {where} AND r.ts <= ? AND r.ts > coalesce(?, '') AND (r.session_id IS ? OR "
        "(r.session_id IS NULL AND (r.participant IS NULL OR r.participant IS ?))) ORDER BY r.ts",
        (*params, turn["ts"], before, turn["session_id"], turn["user"]),
    )
    for r in retrievals:
        r["item_ids"] = [str(i) for i in _json_list(r["item_ids"])]
    labels = memory_labels(conn, who, [i for r in retrievals for i in r["item_ids"]])
    return TurnView(turn, retrievals, labels)


def turns_by_id(conn: sqlite3.Connection, who: Principal, event_ids: list[str]) -> dict[str, dict[str, Any]]:
    if not event_ids:
        return {}
    marks = ",".join("?" * len(event_ids))
    where, params = item_clause(who, "w")
    rows = _rows(
        conn,
        f"SELECT w.event_id, w.ts, w.user, w.user_message FROM wm_items w WHERE w.event_id IN ({marks}) AND {where}",
        (*event_ids, *params),
    )
    return {r["event_id"]: r for r in rows}


def review_reports(settings: Settings, agent_id: str) -> list[dict[str, Any]]:
    """The agent's daily review reports, newest first: the summary numbers and whether a chart exists."""
    root = settings.reports_dir / "review"
    found: list[dict[str, Any]] = []
    if not root.is_dir():
        return found
    for day_dir in sorted(root.glob("date=*"), reverse=True):
        path = day_dir / f"{agent_id}.json"
        if not path.is_file() or path.parent.parent != root:
            continue
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        found.append(
            {
                "day": day_dir.name.removeprefix("date="),
                "interactions": data.get("interactions"),
                "fully_enriched_fraction": data.get("fully_enriched_fraction"),
                "cost_usd": data.get("cost_usd"),
                "flagged_interactions": data.get("flagged_interactions"),
                "missing_fields": data.get("missing_fields") or [],
                "chart": path.with_suffix(".png").is_file(),
            }
        )
    return found


def report_chart(settings: Settings, agent_id: str, day: str) -> Path | None:
    """The PNG of one report, only inside the reports folder (the day is checked, not trusted)."""
    if len(day) != 10 or not day.replace("-", "").isdigit():
        return None
    path = settings.reports_dir / "review" / f"date={day}" / f"{agent_id}.png"
    return path if path.is_file() and "/" not in agent_id and ".." not in agent_id else None
