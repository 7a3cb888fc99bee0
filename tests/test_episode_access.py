"""`episode_access`: the narrow copy of who may see each episode, that the episode search checks.

The candidate tries check every match against the principal on the copy's
rows instead of the wide episode rows (runtime.hotstore, runtime.episode_search).
A copy that drifted from the episodes would show an episode to a reader the
row no longer allows, so these tests hold it equal to the rows through every
way an episode changes (projection, a changed owner or agent, deletion, a
user's erasure), on a store made before the copy existed, and when two
processes open such a store at once; and they look for two users' canaries.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers_runtime import append, episode, open_in_processes
from tiermem.runtime import episode_search, hotstore
from tiermem.runtime.hotstore import EPISODE_ACCESS_TRIGGER, connect, keeps_episode_access

from tiermem import Memory
from tiermem.settings import resolve_settings


def _copy_and_rows(conn: sqlite3.Connection) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    copy = [
        tuple(r) for r in conn.execute("SELECT rowid, agent_id, owner FROM episode_access ORDER BY rowid")
    ]
    rows = [tuple(r) for r in conn.execute("SELECT rowid, agent_id, owner FROM episodes ORDER BY rowid")]
    return copy, rows


def _canary_episodes(data: Path) -> None:
    """Agent a1: one episode per user holding that user's canary, one shared, one of nobody's; agent a2 too."""
    settings = resolve_settings(data_dir=data, env={})
    events = []
    for agent in ("a1", "a2"):
        for user, canary in (("alice", "ALICECANARY"), ("bob", "BOBCANARY")):
            events.append(
                episode(
                    agent,
                    f"{user} and the red pot",
                    f"{user} hid the {canary}{agent} key under the red pot",
                    participants=[user],
                    source_event_ids=[f"s-{agent}-{user}"],
                )
            )
        events.append(
            episode(
                agent,
                "the red pot for both",
                f"alice and bob moved the SHAREDCANARY{agent} red pot",
                participants=["alice", "bob"],
                source_event_ids=[f"s-{agent}-both"],
            )
        )
        events.append(
            episode(
                agent,
                "the red pot in the hall",
                f"the PUBLICCANARY{agent} red pot stands in the hall",
                source_event_ids=[f"s-{agent}-none"],
            )
        )
    append(settings, *events)


def _recalled(mem: Memory, agent: str, user: str | None) -> str:
    return str(mem.agent(agent).call_tool("recall_memory", {"query": "red pot key"}, user=user))


def test_the_copy_follows_projection_owner_changes_deletion_and_erasure(tmp_path: Path) -> None:
    _canary_episodes(tmp_path / "data")
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        conn = connect(mem.settings.hot_db)
        assert keeps_episode_access(conn)
        copy, rows = _copy_and_rows(conn)
        assert copy == rows and len(rows) == 8
        conn.execute("UPDATE episodes SET owner = 'carol' WHERE summary LIKE '%ALICECANARYa1%'")
        conn.execute("UPDATE episodes SET agent_id = 'a2' WHERE summary LIKE '%PUBLICCANARYa1%'")
        conn.execute("UPDATE episodes SET recall_count = recall_count + 1")  # not a column of the copy
        conn.execute("DELETE FROM episodes WHERE summary LIKE '%BOBCANARYa2%'")
        copy, rows = _copy_and_rows(conn)
        assert copy == rows and len(rows) == 7
        mem.forget(user="bob", reason="test")
        mem.refresh()
        copy, rows = _copy_and_rows(conn)
        assert copy == rows
        assert not any(r[2] and "bob" in str(r[2]) for r in copy)
    finally:
        mem.close()


def test_a_reowned_episode_leaves_its_former_reader_at_once(tmp_path: Path) -> None:
    """Fails if the copy missed an owner's change: alice would still get the episode."""
    _canary_episodes(tmp_path / "data")
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        assert "ALICECANARYa1" in _recalled(mem, "a1", "alice")
        conn = connect(mem.settings.hot_db)
        conn.execute("UPDATE episodes SET owner = 'bob' WHERE summary LIKE '%ALICECANARYa1%'")
        assert "ALICECANARYa1" not in _recalled(mem, "a1", "alice")
        assert "ALICECANARYa1" in _recalled(mem, "a1", "bob")
        conn.execute("UPDATE episodes SET agent_id = 'a2' WHERE summary LIKE '%PUBLICCANARYa1%'")
        assert "PUBLICCANARYa1" not in _recalled(mem, "a1", "alice")
        assert "PUBLICCANARYa1" in _recalled(mem, "a2", "alice")
    finally:
        mem.close()


@pytest.mark.parametrize("user", ["alice", "bob", None])
def test_each_reader_gets_only_what_it_may_see(tmp_path: Path, user: str | None) -> None:
    _canary_episodes(tmp_path / "data")
    mem = Memory.open(tmp_path / "data", env={})
    try:
        mem.refresh()
        out = _recalled(mem, "a1", user)
        assert "a2" not in out.replace("a1", "")  # no canary of the other agent
        allowed = {"PUBLICCANARYa1"} | ({"SHAREDCANARYa1", f"{user.upper()}CANARYa1"} if user else set())
        every = {"PUBLICCANARYa1", "SHAREDCANARYa1", "ALICECANARYa1", "BOBCANARYa1"}
        assert {c for c in every if c in out} == allowed
    finally:
        mem.close()


def _older_store(data: Path) -> Path:
    """A projected store, then made as a store from before the copy: no table, no triggers."""
    _canary_episodes(data)
    mem = Memory.open(data, env={})
    try:
        mem.refresh()
        path = Path(mem.settings.hot_db)
    finally:
        mem.close()
    raw = sqlite3.connect(path)
    for name in ("episode_access_ai", "episode_access_ad", EPISODE_ACCESS_TRIGGER):
        raw.execute(f"DROP TRIGGER {name}")
    raw.execute("DROP TABLE episode_access")
    raw.commit()
    raw.close()
    return path


def test_an_older_store_gets_the_copy_filled_on_its_next_open(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    unopened = connect(path, create=False)  # a connection that does not set the schema up
    assert not keeps_episode_access(unopened)
    who = episode_search.Principal("a1", user="alice")
    before = episode_search.search_episodes(unopened, who, "red pot key")
    unopened.close()
    conn = connect(path)
    try:
        assert keeps_episode_access(conn)
        copy, rows = _copy_and_rows(conn)
        assert copy == rows and len(rows) == 8
        assert episode_search.search_episodes(conn, who, "red pot key") == before
    finally:
        conn.close()


def test_two_processes_opening_an_older_store_fill_the_copy_once(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    open_in_processes(path)
    conn = connect(path)
    try:
        copy, rows = _copy_and_rows(conn)
        assert copy == rows and len(rows) == 8
    finally:
        conn.close()


ALICE = episode_search.Principal("a1", user="alice")


def _canaries(conn: sqlite3.Connection, who: episode_search.Principal = ALICE) -> set[str]:
    rows = episode_search.search_episodes(conn, who, "red pot key")
    return {w for r in rows for w in str(r).replace("'", " ").split() if "CANARY" in w or "SECRET" in w}


def test_a_stale_copy_left_without_its_triggers_is_filled_again(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE episode_access (rowid INTEGER PRIMARY KEY, agent_id TEXT, owner TEXT)")
    raw.execute("INSERT INTO episode_access SELECT rowid, 'a1', 'alice' FROM episodes")  # all wrong
    raw.commit()
    raw.close()
    conn = connect(path)
    try:
        copy, rows = _copy_and_rows(conn)
        assert copy == rows
        assert _canaries(conn) == {"PUBLICCANARYa1", "SHAREDCANARYa1", "ALICECANARYa1"}
    finally:
        conn.close()


def test_a_writer_cannot_slip_a_change_between_the_copy_and_its_triggers(tmp_path: Path) -> None:
    """The fill and the triggers are one write transaction: a re-owning committed by another
    connection while they are made waits for them, and the copy follows it."""
    path = _older_store(tmp_path / "data")
    conn = connect(path, create=False)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    tried: list[str] = []

    def between(sql: str) -> None:
        if not tried and "CREATE TRIGGER" in sql and "episode_access_ai" in sql:
            try:
                other.execute("UPDATE episodes SET owner = 'bob' WHERE summary LIKE '%ALICECANARYa1%'")
                tried.append("written")
            except sqlite3.OperationalError as exc:  # locked out, as it must be
                tried.append(str(exc))

    conn.set_trace_callback(between)
    hotstore._ensure_episode_access(conn)
    conn.set_trace_callback(None)
    assert tried and tried != ["written"]
    other.execute("UPDATE episodes SET owner = 'bob' WHERE summary LIKE '%ALICECANARYa1%'")
    copy, rows = _copy_and_rows(conn)
    assert copy == rows
    assert "ALICECANARYa1" not in _canaries(connect(path))


def test_a_connection_notices_when_the_copy_stops_being_kept(tmp_path: Path) -> None:
    """Triggers dropped by another connection (as an in-place rebuild of `episodes` would):
    a connection that trusted the copy before asks the rows again."""
    _canary_episodes(tmp_path / "data")
    mem = Memory.open(tmp_path / "data", env={})
    mem.refresh()
    hot = mem.settings.hot_db
    mem.close()
    a = connect(hot)
    assert "ALICECANARYa1" in _canaries(a)
    b = connect(hot)
    for name in ("episode_access_ai", "episode_access_ad", EPISODE_ACCESS_TRIGGER):
        b.execute(f"DROP TRIGGER {name}")
    b.execute("UPDATE episodes SET owner = 'bob' WHERE summary LIKE '%ALICECANARYa1%'")
    assert not keeps_episode_access(a)
    assert "ALICECANARYa1" not in _canaries(a)


def test_a_row_changed_between_the_visibility_check_and_its_read_is_not_served(tmp_path: Path) -> None:
    """Between the candidate try and the reading of the chosen rows, another process erases
    alice's newest episode and projects bob's into the freed rowid: the row read is checked
    again, so bob's words never reach alice (they did, before the check)."""
    data = tmp_path / "data"
    _canary_episodes(data)
    settings = resolve_settings(data_dir=data, env={})
    append(
        settings,
        episode("a1", "alice red pot key", "alice NEWESTALICE red pot key", participants=["alice"]),
    )
    mem = Memory.open(data, env={})
    mem.refresh()
    hot = mem.settings.hot_db
    mem.close()
    reader = connect(hot)
    other = sqlite3.connect(hot, isolation_level=None)
    newest = other.execute("SELECT max(rowid) FROM episodes").fetchone()[0]
    swapped: list[int] = []

    def between(sql: str) -> None:
        if not swapped and "FROM episodes e WHERE e.rowid IN" in sql:
            other.execute("BEGIN IMMEDIATE")
            other.execute("DELETE FROM episodes WHERE rowid = ?", [newest])
            cols = [r[1] for r in other.execute("PRAGMA table_info(episodes)")]
            bob = {
                "episode_id": "'bob-new'",
                "owner": "'bob'",
                "summary": "'bob BOBSECRET red pot key'",
                "participants": "'[\"bob\"]'",
            }
            picked = ", ".join(bob.get(c, c) for c in cols)
            other.execute(
                f"INSERT INTO episodes ({', '.join(cols)}) SELECT {picked} FROM episodes WHERE rowid = 1"
            )
            swapped.append(
                other.execute("SELECT rowid FROM episodes WHERE episode_id = 'bob-new'").fetchone()[0]
            )
            other.execute("COMMIT")

    reader.set_trace_callback(between)
    got = _canaries(reader)
    reader.set_trace_callback(None)
    assert swapped == [newest]  # bob's episode took alice's rowid between the two statements
    assert "BOBSECRET" not in got
    assert "BOBSECRET" in _canaries(connect(hot), episode_search.Principal("a1", user="bob"))


def test_a_read_only_older_store_opens_and_searches_the_rows(tmp_path: Path) -> None:
    path = _older_store(tmp_path / "data")
    ro = sqlite3.connect(f"file:{path}?mode=ro", uri=True, factory=hotstore.HotConnection)
    hotstore._ensure_episode_access(ro)  # cannot write: leaves the store as it is
    assert not keeps_episode_access(ro)
    assert _canaries(ro) == {"PUBLICCANARYa1", "SHAREDCANARYa1", "ALICECANARYa1"}
