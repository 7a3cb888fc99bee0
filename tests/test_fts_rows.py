"""The candidates' small columns kept until the episodes change: always the rows SQLite reads.

`runtime.fts_rows` keeps the rows the searches read by rowid, per database
and column list, under the version of the kept phrase ranks. These tests
compare every served row with a fresh read before and after each kind of
change (an insert, a delete and a re-indexed summary, through another
connection, and an update of each other column), and show that a
transaction, a store without the counting triggers and a large archive are
always read.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from helpers_runtime import append, episode
from test_fts_ranks import _long_episodes  # noqa: F401  (every database counts as one of long episodes)
from test_read_path_candidates import EPISODE_COLS, QUOTE_COLS, memory  # noqa: F401  (the fixture)
from tiermem.runtime import fts_ranks, fts_rows
from tiermem.runtime.hotstore import EPISODE_KEPT_COLUMNS, counts_changes, open_hot_store
from tiermem.runtime.memory import AgentMemory
from tiermem.runtime.projector import project

from tiermem.settings import Settings

# Every column an update is counted for: whatever columns a search asks for are served fresh.
EVERY_COL = ", ".join(f"e.{c}" for c in EPISODE_KEPT_COLUMNS)


def _read(conn: sqlite3.Connection, cols: str, rowids: list[int]) -> dict[int, tuple[Any, ...]]:
    marks = ",".join("?" * len(rowids))
    rows = conn.execute(f"SELECT e.rowid, {cols} FROM episodes e WHERE e.rowid IN ({marks})", rowids)
    return {r[0]: tuple(r)[1:] for r in rows}


def _all_equal(conn: sqlite3.Connection) -> int:
    """Every rowid there is (and one past the newest), in two orders and both column lists."""
    newest = conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0]
    rowids = list(range(1, newest + 2))
    served = 0
    for cols in (EPISODE_COLS, QUOTE_COLS, EVERY_COL):
        for asked in (rowids, rowids[::-3]):
            got = fts_rows.rows_by_rowid(conn, cols, asked)
            want = _read(conn, cols, asked)
            assert {r: got[r] for r in asked if r in got} == want
            served += len(want)
    return served


def test_kept_rows_are_those_of_the_store_through_every_change(
    memory: AgentMemory,  # noqa: F811
    settings: Settings,
) -> None:
    conn = memory.conn
    assert _all_equal(conn) > 100
    assert fts_rows._KEPT.by_cols[EPISODE_COLS]  # kept for the next question
    kept = fts_rows._KEPT.version
    append(settings, episode("other", "teal lake 999", "teal bread dawn", key_quotes=[{"text": "teal"}]))
    project(settings)
    assert _all_equal(conn) > 100
    assert fts_rows._KEPT.version == kept  # an episode added changes no row kept: they stay
    other = open_hot_store(settings)
    with other:  # deleted, then re-indexed, through another connection
        other.execute("DELETE FROM episodes WHERE rowid = (SELECT min(rowid) FROM episodes)")
    assert _all_equal(conn) > 100
    with other:
        other.execute(
            "UPDATE episodes SET summary = 'kitten' WHERE rowid = (SELECT max(rowid) FROM episodes)"
        )
    other.close()
    assert _all_equal(conn) > 100
    newest = conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0]
    assert fts_rows.rows_by_rowid(conn, QUOTE_COLS, [newest])[newest][2] == "kitten"


def test_inside_a_transaction_rows_are_read(memory: AgentMemory) -> None:  # noqa: F811
    conn = memory.conn
    first = conn.execute("SELECT min(rowid) FROM episodes").fetchone()[0]
    before = fts_rows.rows_by_rowid(conn, QUOTE_COLS, [first])[first]
    conn.execute("BEGIN")
    # An importance changed inside a transaction (no counted column): read, not served from before.
    conn.execute("UPDATE episodes SET importance = 99 WHERE rowid = ?", [first])
    inside = fts_rows.rows_by_rowid(conn, QUOTE_COLS, [first])[first]
    conn.execute("ROLLBACK")
    assert inside[-1] == 99 and before[-1] != 99
    assert fts_rows.rows_by_rowid(conn, QUOTE_COLS, [first])[first] == before


def test_stores_left_to_sqlite(
    memory: AgentMemory,  # noqa: F811
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fts_rows._KEPT.__init__()  # type: ignore[misc]
    monkeypatch.setattr(fts_ranks, "MAX_DOCS", 10)  # a large archive: its candidates are mostly new
    assert _all_equal(memory.conn) > 100
    assert fts_rows._KEPT.version is None and not fts_rows._KEPT.by_cols
    monkeypatch.setattr(fts_ranks, "MAX_DOCS", 5_000)
    conn = open_hot_store(settings)  # opening adds the triggers to a store that lacks them...
    try:
        with conn:
            conn.execute("DROP TRIGGER episodes_changed_ad")  # ...so one is taken away after
        assert _all_equal(conn) > 100
        assert fts_rows._KEPT.version is None and not fts_rows._KEPT.by_cols
    finally:
        conn.close()


# A new value for each column, of the type it holds (the key gets a new id).
_NEW_VALUES = {
    "episode_id": "01NEWIDNEWIDNEWIDNEWIDNEWI",
    "agent_id": "npc2",
    "name": "renamed",
    "summary": "kitten",
    "participants": '["zed"]',
    "start_ts": "1999-01-01T00:00:00Z",
    "end_ts": "2099-01-01T00:00:00Z",
    "importance": 99,
    "important": 1,
    "emotional_context": "glad",
    "kind": "knowledge",
    "project_id": "p9",
    "owner": "zed",
    "key_quotes": '[{"text": "kitten"}]',
    "source_event_ids": '["s9"]',
}


def test_an_update_of_any_column_is_read(
    memory: AgentMemory,  # noqa: F811
    settings: Settings,
) -> None:
    """Every column but the recall count moves the version when it is updated (through another
    connection, committed), so no kept row says what the store no longer does."""
    conn = memory.conn
    columns = [r[1] for r in conn.execute("PRAGMA table_info(episodes)")]
    assert sorted(EPISODE_KEPT_COLUMNS) == sorted(c for c in columns if c != "recall_count")
    assert _all_equal(conn) > 100
    other = open_hot_store(settings)
    try:
        for column in EPISODE_KEPT_COLUMNS:
            kept = fts_rows._KEPT.version
            with other:
                other.execute(
                    f"UPDATE episodes SET {column} = ? WHERE rowid = (SELECT min(rowid) FROM episodes)",
                    [_NEW_VALUES[column]],
                )
            assert _all_equal(conn) > 100, column
            assert fts_rows._KEPT.version != kept, column
        # The recall count, which every recall moves, is not counted: the rows stay kept.
        kept = fts_rows._KEPT.version
        with other:
            other.execute("UPDATE episodes SET recall_count = recall_count + 1")
        assert _all_equal(conn) > 100
        assert fts_rows._KEPT.version == kept
    finally:
        other.close()


def test_a_store_without_the_column_trigger(
    memory: AgentMemory,  # noqa: F811
    settings: Settings,
) -> None:
    """A store made before the trigger counting the other columns existed keeps nothing until its
    next open adds it."""
    conn = open_hot_store(settings)
    try:
        with conn:
            conn.execute(f"DROP TRIGGER {fts_rows.TRIGGER}")
        assert not counts_changes(conn, fts_rows.TRIGGER)
        fts_rows._KEPT.clear()
        assert _all_equal(conn) > 100
        assert fts_rows._KEPT.version is None and not fts_rows._KEPT.by_cols
        first = conn.execute("SELECT min(rowid) FROM episodes").fetchone()[0]
        with memory.conn:  # another connection: uncounted there, and read fresh here
            memory.conn.execute("UPDATE episodes SET importance = 77 WHERE rowid = ?", [first])
        assert fts_rows.rows_by_rowid(conn, QUOTE_COLS, [first])[first][-1] == 77
    finally:
        conn.close()
    again = open_hot_store(settings)  # the next open adds it
    try:
        assert counts_changes(again, fts_rows.TRIGGER)
        assert _all_equal(again) > 100
        assert fts_rows._KEPT.by_cols
    finally:
        again.close()


def test_the_rows_returned_are_read_only(memory: AgentMemory) -> None:  # noqa: F811
    conn = memory.conn
    first = conn.execute("SELECT min(rowid) FROM episodes").fetchone()[0]
    fts_rows.rows_by_rowid(conn, QUOTE_COLS, [first])
    got = fts_rows.rows_by_rowid(conn, QUOTE_COLS, [first])  # served from the kept rows
    assert fts_rows._KEPT.by_cols[QUOTE_COLS]
    with pytest.raises(TypeError):
        got[first] = ("changed",)  # type: ignore[index]
