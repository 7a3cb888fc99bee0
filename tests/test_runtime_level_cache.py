"""The agent's current level kept per connection (`runtime.level_cache`): always what a read gives.

Each check compares the kept answer with `levels.current_level` read afresh on
the same connection, after changes made by another connection, by the reading
connection itself, and by another process; and shows that the turns of users,
which cannot move an agent's level, leave what was kept in place.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tiermem.runtime import level_cache
from tiermem.runtime.hotstore import HotConnection
from tiermem.runtime.levels import current_level
from tiermem.runtime.sqlite_store import SQLiteHotStore
from tiermem.runtime.visibility import Principal

from tiermem.events import MEMORY_LEVELS
from tiermem.ids import format_ts
from tiermem.settings import Settings

AGENTS = ("bot-a", "bot-b")
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)  # the test's own clock


class Turns:
    """Interaction events on the test's clock, each a second after the last."""

    def __init__(self) -> None:
        self.n = 0

    def turn(self, agent: str, level: str, user: str | None = None) -> dict[str, Any]:
        self.n += 1
        ts = format_ts(START + timedelta(seconds=self.n))
        event: dict[str, Any] = {
            "type": "interaction",
            "event_id": f"ev-{self.n:06d}",
            "agent_id": agent,
            "ts": ts,
            "memory_level": level,
            "user_message": f"message {self.n}",
            "agent_response": f"answer {self.n}",
        }
        if user is not None:
            event["user"] = user
        return event


@pytest.fixture
def stores(settings: Settings) -> Iterator[tuple[SQLiteHotStore, SQLiteHotStore]]:
    reader, other = SQLiteHotStore.open(settings), SQLiteHotStore.open(settings)
    yield reader, other
    reader.close()
    other.close()


def _agent(agent: str) -> Principal:
    return Principal(agent, None, None, None)


def _statements(conn: Any) -> list[str]:
    """The statements `conn` runs from now on (not the table-valued pragma's own, traced as "--")."""
    seen: list[str] = []
    conn.set_trace_callback(lambda sql: None if sql.startswith("--") else seen.append(sql))
    return seen


def _assert_fresh(store: SQLiteHotStore) -> None:
    for agent in AGENTS:
        assert store.current_level(_agent(agent)) == current_level(store.conn, _agent(agent))


def test_a_new_store_counts_changes_of_agent_level_items(
    stores: tuple[SQLiteHotStore, SQLiteHotStore],
) -> None:
    reader, _ = stores
    assert level_cache._mark(reader.conn) is not None  # the triggers are there: the answer is kept


def test_a_level_set_by_another_connection_is_seen_by_the_next_read(
    stores: tuple[SQLiteHotStore, SQLiteHotStore],
) -> None:
    reader, other = stores
    turns = Turns()
    assert reader.current_level(_agent("bot-a")) == "global"
    other.apply_now([turns.turn("bot-a", "task")])
    assert reader.current_level(_agent("bot-a")) == "task"
    other.apply_now([turns.turn("bot-a", "project")])
    assert reader.current_level(_agent("bot-a")) == "project"


def test_a_level_set_through_the_reading_connection_is_seen_by_its_next_read(
    stores: tuple[SQLiteHotStore, SQLiteHotStore],
) -> None:
    # SQLite's data_version does not move for a connection's own commits: a cache keyed by it
    # alone would keep "global" here.
    reader, _ = stores
    turns = Turns()
    assert reader.current_level(_agent("bot-a")) == "global"
    reader.apply_now([turns.turn("bot-a", "task")])
    assert reader.current_level(_agent("bot-a")) == "task"


def test_deleting_or_changing_the_newest_agent_level_item_is_seen(
    stores: tuple[SQLiteHotStore, SQLiteHotStore],
) -> None:
    reader, other = stores
    turns = Turns()
    other.apply_now([turns.turn("bot-a", "project"), turns.turn("bot-a", "task")])
    assert reader.current_level(_agent("bot-a")) == "task"
    other.conn.execute("DELETE FROM wm_items WHERE item_id = 'ev-000002'")
    assert reader.current_level(_agent("bot-a")) == "project"
    other.conn.execute("UPDATE wm_items SET level = 'global' WHERE item_id = 'ev-000001'")
    assert reader.current_level(_agent("bot-a")) == "global"
    # An item that loses its owner becomes the agent's own: its level counts from then on.
    other.apply_now([turns.turn("bot-a", "task", user="alice")])
    assert reader.current_level(_agent("bot-a")) == "global"
    other.conn.execute("UPDATE wm_items SET owner = NULL WHERE item_id = 'ev-000003'")
    assert reader.current_level(_agent("bot-a")) == "task"


def test_users_turns_leave_the_kept_level_in_place_and_cost_one_statement(
    stores: tuple[SQLiteHotStore, SQLiteHotStore],
) -> None:
    reader, other = stores
    turns = Turns()
    other.apply_now([turns.turn("bot-a", "project")])
    assert reader.current_level(_agent("bot-a")) == "project"
    seen = _statements(reader.conn)
    for n in range(5):
        other.apply_now([turns.turn("bot-a", "task", user=f"user-{n}")])
        assert reader.current_level(_agent("bot-a")) == "project"
    assert len(seen) == 5  # the mark only: the three level look-ups were not made again
    other.apply_now([turns.turn("bot-a", "task")])
    assert reader.current_level(_agent("bot-a")) == "task"
    assert len(seen) > 6


def test_a_principal_with_a_user_and_an_open_transaction_are_always_read(
    stores: tuple[SQLiteHotStore, SQLiteHotStore],
) -> None:
    reader, other = stores
    turns = Turns()
    other.apply_now([turns.turn("bot-a", "project"), turns.turn("bot-a", "task", user="alice")])
    alice = Principal("bot-a", "alice", None, None)
    assert reader.current_level(alice) == "task"
    assert reader.current_level(_agent("bot-a")) == "project"  # kept
    reader.conn.execute("BEGIN")
    try:
        reader.conn.execute("UPDATE wm_items SET level = 'global' WHERE item_id = 'ev-000001'")
        assert reader.current_level(_agent("bot-a")) == "global"
    finally:
        reader.conn.execute("ROLLBACK")  # the counter's step is taken back with it
    assert reader.current_level(_agent("bot-a")) == "project"


def test_a_store_without_the_triggers_is_always_read(stores: tuple[SQLiteHotStore, SQLiteHotStore]) -> None:
    reader, other = stores
    turns = Turns()
    for name in level_cache.TRIGGERS:
        other.conn.execute(f"DROP TRIGGER {name}")
    other.apply_now([turns.turn("bot-a", "task")])  # counted by nothing now
    conn = sqlite3.connect(str(reader.path), isolation_level=None, factory=HotConnection)
    fresh = SQLiteHotStore(conn)
    try:
        assert level_cache._mark(fresh.conn) is None
        assert fresh.current_level(_agent("bot-a")) == "task"
        other.apply_now([turns.turn("bot-a", "project")])
        assert fresh.current_level(_agent("bot-a")) == "project"
    finally:
        fresh.close()


def test_interleaved_changes_by_three_writers_always_read_as_fresh(
    stores: tuple[SQLiteHotStore, SQLiteHotStore], settings: Settings
) -> None:
    """A fixed random mix of inserts (agent-level and users'), deletes and updates, by another
    connection and by the reader itself: after each, the kept answer is the fresh one."""
    reader, other = stores
    rng = random.Random(20261125)
    turns = Turns()
    kept_reads = 0
    for _ in range(400):
        writer = rng.choice((reader, other))
        agent = rng.choice(AGENTS)
        op = rng.random()
        if op < 0.55:
            user = rng.choice((None, "alice", "bob"))
            writer.apply_now([turns.turn(agent, rng.choice(MEMORY_LEVELS), user)])
        elif op < 0.7:
            writer.conn.execute(
                "DELETE FROM wm_items WHERE item_id = (SELECT item_id FROM wm_items WHERE agent_id = ?"
                " ORDER BY ts DESC LIMIT 1)",
                (agent,),
            )
        elif op < 0.85:
            writer.conn.execute(
                "UPDATE wm_items SET level = ? WHERE item_id = (SELECT item_id FROM wm_items"
                " WHERE agent_id = ? AND owner IS NULL ORDER BY random() LIMIT 1)",
                (rng.choice(MEMORY_LEVELS), agent),
            )
        before = reader.conn.level_memo
        _assert_fresh(reader)
        kept_reads += before is not None and reader.conn.level_memo is before
    assert kept_reads > 40  # and the answer was kept across many of the steps


def test_a_level_set_by_another_process_is_seen_by_the_next_read(
    stores: tuple[SQLiteHotStore, SQLiteHotStore], settings: Settings
) -> None:
    reader, _ = stores
    assert reader.current_level(_agent("bot-a")) == "global"
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tiermem.runtime.memory import open_memory, record_turn\n"
        "from tiermem.settings import resolve_settings\n"
        "settings = resolve_settings(data_dir=Path(sys.argv[1]), env={})\n"
        "with open_memory(settings, 'bot-a') as memory:\n"
        "    record_turn(memory, 'start the task', 'started', memory_level=sys.argv[2])\n"
    )
    for level in ("task", "project", "global"):
        subprocess.run([sys.executable, "-c", script, str(settings.data_dir), level], check=True)
        assert reader.current_level(_agent("bot-a")) == level


def test_every_hot_store_connection_reads_through_the_cache(settings: Settings, tmp_path: Path) -> None:
    with SQLiteHotStore.open(settings) as store:
        store.current_level(_agent("bot-a"))
        assert store.conn.level_memo is not None


def test_triggers_dropped_under_a_live_connection_stop_the_keeping_at_once(
    stores: tuple[SQLiteHotStore, SQLiteHotStore],
) -> None:
    # The reader met the triggers before; after they are dropped (a store rebuilt in place),
    # nothing counts the next changes, so nothing may be kept on it either.
    reader, other = stores
    turns = Turns()
    other.apply_now([turns.turn("bot-a", "project")])
    assert reader.current_level(_agent("bot-a")) == "project"
    for name in level_cache.TRIGGERS:
        other.conn.execute(f"DROP TRIGGER {name}")
    assert reader.current_level(_agent("bot-a")) == "project"
    other.apply_now([turns.turn("bot-a", "task")])
    assert reader.current_level(_agent("bot-a")) == "task"
    other.apply_now([turns.turn("bot-a", "global")])
    assert reader.current_level(_agent("bot-a")) == "global"


@pytest.mark.parametrize("at", ["the mark", "the level"])
def test_a_change_committed_between_the_mark_and_the_level_is_seen_next(
    stores: tuple[SQLiteHotStore, SQLiteHotStore], at: str
) -> None:
    # Another connection commits right before the reader's statement named by `at` (found by
    # tracing the reader's statements, so the moment is exact, not a matter of timing).
    reader, other = stores
    turns = Turns()
    other.apply_now([turns.turn("bot-a", "project")])
    reader.current_level(_agent("bot-b"))  # the triggers met; nothing kept for bot-a yet
    marker = level_cache.COUNTER if at == "the mark" else "FROM wm_items"
    armed = [True]

    def commit_before(sql: str) -> None:
        if armed[0] and marker in sql:
            armed[0] = False
            other.apply_now([turns.turn("bot-a", "task")])

    reader.conn.set_trace_callback(commit_before)
    try:
        reader.current_level(_agent("bot-a"))
    finally:
        reader.conn.set_trace_callback(None)
    assert not armed[0]
    for _ in range(3):
        assert reader.current_level(_agent("bot-a")) == "task" == current_level(reader.conn, _agent("bot-a"))
