"""Which interactions to compress, chosen in DuckDB from the job's checkpoint.

The checkpoint holds, per agent, a watermark: the (ts, event_id) of the last
interaction already compressed. Everything after it is *pending*. An agent is
due when it has more than `min_unprocessed` pending interactions (seed: "more
than 15 accumulated"); the newest `keep_recent` of them stay verbatim in
working memory and are not touched; the rest is compressed oldest first. The
query filters on the watermark before anything else, so already-compressed
history is never read back (DuckDB pushes the filter into the Parquet scan).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb
import orjson

from tiermem.compressor.scoring import Interaction
from tiermem.ids import format_ts, parse_ts
from tiermem.log.store import Checkpoints
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog

CHECKPOINT = "compressor"


@dataclass(frozen=True)
class Watermark:
    ts: datetime
    event_id: str


@dataclass
class AgentSelection:
    agent_id: str
    pending: int  # interactions after the watermark
    to_compress: list[Interaction]  # pending minus the newest keep_recent, oldest first


def load_watermarks(settings: Settings) -> dict[str, Watermark]:
    raw = Checkpoints(settings).load(CHECKPOINT).get("agents", {})
    return {a: Watermark(parse_ts(w["ts"]), w["event_id"]) for a, w in raw.items()}


def save_watermark(settings: Settings, agent_id: str, mark: Watermark) -> None:
    cps = Checkpoints(settings)
    state = cps.load(CHECKPOINT)
    agents = dict(state.get("agents", {}))
    agents[agent_id] = {"ts": format_ts(mark.ts), "event_id": mark.event_id}
    state["agents"] = agents
    cps.save(CHECKPOINT, state)


def _as_utc(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return parse_ts(str(value))


def _load_marks(con: duckdb.DuckDBPyConnection, marks: dict[str, Watermark]) -> None:
    con.execute(
        "CREATE OR REPLACE TEMP TABLE compressor_marks (agent_id VARCHAR, wts TIMESTAMPTZ, weid VARCHAR)"
    )
    if marks:
        con.executemany(
            "INSERT INTO compressor_marks VALUES (?, ?, ?)",
            [(a, m.ts, m.event_id) for a, m in marks.items()],
        )


_PENDING_SQL = """
    SELECT i.*,
           row_number() OVER (PARTITION BY i.agent_id ORDER BY i.ts DESC, i.event_id DESC) AS newest_rank,
           count(*) OVER (PARTITION BY i.agent_id) AS pending
    FROM interactions i
    LEFT JOIN compressor_marks m ON m.agent_id = i.agent_id
    WHERE (m.wts IS NULL OR i.ts > m.wts OR (i.ts = m.wts AND i.event_id > m.weid))
      {agent_filter}
"""


def pending_counts(settings: Settings, agent: str | None = None) -> dict[str, int]:
    """Pending (not yet compressed) interactions per agent: what the scheduler checks."""
    con = open_catalog(settings)
    try:
        _load_marks(con, load_watermarks(settings))
        sql = _PENDING_SQL.format(agent_filter="AND i.agent_id = ?" if agent else "")
        rows = con.execute(
            f"SELECT agent_id, max(pending) FROM ({sql}) GROUP BY agent_id ORDER BY agent_id",
            [agent] if agent else [],
        ).fetchall()
        return {str(a): int(n) for a, n in rows}
    finally:
        con.close()


def _interaction(row: dict[str, Any]) -> Interaction:
    meta = row.get("metadata")
    if isinstance(meta, str):
        meta = orjson.loads(meta)
    return Interaction(
        event_id=str(row["event_id"]),
        agent_id=str(row["agent_id"]),
        ts=_as_utc(row["ts"]),
        user=str(row.get("user") or ""),
        session_id=str(row.get("session_id") or ""),
        project_id=str(row.get("project_id") or ""),
        memory_level=str(row.get("memory_level") or "global"),
        user_message=str(row.get("user_message") or ""),
        agent_response=str(row.get("agent_response") or ""),
        metadata=meta if isinstance(meta, dict) else {},
    )


def select_due(
    settings: Settings, agent: str | None = None, *, force: bool = False
) -> Iterator[AgentSelection]:
    """Yield each due agent's interactions to compress (one agent at a time, oldest first).

    `force` compresses an agent's pending history even when it is not yet due
    (the newest `keep_recent` are still left alone).
    """
    cfg = settings.compressor
    con = open_catalog(settings)
    try:
        _load_marks(con, load_watermarks(settings))
        sql = _PENDING_SQL.format(agent_filter="AND i.agent_id = ?" if agent else "")
        threshold = 0 if force else cfg.min_unprocessed
        cur = con.execute(
            f"SELECT * FROM ({sql}) WHERE pending > ? AND newest_rank > ? ORDER BY agent_id, ts, event_id",
            [*([agent] if agent else []), threshold, cfg.keep_recent],
        )
        names = [d[0] for d in cur.description]
        current: AgentSelection | None = None
        while True:
            chunk = cur.fetchmany(4096)
            if not chunk:
                break
            for values in chunk:
                row = dict(zip(names, values, strict=True))
                if current is None or current.agent_id != row["agent_id"]:
                    if current is not None:
                        yield current
                    current = AgentSelection(str(row["agent_id"]), int(row["pending"]), [])
                current.to_compress.append(_interaction(row))
        if current is not None:
            yield current
    finally:
        con.close()
