"""The candidates' small columns kept until the episodes change: always the rows SQLite reads.

`runtime.fts_rows` keeps the rows the searches read by rowid, per database
and column list, under the version of the kept phrase ranks. These tests
compare every served row with a fresh read before and after each kind of
change (an insert, a delete and a re-indexed summary, through another
connection), and show that a transaction, a store without the counting
triggers and a large archive are always read.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from helpers_runtime import append, episode
from test_read_path_candidates import EPISODE_COLS, QUOTE_COLS, memory  # noqa: F401  (the fixture)
from tiermem.runtime import fts_ranks, fts_rows
from tiermem.runtime.hotstore import open_hot_store
from tiermem.runtime.memory import AgentMemory
from tiermem.runtime.projector import project

from tiermem.settings import Settings


class _Every:
    """Every database counts as one with long episodes (the archive here is of short ones)."""

    def __contains__(self, db: object) -> bool:
        return True


@pytest.fixture(autouse=True)
def _long_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fts_ranks.TEXTS, "long_dbs", _Every())


def _read(conn: sqlite3.Connection, cols: str, rowids: list[int]) -> dict[int, tuple[Any, ...]]:
    marks = ",".join("?" * len(rowids))
    rows = conn.execute(f"SELECT e.rowid, {cols} FROM episodes e WHERE e.rowid IN ({marks})", rowids)
    return {r[0]: tuple(r)[1:] for r in rows}


def _all_equal(conn: sqlite3.Connection) -> int:
    """Every rowid there is (and one past the newest), in two orders and both column lists."""
    newest = conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0]
    rowids = list(range(1, newest + 2))
    served = 0
    for cols in (EPISODE_COLS, QUOTE_COLS):
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
    assert fts_rows._KEPT.version != kept  # the new episode started a new version
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
