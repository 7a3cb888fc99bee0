"""The unfolded-turn scan's rows kept per reader until a turn or a fold changes: always the query's rows.

`runtime.unfolded_rows` keeps the rows of the scan (the newest turns no
episode covers, per reader and participant) under the store's id, schema
cookie, newest rowids and a trigger-kept count of deletes and updates. These
tests compare every served list with the query it replaces, for several
readers, after every kind of change (new turns, folds, erasures of an event,
a user and an episode, deletes and updates through another connection,
VACUUM), check that a reader never gets another's turn (canary words), and
that a transaction or a store without the triggers is always asked.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from helpers_runtime import append, episode, interaction
from tiermem.runtime import unfolded_rows
from tiermem.runtime.hotstore import counts_changes, item_clause, open_hot_store
from tiermem.runtime.projector import project
from tiermem.runtime.unfolded import search_unfolded
from tiermem.runtime.visibility import Principal

from tiermem.settings import Settings

READERS = [
    Principal("npc"),
    Principal("npc", user="alice"),
    Principal("npc", user="bob"),
    Principal("other", user="alice"),
]
PARTICIPANTS = [None, "alice", "bob"]


def _clause(who: Principal, participant: str | None) -> tuple[str, list[Any]]:
    where, params = item_clause(who, "w")
    if participant:
        where += " AND lower(w.user) = lower(?)"
        params.append(participant)
    return where, params


def _sql(
    conn: sqlite3.Connection, who: Principal, participant: str | None, limit: int
) -> list[tuple[Any, ...]]:
    where, params = _clause(who, participant)
    rows = conn.execute(
        "SELECT w.event_id, w.ts, w.user, w.item_id FROM wm_items w"
        f" WHERE w.kind = 'interaction' AND {where}"
        " AND NOT EXISTS (SELECT 1 FROM folded_turns t WHERE t.event_id = w.event_id)"
        " ORDER BY w.ts DESC, w.item_id DESC LIMIT ?",
        (*params, limit),
    )
    return [tuple(r) for r in rows]


def _served(conn: sqlite3.Connection, who: Principal, participant: str | None, limit: int) -> list[Any]:
    where, params = _clause(who, participant)
    return unfolded_rows.newest_unfolded(conn, where, params, limit)


def _all_equal(conn: sqlite3.Connection) -> int:
    """Every reader's served rows equal the query's, twice (the second time from what is kept)."""
    rows = 0
    for who in READERS:
        for participant in PARTICIPANTS:
            for limit in (3, 400):
                first = _served(conn, who, participant, limit)
                assert first == _sql(conn, who, participant, limit), (who, participant, limit)
                assert _served(conn, who, participant, limit) is first  # kept
                rows += len(first)
    return rows


def _turns(settings: Settings, n: int, start: int = 0) -> list[str]:
    return append(
        settings,
        *(
            interaction(
                "npc" if k % 4 else "other",
                f"turn {k} about the lighthouse",
                user=["alice", "bob", "carol"][k % 3],
                ts=f"2026-03-01T10:{k:02d}:00Z",
            )
            for k in range(start, start + n)
        ),
    )


def test_served_rows_are_the_querys_through_every_change(settings: Settings) -> None:
    ids = _turns(settings, 24)
    project(settings)
    conn = open_hot_store(settings)
    try:
        assert counts_changes(conn, unfolded_rows.TRIGGER)  # a new store has the counting triggers
        assert _all_equal(conn) > 20
        versions = [unfolded_rows._version(conn)]
        # New turns.
        _turns(settings, 6, start=24)
        project(settings)
        assert _all_equal(conn) > 20
        # Turns folded into an episode.
        append(
            settings,
            episode(
                "npc", "lighthouse", "the lighthouse", source_event_ids=[ids[k] for k in (1, 3, 6, 7, 10)]
            ),
        )
        project(settings)
        assert _all_equal(conn) > 20
        versions.append(unfolded_rows._version(conn))
        # An event erased, a user erased, then the episode erased (its turns are reachable again).
        append(settings, {"type": "erasure", "target_kind": "event", "target": ids[9]})
        project(settings)
        assert _all_equal(conn) > 20
        append(settings, {"type": "erasure", "target_kind": "user", "target": "carol"})
        project(settings)
        assert _all_equal(conn) > 20
        assert conn.execute("SELECT count(*) FROM folded_turns").fetchone()[0] == 5
        episode_id = conn.execute("SELECT episode_id FROM episodes").fetchone()[0]
        append(settings, {"type": "erasure", "target_kind": "event", "target": episode_id})
        project(settings)
        assert conn.execute("SELECT count(*) FROM folded_turns").fetchone()[0] == 0
        assert _all_equal(conn) > 20
        versions.append(unfolded_rows._version(conn))
        # Deletes and updates through another connection, of the newest rows too; then VACUUM.
        other = open_hot_store(settings)
        with other:
            other.execute("DELETE FROM wm_items WHERE rowid = (SELECT max(rowid) FROM wm_items)")
        assert _all_equal(conn) > 20
        with other:
            other.execute(
                "UPDATE wm_items SET ts = '2020-01-01T00:00:00Z' WHERE user_message = 'turn 5 about the lighthouse'"
            )
        assert _all_equal(conn) > 20
        with other:
            other.execute("INSERT INTO folded_turns (event_id, episode_id) VALUES (?, 'e')", [ids[13]])
        assert _all_equal(conn) > 20
        with other:
            other.execute("UPDATE folded_turns SET event_id = ? WHERE event_id = ?", [ids[14], ids[13]])
        assert _all_equal(conn) > 20
        with other:
            other.execute("DELETE FROM folded_turns")
        assert _all_equal(conn) > 20
        other.execute("VACUUM")
        other.close()
        assert _all_equal(conn) > 20
        versions.append(unfolded_rows._version(conn))
        assert len(set(versions)) == len(versions)
    finally:
        conn.close()


def test_a_reader_never_gets_another_readers_turns(settings: Settings) -> None:
    append(
        settings,
        interaction("npc", "my locker code is canaryalice77", user="alice"),
        interaction("npc", "my locker code is canarybob88", user="bob"),
        interaction("other", "the locker code is canaryother99", user="alice"),
    )
    project(settings)
    conn = open_hot_store(settings)
    try:
        for _ in range(2):  # the second round from what the first kept
            found = {
                (who.agent_id, who.user): {
                    t["user_message"] for t in search_unfolded(conn, who, "locker code")
                }
                for who in READERS
            }
            assert found[("npc", "alice")] == {"my locker code is canaryalice77"}
            assert found[("npc", "bob")] == {"my locker code is canarybob88"}
            assert found[("other", "alice")] == {"the locker code is canaryother99"}
            assert found[("npc", None)] == set()  # the agent alone reads no user's turns
        assert search_unfolded(conn, Principal("npc", user="alice"), "locker", participant="bob") == []
    finally:
        conn.close()


def test_an_erased_turn_is_never_served_from_what_was_kept(settings: Settings) -> None:
    ids = append(settings, interaction("npc", "the canarysecret42 is under the mat", user="alice"))
    project(settings)
    conn = open_hot_store(settings)
    try:
        alice = Principal("npc", user="alice")
        assert [t["event_id"] for t in search_unfolded(conn, alice, "canarysecret42")] == ids
        append(settings, {"type": "erasure", "target_kind": "event", "target": ids[0]})
        project(settings)
        assert search_unfolded(conn, alice, "canarysecret42") == []
        assert _served(conn, alice, None, 400) == []
    finally:
        conn.close()


@pytest.mark.parametrize("case", ["transaction", "no trigger"])
def test_nothing_is_kept_when_the_count_cannot_be_trusted(settings: Settings, case: str) -> None:
    _turns(settings, 8)
    project(settings)
    conn = open_hot_store(settings)
    try:
        if case == "no trigger":
            with conn:
                conn.execute(f"DROP TRIGGER {unfolded_rows.TRIGGER}")
            conn.counting_triggers = None  # type: ignore[attr-defined]  # asked again
        else:
            conn.execute("BEGIN")
        who = Principal("npc", user="alice")
        first = _served(conn, who, None, 400)
        assert first == _sql(conn, who, None, 400)
        assert _served(conn, who, None, 400) is not first  # asked again, not kept
        if case == "transaction":
            conn.execute("ROLLBACK")
    finally:
        conn.close()
