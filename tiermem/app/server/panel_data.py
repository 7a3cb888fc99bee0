"""What the memory panel shows, read from the hot store (the same rows the runtime serves).

The panel is a person's view of one agent: everything it holds, with where
each memory came from. These are read-only queries on the runtime's SQLite
connection; every change the panel makes goes through `Memory` (approve,
reject, facts, forget), so it lands in the log like any other write.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

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
    """Every agent the hot store knows, with its counts of turns, facts and episodes."""
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


def agent_view(conn: sqlite3.Connection, agent_id: str) -> AgentView:
    identity = conn.execute(
        "SELECT content, source, ts FROM identity WHERE agent_id=?", (agent_id,)
    ).fetchone()
    pinned = _rows(
        conn,
        "SELECT fact_id, scope, key, content, source, updated_at FROM facts "
        "WHERE kind='kv' AND status='active' AND (agent_id=? OR scope='system') ORDER BY scope, key",
        (agent_id,),
    )
    knowledge: dict[str, list[dict[str, Any]]] = {}
    for row in _rows(
        conn,
        "SELECT fact_id, scope, category, topic, content, status, source, participant, updated_at, "
        "source_event_ids, recall_count FROM facts WHERE kind='knowledge' AND agent_id=? "
        "ORDER BY CASE status WHEN 'active' THEN 0 WHEN 'pending' THEN 1 ELSE 2 END, updated_at DESC",
        (agent_id,),
    ):
        row["sources"] = list(dict.fromkeys(str(i) for i in _json_list(row.pop("source_event_ids"))))
        knowledge.setdefault(row["scope"], []).append(row)
    episodes = _rows(
        conn,
        "SELECT episode_id, name, summary, participants, start_ts, end_ts, importance, key_quotes, "
        "source_event_ids, recall_count FROM episodes WHERE agent_id=? "
        "ORDER BY importance DESC, end_ts DESC LIMIT 100",
        (agent_id,),
    )
    for e in episodes:
        e["participants"] = _json_list(e["participants"])
        e["key_quotes"] = _json_list(e["key_quotes"])
        e["sources"] = _json_list(e.pop("source_event_ids"))
    turns: dict[str, list[dict[str, Any]]] = {}
    for level in ("task", "project", "global"):
        rows = _rows(
            conn,
            "SELECT event_id, ts, user, session_id, project_id, task_id, user_message, agent_response "
            "FROM wm_items WHERE agent_id=? AND kind='interaction' AND level=? ORDER BY ts DESC, item_id DESC LIMIT ?",
            (agent_id, level, RECENT_PER_LEVEL),
        )
        if rows:
            turns[level] = rows
    retrievals = _rows(
        conn,
        "SELECT event_id, ts, tool, query, participant, item_ids, scores, tokens, reason, session_id "
        "FROM retrievals WHERE agent_id=? ORDER BY ts DESC LIMIT ?",
        (agent_id, RETRIEVALS_SHOWN),
    )
    for r in retrievals:
        r["item_ids"] = [str(i) for i in _json_list(r["item_ids"])]
    users = [
        str(r["user"])
        for r in conn.execute(
            "SELECT DISTINCT user FROM wm_items WHERE agent_id=? AND user IS NOT NULL ORDER BY user",
            (agent_id,),
        )
    ]
    view = AgentView(
        agent_id, dict(identity) if identity else None, pinned, knowledge, episodes, turns, retrievals, users
    )
    view.labels = memory_labels(conn, [i for r in retrievals for i in r["item_ids"]])
    sources = sorted({str(i) for facts in knowledge.values() for f in facts for i in f["sources"]})
    view.turn_ids = set(turns_by_id(conn, agent_id, sources))
    return view


def memory_labels(conn: sqlite3.Connection, ids: list[str]) -> dict[str, str]:
    """A short description of each memory id (fact, episode or turn) that still exists."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    marks = ",".join("?" * len(wanted))
    labels: dict[str, str] = {}
    for row in conn.execute(
        f"SELECT fact_id, coalesce(key, topic, ''), content FROM facts WHERE fact_id IN ({marks})", wanted
    ):
        labels[row[0]] = f"fact {row[1]}: {row[2]}".replace("fact : ", "fact: ")
    for row in conn.execute(f"SELECT episode_id, name FROM episodes WHERE episode_id IN ({marks})", wanted):
        labels[row[0]] = f"episode: {row[1]}"
    for row in conn.execute(
        f"SELECT event_id, user, user_message FROM wm_items WHERE event_id IN ({marks})", wanted
    ):
        labels[row[0]] = f"turn by {row[1]}: {row[2]}"
    return labels


@dataclass
class TurnView:
    turn: dict[str, Any]
    retrievals: list[dict[str, Any]]
    labels: dict[str, str]


def turn_view(conn: sqlite3.Connection, agent_id: str, event_id: str) -> TurnView | None:
    """One turn and the retrievals that fed it: those of its session since the turn before it."""
    row = conn.execute(
        "SELECT event_id, ts, user, session_id, level, user_message, agent_response FROM wm_items "
        "WHERE agent_id=? AND event_id=? AND kind='interaction'",
        (agent_id, event_id),
    ).fetchone()
    if row is None:
        return None
    turn = dict(row)
    before = conn.execute(
        "SELECT max(ts) FROM wm_items WHERE agent_id=? AND kind='interaction' AND session_id IS ? AND ts < ?",
        (agent_id, turn["session_id"], turn["ts"]),
    ).fetchone()[0]
    # Retrievals made over the API carry no session: those for this user (or for nobody) count too.
    retrievals = _rows(
        conn,
        "SELECT event_id, ts, tool, query, participant, item_ids, scores, tokens, reason FROM retrievals "
        "WHERE agent_id=? AND ts <= ? AND ts > coalesce(?, '') AND (session_id IS ? OR "
        "(session_id IS NULL AND (participant IS NULL OR participant IS ?))) ORDER BY ts",
        (agent_id, turn["ts"], before, turn["session_id"], turn["user"]),
    )
    for r in retrievals:
        r["item_ids"] = [str(i) for i in _json_list(r["item_ids"])]
    labels = memory_labels(conn, [i for r in retrievals for i in r["item_ids"]])
    return TurnView(turn, retrievals, labels)


def turns_by_id(conn: sqlite3.Connection, agent_id: str, event_ids: list[str]) -> dict[str, dict[str, Any]]:
    if not event_ids:
        return {}
    marks = ",".join("?" * len(event_ids))
    rows = _rows(
        conn,
        f"SELECT event_id, ts, user, user_message FROM wm_items WHERE agent_id=? AND event_id IN ({marks})",
        (agent_id, *event_ids),
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
