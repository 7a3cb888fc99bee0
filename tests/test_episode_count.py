"""The store's episode count kept by triggers (`meta.episodes_count`, runtime.hotstore): equal to the
episodes through every change, given to an older store at its next open (once, by one of two
processes), counted by the readers of a store that cannot keep it, and read instead of a walk of
the whole table by a process's first search (runtime.archive_stats)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

from tiermem.runtime import archive_stats, hotstore
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


def _open(path: str) -> None:
    connect(Path(path)).close()


def test_an_older_store_gets_its_count_once_at_its_next_open(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    _older(path)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open, args=(str(path),)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    conn = connect(path)
    assert _kept(conn) == _counted(conn) == 30
    _add(conn, "a3", 3)
    assert _kept(conn) == 33


def test_a_read_only_older_store_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "hot.db"
    _older(path)
    path.chmod(0o444)
    try:
        raw = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        assert episode_count(raw) == 30
        assert episode_count(raw, newest=10) == 10
    finally:
        path.chmod(0o644)


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
