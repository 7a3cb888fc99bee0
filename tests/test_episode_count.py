"""The store's episode count kept by triggers (`meta.episodes_count`, runtime.hotstore): equal to the
episodes through every change, given to an older store at its next open (once, by one of two
processes), counted by the readers of a store that cannot keep it, and read instead of a walk of
the whole table by a process's first search (runtime.archive_stats)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers_runtime import open_in_processes
from tiermem.runtime import archive_stats, hotstore, sqlite_apply
from tiermem.runtime.hotstore import EPISODE_COUNT_TRIGGER, connect, episode_count, write_transaction


def _add(conn: sqlite3.Connection, agent: str, n: int) -> None:
    conn.executemany(
        "INSERT INTO episodes (episode_id, agent_id, name, summary, start_ts, end_ts, importance)"
        " VALUES (?, ?, 'day', 'a walk by the lake', '2026-03-01T10:00:00Z', '2026-03-01T11:00:00Z', 3)",
        [(f"{agent}-{k}", agent) for k in range(n)],
    )


def _kept(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT value FROM meta WHERE key = 'episodes_count'").fetchone()[0])


def _counted(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM episodes").fetchone()[0])


def test_the_count_follows_every_change(tmp_path: Path) -> None:
    conn = connect(tmp_path / "hot.db")
    assert _kept(conn) == 0
    _add(conn, "a1", 30)
    _add(conn, "a2", 12)
    assert _kept(conn) == _counted(conn) == 42
    conn.execute("DELETE FROM episodes WHERE agent_id = 'a2' AND rowid % 2 = 0")
    conn.execute("UPDATE episodes SET summary = 'moved', agent_id = 'a3' WHERE agent_id = 'a1' AND rowid < 5")
    conn.execute(
        "INSERT INTO episodes (episode_id, agent_id, name) VALUES ('a1-10', 'a1', 'again')"
        " ON CONFLICT (episode_id) DO NOTHING"
    )
    assert _kept(conn) == _counted(conn)
    try:
        with write_transaction(conn):
            _add(conn, "a4", 5)
            conn.execute("DELETE FROM episodes WHERE agent_id = 'a1'")
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert _kept(conn) == _counted(conn)
    conn.execute("DELETE FROM episodes")
    assert _kept(conn) == _counted(conn) == 0
    assert episode_count(conn) == 0


def _older(path: Path) -> None:
    """The store as made before the count: no triggers, no meta row."""
    conn = connect(path)
    _add(conn, "a1", 25)
    conn.execute(f"DROP TRIGGER {EPISODE_COUNT_TRIGGER}")
    conn.execute("DROP TRIGGER episodes_count_ai")
    conn.execute("DELETE FROM meta WHERE key = 'episodes_count'")
    _add(conn, "a2", 5)  # written by an older writer: not counted
    conn.close()


def test_an_older_store_gets_its_count_once_at_its_next_open(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    _older(path)
    open_in_processes(path)
    conn = connect(path)
    assert _kept(conn) == _counted(conn) == 30
    _add(conn, "a3", 3)
    assert _kept(conn) == 33


def test_a_read_only_older_store_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    _older(path)
    raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # a reader that cannot give it the count
    assert episode_count(raw) == 30
    assert episode_count(raw, newest=10) == 10


def test_a_processs_first_search_reads_the_count_instead_of_walking_the_table(tmp_path: Path) -> None:
    conn = connect(tmp_path / "hot.db")
    _add(conn, "a1", 40)
    _add(conn, "a2", 60)
    archive_stats.clear()
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        assert archive_stats.sizes(conn, "a1") == (hotstore.database_key(conn), 40, 100)
    finally:
        conn.set_trace_callback(None)
    walks = [s for s in statements if "count(*)" in s.lower() and "agent_id" not in s]
    assert walks == []
    # An episode added after the version was read: counted up to it, not taken from the newer count.
    newest = conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0]
    _add(conn, "a3", 2)
    assert episode_count(conn, newest) == 100 and episode_count(conn) == 102


def _ev(k: int, agent: str = "a1", participants: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "type": "episode",
        "event_id": f"ep-{agent}-{k}",
        "agent_id": agent,
        "name": "day",
        "summary": "a walk by the lake",
        "participants": list(participants),
        "start_ts": "2026-03-01T10:00:00Z",
        "end_ts": "2026-03-01T11:00:00Z",
        "importance": 3,
        "source_event_ids": [f"t{agent}{k}"],
    }


def test_a_read_only_older_store_opened_through_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_ensure_episode_count` on a store it cannot write (opened read-only: the tests run as root,
    which a file's mode does not stop): left as it is, no error, its episodes counted."""
    path = tmp_path / "hot.db"
    _older(path)
    real = sqlite3.connect
    monkeypatch.setattr(
        hotstore.sqlite3, "connect", lambda p, **kw: real(f"file:{p}?mode=ro", uri=True, **kw)
    )
    conn = connect(path)
    assert not hotstore._has_trigger(conn, EPISODE_COUNT_TRIGGER)
    assert episode_count(conn) == 30
    assert archive_stats.sizes(conn, "a1")[1:] == (25, 30)


def test_no_write_slips_in_while_an_older_store_gets_its_count(tmp_path: Path) -> None:
    """Another connection tries a write at every statement of the migration: none gets in between
    the triggers and the count (one write transaction)."""
    path = tmp_path / "hot.db"
    _older(path)
    conn = connect(path, create=False)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    slipped: list[str] = []
    started: list[bool] = []

    def between(sql: str) -> None:
        if sql.startswith("BEGIN IMMEDIATE") and not started:
            started.append(True)
            return
        if started:
            try:
                other.execute(
                    "INSERT INTO episodes (episode_id, agent_id, name) VALUES (?, 'x', 'n')",
                    [f"slip{len(slipped)}"],
                )
                slipped.append(sql)
            except sqlite3.OperationalError:
                pass

    conn.set_trace_callback(between)
    hotstore._ensure_episode_count(conn)
    conn.set_trace_callback(None)
    assert slipped == []
    assert _kept(conn) == _counted(conn)


def test_projection_and_erasures_keep_the_count(tmp_path: Path) -> None:
    conn = connect(tmp_path / "hot.db")
    sqlite_apply.apply_now(conn, [_ev(k) for k in range(20)] + [_ev(k, "a2", ("bob",)) for k in range(10)])
    sqlite_apply.apply_now(conn, [_ev(k) for k in range(5)])  # again: ON CONFLICT DO NOTHING
    assert _kept(conn) == _counted(conn) == 30
    sqlite_apply.apply_now(
        conn,
        [
            {
                "type": "erasure",
                "event_id": "er1",
                "agent_id": "a1",
                "target_kind": "event",
                "target": "ep-a1-3",
                "ts": "2026-03-02T00:00:00Z",
            }
        ],
    )
    sqlite_apply.apply_now(
        conn,
        [
            {
                "type": "erasure",
                "event_id": "er2",
                "agent_id": "a1",
                "target_kind": "user",
                "target": "bob",
                "ts": "2026-03-02T00:00:00Z",
            }
        ],
    )
    sqlite_apply.apply_now(
        conn,
        [
            {
                "type": "erasure",
                "event_id": "er3",
                "agent_id": "a1",
                "target_kind": "agent",
                "target": "a1",
                "ts": "2026-03-02T00:00:00Z",
            }
        ],
    )
    assert _kept(conn) == _counted(conn)


def test_a_store_of_another_schema_version_dropped_and_made_again(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    conn = connect(path)
    _add(conn, "a1", 12)
    conn.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    conn.close()
    conn = connect(path)
    assert _kept(conn) == _counted(conn) == 0
    _add(conn, "a1", 3)
    assert _kept(conn) == _counted(conn) == 3
