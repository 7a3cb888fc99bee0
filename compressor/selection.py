"""Which interactions to compress: a log-position checkpoint plus a per-agent pending set.

The compressor's state lives in `<data>/checkpoints/compressor.sqlite`:

* `position`: per segment ("<stream>/<partition>/<stem>") the number of lines
  already taken in (the log's checkpoint form; it survives sealing because
  Parquet keeps line order, and erasure keeps lines as tombstones);
* `pending`: every interaction taken in but not yet compressed, by reference
  (event id, agent, ts, segment, line), never its content;
* `relationships_due`: agents whose relationships must be recomputed.

Each run first *takes in* the lines appended since the position, in any
segment of any day: an interaction appended late with an old timestamp
(backfill, a bulk import of yesterday's turns, clock skew between workers)
lands in an old partition and is still picked up, because the position is
over lines, not over time. Lines before the position are never read again,
so already compressed history is never read back. Taking in is one SQLite
transaction (new pending rows + the new position): killed anywhere, it is
either done or not.

Per agent, the pending interactions are ordered by (ts, event_id). An agent is
due when it has more than `min_unprocessed` (by default more
than 15); the newest `keep_recent` stay verbatim in working memory and
pending; the rest is compressed, oldest first. That rule is one DuckDB query
(`SELECTION_SQL`, window functions over the pending set). Pending rows are deleted in the
same transaction that records a committed group (see `job`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
from tiermem.compressor.scoring import Interaction

from tiermem.eventlog import ERASED_MARK, Checkpoints, EventLog
from tiermem.ids import parse_ts
from tiermem.settings import Settings

STREAM = "interactions"
STATE_NAME = "compressor.sqlite"
LEGACY_CHECKPOINT = "compressor"  # the (ts, event_id) watermarks of the first version
CACHE_LIMIT = 500_000  # interactions kept parsed between taking in and scoring


@dataclass(frozen=True)
class PendingRef:
    event_id: str
    agent_id: str
    ts: str  # stored form, fixed width: sorts as time
    segment: str
    line: int


@dataclass
class AgentSelection:
    agent_id: str
    pending: int  # interactions taken in and not yet compressed
    to_compress: list[Interaction] = field(default_factory=list)  # minus the newest keep_recent


def _as_utc(value: Any) -> datetime:
    if type(value) is str and len(value) == 24 and value[-1] == "Z":
        return datetime.fromisoformat(value)  # the log's own format (UTC, ms): the common case
    if isinstance(value, datetime):
        return value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    return parse_ts(str(value))


def interaction_of(row: dict[str, Any]) -> Interaction:
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
        attachments=_attachments_of(row.get("attachments")),
    )


def _attachments_of(value: Any) -> tuple[dict[str, Any], ...]:
    if isinstance(value, str):
        value = orjson.loads(value)
    return tuple(a for a in value or () if isinstance(a, dict))


class CompressorState:
    """The compressor's checkpoint (see the module docstring). One per run; not thread-shared."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        settings.checkpoints_dir.mkdir(parents=True, exist_ok=True)
        path = settings.checkpoints_dir / STATE_NAME
        self.conn = sqlite3.connect(path, timeout=60, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        # The state is the only record of what is pending: it must be durable
        # unless the operator chose fsync = none for the whole data root.
        self.conn.execute(f"PRAGMA synchronous={'OFF' if settings.fsync == 'none' else 'FULL'}")
        self.conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS position (segment TEXT PRIMARY KEY, lines INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS pending (
                event_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, ts TEXT NOT NULL,
                segment TEXT NOT NULL, line INTEGER NOT NULL);
            CREATE INDEX IF NOT EXISTS pending_agent ON pending (agent_id, ts, event_id);
            CREATE TABLE IF NOT EXISTS relationships_due (agent_id TEXT PRIMARY KEY);
            CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            """
        )
        # Interactions read while taking in, kept parsed so scoring need not read them again.
        self.cache: dict[str, Interaction] = {}

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> CompressorState:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ reading
    def position(self) -> dict[str, int]:
        return {str(s): int(n) for s, n in self.conn.execute("SELECT segment, lines FROM position")}

    def pending_refs(self, agent: str | None = None) -> dict[str, list[PendingRef]]:
        """Pending references per agent, oldest first."""
        sql = "SELECT event_id, agent_id, ts, segment, line FROM pending"
        params: list[Any] = []
        if agent is not None:
            sql += " WHERE agent_id = ?"
            params.append(agent)
        out: dict[str, list[PendingRef]] = {}
        for row in self.conn.execute(sql + " ORDER BY agent_id, ts, event_id", params):
            ref = PendingRef(*row)
            out.setdefault(ref.agent_id, []).append(ref)
        return out

    def relationships_due(self) -> list[str]:
        return [str(r[0]) for r in self.conn.execute("SELECT agent_id FROM relationships_due ORDER BY 1")]

    # ------------------------------------------------------------ taking in
    def _legacy_marks(self) -> dict[str, tuple[str, str]]:
        """Watermarks of the first version, honoured once when this state is new."""
        if self.conn.execute("SELECT 1 FROM meta WHERE key = 'legacy_done'").fetchone():
            return {}
        raw = Checkpoints(self.settings).load(LEGACY_CHECKPOINT).get("agents", {})
        return {a: (str(w["ts"]), str(w["event_id"])) for a, w in raw.items()}

    def new_interactions(self, log: EventLog) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """(segment, line, event) of every interaction appended since the position."""
        for segment, line, event in log.read(STREAM, self.position()):
            if event.get("type") == "interaction":
                yield segment, line, event

    def take_in(self, log: EventLog, *, keep_parsed: bool = True) -> int:
        """Add every interaction appended since the position to `pending` (one transaction)."""
        legacy = self._legacy_marks()
        moved: dict[str, int] = {}
        rows: list[tuple[str, str, str, str, int]] = []
        for segment, line, event in log.read(STREAM, self.position()):
            moved[segment] = line + 1
            if event.get("type") != "interaction":
                continue
            agent, ts, eid = str(event["agent_id"]), str(event["ts"]), str(event["event_id"])
            mark = legacy.get(agent)
            if mark is not None and (ts, eid) <= mark:
                continue  # compressed by the first version (watermark checkpoint)
            rows.append((eid, agent, ts, segment, line))
            if keep_parsed and len(self.cache) < CACHE_LIMIT:
                self.cache[eid] = interaction_of(event)
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany("INSERT OR IGNORE INTO pending VALUES (?, ?, ?, ?, ?)", rows)
            self.conn.executemany(
                "INSERT INTO position VALUES (?, ?) ON CONFLICT (segment) DO UPDATE "
                "SET lines = max(lines, excluded.lines)",
                list(moved.items()),
            )
            self.conn.execute("INSERT OR REPLACE INTO meta VALUES ('legacy_done', '1')")
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        return len(rows)

    # ------------------------------------------------------------ committing
    def mark_compressed(self, done: dict[str, list[str]]) -> None:
        """Drop compressed interactions from `pending`; their agents' relationships are due."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany(
                "DELETE FROM pending WHERE event_id = ?", [(e,) for ids in done.values() for e in ids]
            )
            self.conn.executemany("INSERT OR IGNORE INTO relationships_due VALUES (?)", [(a,) for a in done])
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    def relationships_done(self, agents: Iterable[str]) -> None:
        # One transaction: each statement on its own would be a durable commit (an fsync per agent).
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.executemany("DELETE FROM relationships_due WHERE agent_id = ?", [(a,) for a in agents])
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------ contents
    def load(self, log: EventLog, refs: list[PendingRef]) -> dict[str, Interaction]:
        """The interactions behind `refs`: from the cache, else read by (segment, line).

        Only the pending lines are parsed. A line erased since it was taken in
        (a tombstone) is dropped from `pending`: erased data is never compressed.
        """
        out: dict[str, Interaction] = {}
        wanted: dict[str, dict[int, str]] = {}
        for ref in refs:
            hit = self.cache.get(ref.event_id)
            if hit is not None:
                out[ref.event_id] = hit
            else:
                wanted.setdefault(ref.segment, {})[ref.line] = ref.event_id
        gone: list[str] = []
        for segment, lines in wanted.items():
            found = _read_lines(log.root / segment, set(lines))
            for line, eid in lines.items():
                event = found.get(line)
                if event is None or event.get(ERASED_MARK) or event.get("event_id") != eid:
                    gone.append(eid)
                else:
                    out[eid] = interaction_of(event)
        if gone:
            self.conn.executemany("DELETE FROM pending WHERE event_id = ?", [(e,) for e in gone])
        return out


def _read_lines(base: Path, lines: set[int]) -> dict[int, dict[str, Any]]:
    """Parse only the given lines of a segment (Parquet form preferred, as the log reads)."""
    parquet = base.with_name(base.name + ".parquet")
    jsonl = base.with_name(base.name + ".jsonl")
    out: dict[int, dict[str, Any]] = {}
    if not parquet.exists():
        try:
            data = jsonl.read_bytes()
        except FileNotFoundError:  # sealed since we looked
            data = None
        if data is not None:
            for n, raw in enumerate(data.split(b"\n")):
                if n in lines and raw:
                    out[n] = orjson.loads(raw)
            return out
    if parquet.exists():
        from tiermem.sealed import parquet_events  # local: pyarrow only for sealed data

        last = max(lines)
        for n, event in enumerate(parquet_events(parquet, keep_erased=True)):
            if n in lines:
                out[n] = event
            if n >= last:
                break
    return out


def pending_counts(settings: Settings, agent: str | None = None) -> dict[str, int]:
    """Pending (not yet compressed) interactions per agent: what the scheduler checks.

    Read-only: counts what is pending plus what was appended since the position.
    """
    with CompressorState(settings) as state, EventLog(settings) as log:
        counts = {a: len(r) for a, r in state.pending_refs(agent).items()}
        legacy = state._legacy_marks()
        for _segment, _line, event in state.new_interactions(log):
            a = str(event["agent_id"])
            if agent is not None and a != agent:
                continue
            mark = legacy.get(a)
            if mark is not None and (str(event["ts"]), str(event["event_id"])) <= mark:
                continue
            counts[a] = counts.get(a, 0) + 1
    return dict(sorted(counts.items()))


# The selection rule, in one place and in SQL: per agent, the pending interactions beyond the
# newest `keep` (they stay verbatim in working memory), for agents with more than `due_over`.
SELECTION_SQL = """
SELECT event_id, agent_id, ts, segment, line, pending
FROM (
    SELECT *,
           count(*) OVER (PARTITION BY agent_id) AS pending,
           row_number() OVER (PARTITION BY agent_id ORDER BY ts DESC, event_id DESC) AS newest_rank
    FROM pending_refs
)
WHERE pending > $due_over AND newest_rank > $keep
ORDER BY agent_id, ts, event_id
"""


def select_due_refs(
    refs: dict[str, list[PendingRef]], settings: Settings, *, force: bool = False
) -> dict[str, tuple[int, list[PendingRef]]]:
    """Run the selection rule in DuckDB over the pending references: agent -> (pending, to compress)."""
    cfg = settings.compressor
    rows = [r for agent_refs in refs.values() for r in agent_refs]
    if not rows:
        return {}
    table = pa.table(
        {
            "event_id": [r.event_id for r in rows],
            "agent_id": [r.agent_id for r in rows],
            "ts": [r.ts for r in rows],
            "segment": [r.segment for r in rows],
            "line": pa.array([r.line for r in rows], pa.int64()),
        }
    )
    due_over = cfg.keep_recent if force else max(cfg.min_unprocessed, cfg.keep_recent)
    con = duckdb.connect(":memory:")
    try:
        con.register("pending_refs", table)
        result = con.execute(SELECTION_SQL, {"due_over": due_over, "keep": cfg.keep_recent}).fetchall()
    finally:
        con.close()
    out: dict[str, tuple[int, list[PendingRef]]] = {}
    for event_id, agent_id, ts, segment, line, pending in result:
        entry = out.setdefault(agent_id, (int(pending), []))
        entry[1].append(PendingRef(event_id, agent_id, ts, segment, int(line)))
    return out


def select_due(
    state: CompressorState, log: EventLog, agent: str | None = None, *, force: bool = False
) -> Iterator[AgentSelection]:
    """Yield each due agent's interactions to compress (one agent at a time, oldest first).

    Call `state.take_in(log)` first. `force` compresses an agent's pending
    history even when it is not yet due (the newest `keep_recent` stay).
    The rule itself runs in DuckDB (`SELECTION_SQL`) over the pending set.
    """
    due = select_due_refs(state.pending_refs(agent), state.settings, force=force)
    # One load for every due agent: what the cache does not hold is read with one pass over
    # each segment, not one pass per agent (at 10k agents that was 10k reads of a 256 MB file).
    loaded = state.load(log, [r for _pending, todo in due.values() for r in todo])
    for agent_id, (pending, todo) in due.items():
        yield AgentSelection(agent_id, pending, [loaded[r.event_id] for r in todo if r.event_id in loaded])
