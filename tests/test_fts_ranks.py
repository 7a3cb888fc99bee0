"""BM25 ranks of an OR of words summed from each word's kept ranks: bit for bit what FTS5 computes.

`runtime.fts_ranks` keeps each phrase's ranks (both rankings the searches
use) until an episode is inserted, deleted or re-indexed, and sums them per
question. These tests compare every served (rowid, ranks) list with the
query it replaces, for several readers, before and after each kind of change
(through this connection and another one), and show that anything but an OR
of plain phrases, or a store without the counting triggers, is left to the
index.
"""

from __future__ import annotations

import random
import sqlite3
from typing import Any

import pytest
from helpers_runtime import append, episode
from test_read_path_candidates import PEOPLE, WORDS, memory  # noqa: F401  (the fixture)
from tiermem.runtime import fts_ranks
from tiermem.runtime.episode_search import RANKINGS, _rank_sql
from tiermem.runtime.hotstore import item_clause, open_hot_store
from tiermem.runtime.memory import AgentMemory
from tiermem.runtime.projector import project
from tiermem.runtime.visibility import Principal

from tiermem.settings import Settings

RANKS = [_rank_sql(w) for w in RANKINGS]


class _Every:
    """Every database counts as one with long episodes (the archive here is of short ones)."""

    def __contains__(self, db: object) -> bool:
        return True


@pytest.fixture(autouse=True)
def _long_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fts_ranks.TEXTS, "long_dbs", _Every())


READERS = [Principal("npc"), Principal("npc", user="alice"), Principal("other", user="bob")]


def _sql(conn: sqlite3.Connection, who: Principal, match: str) -> list[tuple[Any, ...]]:
    where, params = item_clause(who, "e")
    rows = conn.execute(
        f"SELECT episodes_fts.rowid, {', '.join(RANKS)} FROM episodes_fts CROSS JOIN episodes e"
        f" ON e.rowid = episodes_fts.rowid WHERE episodes_fts MATCH ? AND {where} ORDER BY episodes_fts.rowid",
        [match, *params],
    )
    return [tuple(r) for r in rows]


def _served(conn: sqlite3.Connection, who: Principal, match: str) -> list[tuple[Any, ...]] | None:
    where, params = item_clause(who, "e")
    return fts_ranks.ranked_rows(conn, where, params, match, RANKINGS, from_copy=False)


def _matches(rng: random.Random) -> list[str]:
    out = []
    for _ in range(12):
        words = rng.sample([*WORDS, "zzz", "bre", "do"], rng.randint(1, 4))
        out.append(" OR ".join(f'"{w}"*' if len(w) >= 4 else f'"{w}"' for w in words))
    return out


def _all_equal(conn: sqlite3.Connection, rng: random.Random) -> int:
    served = 0
    for match in _matches(rng):
        for who in READERS:
            got = _served(conn, who, match)
            assert got is not None, match
            assert got == _sql(conn, who, match), (match, who)  # rowids and both ranks, bit for bit
            served += len(got)
    return served


def test_summed_ranks_are_those_of_the_index_through_every_change(
    memory: AgentMemory,  # noqa: F811
    settings: Settings,
) -> None:
    conn, rng = memory.conn, random.Random(3)
    assert _all_equal(conn, rng) > 100
    assert fts_ranks._KEPT.phrases  # kept for the next question
    # A new episode (any agent's) changes every word's IDF and the average length.
    append(settings, episode("other", "teal lake 999", "teal bread dawn", key_quotes=[{"text": "teal teal"}]))
    project(settings)
    assert _all_equal(conn, rng) > 100
    # An episode deleted, then one re-indexed, through another connection.
    other = open_hot_store(settings)
    with other:
        other.execute(
            "DELETE FROM episodes WHERE rowid = (SELECT min(rowid) FROM episodes WHERE summary LIKE '%teal%')"
        )
    assert _all_equal(conn, rng) > 100
    with other:
        other.execute(
            "UPDATE episodes SET summary = 'kitten kitten kitten' WHERE rowid = (SELECT max(rowid) FROM episodes)"
        )
    other.close()
    assert _all_equal(conn, rng) > 100


def test_only_an_or_of_plain_phrases_is_served(memory: AgentMemory) -> None:  # noqa: F811
    conn, who = memory.conn, Principal("npc")
    assert fts_ranks.phrases_of('"teal"* OR "dog"') == ['"teal"*', '"dog"']
    for match in ['"teal"* AND "lake"*', '("teal"*) AND participants : "alice"', '"teal lake"', "teal"]:
        assert fts_ranks.phrases_of(match) is None
        assert _served(conn, who, match) is None


def test_a_store_without_the_counting_triggers_is_left_to_the_index(settings: Settings) -> None:
    append(settings, episode("npc", "teal 1", "teal lake", key_quotes=[{"text": "dawn"}]))
    project(settings)
    conn = open_hot_store(settings)  # opening adds the triggers to a store that lacks them...
    try:
        with conn:
            conn.execute("DROP TRIGGER episodes_changed_ad")  # ...so one is taken away after
        assert _served(conn, Principal("npc"), '"teal"*') is None
    finally:
        conn.close()


@pytest.mark.parametrize("people", [PEOPLE])
def test_readers_see_only_their_matches(memory: AgentMemory, people: list[str]) -> None:  # noqa: F811
    conn = memory.conn
    match = '"teal"* OR "lake"* OR "bread"*'
    seen = {
        who.user: {r[0] for r in _served(conn, who, match) or []}
        for who in [Principal("npc", user=p) for p in people]
    }
    assert len({frozenset(v) for v in seen.values()}) > 1  # each reader its own matches
    for user, rowids in seen.items():
        assert rowids == {r[0] for r in _sql(conn, Principal("npc", user=user), match)}


def test_a_large_archive_is_left_to_the_index(memory: AgentMemory, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    conn, who, match = memory.conn, Principal("npc"), '"teal"* OR "lake"*'
    assert _served(conn, who, match) == _sql(conn, who, match)
    monkeypatch.setattr(fts_ranks, "MAX_DOCS", 10)  # the fixture's archive is larger than that
    assert _served(conn, who, match) is None


def test_a_store_of_short_episodes_is_left_to_the_index(
    memory: AgentMemory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fts_ranks.TEXTS, "long_dbs", set())  # no long episode prepared here
    assert _served(memory.conn, Principal("npc"), '"teal"* OR "lake"*') is None
