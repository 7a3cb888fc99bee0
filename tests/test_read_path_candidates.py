"""One candidate query per try for both searches: the same candidates as the two queries it replaces.

`episode_search._candidate_rows` used to run its own FTS5 query per search
(BM25 with column weights for the episodes, plain BM25 for the remembered
turns), and a window query before each when every term is common. It now asks
the index once per try for every visible match with both ranks
(`_visible_matches`, kept on the connection until the store changes) and
orders them in Python; a windowed try whose visible matches all fit is not
ranked at all (the same rows). These tests keep the former implementation as
the reference and compare every candidate list, rank included, and every
search's result on an archive with owners, participants, identical episodes
(ties in rank) and, with small caps, the windowed tries; and they show that
the kept answer is never served once the store has changed, nor to another
principal.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from helpers_runtime import append, episode
from tiermem.runtime import episode_search, fts_terms, own_episodes, quote_search
from tiermem.runtime.episode_search import (
    COLUMN_WEIGHTS,
    PLAIN_WEIGHTS,
    _candidate_rows,
    _frequencies,
    _fts,
    _participant_match,
    query_terms,
)
from tiermem.runtime.hotstore import connect, item_clause
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.visibility import Principal

from tiermem.settings import Settings

WORDS = [
    "teal",
    "lake",
    "dawn",
    "bread",
    "kitten",
    "guitar",
    "rain",
    "trail",
    "concert",
    "quilt",
    "paint",
    "hike",
    "bakery",
    "dog",
]
PEOPLE = ["alice", "bob", "carol"]
QUERIES = [
    "teal lake",
    "What did she paint?",
    "bread bakery dog",
    "kitten",
    "guitar concert rain trail",
    "hike trail",
    "zebra",
    "the a of",
    "quilt teal paint",
]
EPISODE_COLS = "e.episode_id, e.name, e.summary, NULL, e.participants, e.start_ts, e.end_ts, e.importance"
QUOTE_COLS = "e.episode_id, e.name, e.summary, NULL, e.start_ts, e.end_ts, e.importance"


def _former_candidate_rows(
    conn: sqlite3.Connection,
    who: Principal,
    cols: str,
    column_weights: tuple[float, ...] | None,
    terms: list[str],
    frequencies: dict[str, int],
    participant: str | None,
    candidates: int,
    fallback: int,
    single: dict[str, str] | None = None,
    copy: Any = None,
) -> list[Any]:
    """The SQLite path of `_candidate_rows` before the shared query (its code, unchanged; never
    with an agent's copy, `_caps`)."""
    assert copy is None
    weights = ", ".join(str(w) for w in column_weights or ())
    rank = f"bm25(episodes_fts, {weights})" if weights else "bm25(episodes_fts)"
    where, params = item_clause(who, "e")
    if participant:
        where += " AND EXISTS (SELECT 1 FROM json_each(e.participants) p WHERE lower(p.value) = lower(?))"
        params.append(participant)
    phrase = _participant_match(participant) if participant else None
    from_fts = "FROM episodes_fts JOIN episodes e ON e.rowid = episodes_fts.rowid"
    if terms:
        ranked = f"SELECT {cols}, {rank} AS rank {from_fts} WHERE episodes_fts MATCH ? AND {where} ORDER BY rank LIMIT {candidates}"
        newest = (
            f"SELECT {cols}, 0.0 AS rank {from_fts} WHERE episodes_fts MATCH ? AND episodes_fts.rowid >= ?"
            f" AND {where} ORDER BY episodes_fts.rowid DESC LIMIT {candidates}"
        )
        windowed = fts_terms.needs_window(frequencies)
        for match in fts_terms.candidate_matches(frequencies, lambda t: _fts([t], single)):
            full = f"({match}) AND {phrase}" if phrase else match
            floor = 0
            if windowed:
                mine = ("episodes", "c.agent_id = ?", [who.agent_id])
                floor = fts_terms.newest_window(conn, "episodes_fts", full, owner_filter=mine)
            if floor:
                rows = conn.execute(newest, [full, floor, *params]).fetchall()
            else:
                rows = conn.execute(ranked, [full, *params]).fetchall()
            if rows:
                return rows
    latest = "ORDER BY importance DESC, end_ts DESC LIMIT ?"
    if phrase:
        sql = f"SELECT {cols}, 0.0 AS rank {from_fts} WHERE episodes_fts MATCH ? AND {where} {latest}"
        return conn.execute(sql, [phrase, *params, fallback]).fetchall()
    scan = (
        f"SELECT * FROM episodes WHERE agent_id = ? ORDER BY end_ts DESC LIMIT {episode_search.FALLBACK_SCAN}"
    )
    sql = f"SELECT {cols}, 0.0 AS rank FROM ({scan}) e WHERE {where} {latest}"
    return conn.execute(sql, [who.agent_id, *params, fallback]).fetchall()


def _archive(settings: Settings) -> None:
    rng = random.Random(11)
    events = []
    for agent in ("npc", "other"):
        for i in range(150):
            text = " ".join(rng.choices(WORDS, k=6))
            participants = rng.sample(PEOPLE, i % 3)  # none, one or two owners
            for copy in range(1 + (i % 25 == 0)):  # some episodes twice: equal ranks
                day = 1 + i % 28
                events.append(
                    episode(
                        agent,
                        f"{text.split()[0]} {i}",
                        text,
                        key_quotes=[{"text": " ".join(rng.choices(WORDS, k=5)), "event_id": f"{agent}{i}"}],
                        participants=participants,
                        start_ts=f"2026-03-{day:02d}T10:00:00Z",
                        end_ts=f"2026-03-{day:02d}T11:00:00Z",
                        importance=1 + i % 10,
                        source_event_ids=[f"src-{agent}-{i}-{copy}"],
                    )
                )
    append(settings, *events)
    project(settings)


@pytest.fixture
def memory(settings: Settings) -> Iterator[AgentMemory]:
    _archive(settings)
    with open_memory(settings, "npc") as m:
        yield m


def _both(conn: sqlite3.Connection, who: Principal, query: str, participant: str | None) -> list[Any]:
    """Every candidate list the two searches ask for, from the current and the former code."""
    out = []
    for terms in (query_terms(query), [f for g in quote_search.query_term_groups(query) for f in g]):
        single: dict[str, str] = {}
        overall = _frequencies(conn, terms, single)
        # The former code ranked by plain bm25(): every column alike, the agent's token then unknown.
        for cols, weights, former, n in (
            (EPISODE_COLS, COLUMN_WEIGHTS, COLUMN_WEIGHTS[:4], 60),
            (QUOTE_COLS, PLAIN_WEIGHTS, None, 200),
            (QUOTE_COLS, PLAIN_WEIGHTS, None, 7),
        ):
            new = _candidate_rows(conn, who, cols, weights, terms, overall, participant, n, 3, single)
            old = _former_candidate_rows(conn, who, cols, former, terms, overall, participant, n, 3, single)
            out.append(([tuple(r) for r in new], [tuple(r) for r in old]))
    return out


CAPS = [(None, None), (40, 30), (5, 12)]


def _caps(monkeypatch: pytest.MonkeyPatch, cap: int | None, window: int | None) -> None:
    # The index's candidates are compared here: no agent's own copy answers instead (runtime.own_episodes).
    monkeypatch.setattr(own_episodes, "MAX_EPISODES", 0)
    if cap is not None:
        monkeypatch.setattr(fts_terms, "CANDIDATE_DOC_CAP", cap)
    if window is not None:
        monkeypatch.setattr(fts_terms, "WINDOW_DOCS", window)


@pytest.mark.parametrize("caps", CAPS)
def test_the_shared_query_gives_the_former_candidates(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch, caps: tuple[int | None, int | None]
) -> None:
    _caps(monkeypatch, *caps)
    # The tries chosen as the former code chose them (by the whole index's counts): with the agent's
    # phrase they are chosen by the agent's own (tests/test_episode_index.py).
    monkeypatch.setattr(episode_search, "AGENT_SHARE", 0.0)
    compared = ties = unranked = 0
    for user in (None, *PEOPLE):
        who = memory.principal.as_user(user) if user else memory.principal
        for query in QUERIES:
            for participant in (None, "bob"):
                for new, old in _both(memory.conn, who, query, participant):
                    compared += bool(new)
                    if new != old:
                        # A windowed try whose visible matches all fit: the same rows, not ranked.
                        assert all(r[-1] == 0.0 for r in new), (user, query, participant)
                        assert sorted(r[:-1] for r in new) == sorted(r[:-1] for r in old)
                        unranked += 1
                        continue
                    ranks = [r[-1] for r in new]
                    ties += len(ranks) - len(set(ranks))
    assert compared > 100
    if caps[0] is None:
        assert ties > 0 and unranked == 0  # identical episodes rank equally, in the former order
    if caps[0] == 5:
        assert unranked > 0


def _searches(m: AgentMemory) -> list[Any]:
    out: list[Any] = []
    for user in (None, *PEOPLE):
        who = m.principal.as_user(user) if user else m.principal
        for q in QUERIES:
            for participant in (None, "bob"):
                out.append(episode_search.search_episodes(m.conn, who, q, participant, 5))
                out.append(quote_search.search_quotes(m.conn, who, q, participant, 40))
                out.append(quote_search.recall_lines(m.conn, who, q, participant, 300))
    return out


@pytest.mark.parametrize("caps", CAPS)
def test_the_searches_return_what_they_did(
    memory: AgentMemory, monkeypatch: pytest.MonkeyPatch, caps: tuple[int | None, int | None]
) -> None:
    _caps(monkeypatch, *caps)
    new = _searches(memory)
    with monkeypatch.context() as patch:
        patch.setattr(episode_search, "_candidate_rows", _former_candidate_rows)
        patch.setattr(quote_search, "_candidate_rows", _former_candidate_rows)
        old = _searches(memory)
    assert new == old
    assert sum(1 for r in new if r) > len(new) // 2


def test_the_kept_matches_follow_the_store(memory: AgentMemory, settings: Settings) -> None:
    conn, who = memory.conn, memory.principal.as_user("alice")
    terms = query_terms("kitten teal")
    overall = _frequencies(conn, terms)

    def ids() -> list[str]:
        rows = _candidate_rows(conn, who, EPISODE_COLS, COLUMN_WEIGHTS, terms, overall, None, 60, 3)
        return [str(r[0]) for r in rows]

    first = ids()
    assert first and ids() == first  # kept: the same answer
    # A row deleted through this connection is never served again.
    conn.execute("DELETE FROM episodes WHERE episode_id = ?", [first[0]])
    assert first[0] not in ids()
    # Nor one deleted by another connection (another process's projector, an erasure).
    second = ids()[0]
    other = connect(settings.data_dir / "hot" / "hot.sqlite", create=False)
    try:
        other.execute("DELETE FROM episodes WHERE episode_id = ?", [second])
    finally:
        other.close()
    assert second not in ids()


def test_the_kept_matches_are_per_principal(memory: AgentMemory) -> None:
    conn = memory.conn
    terms = query_terms("teal lake bread kitten")
    overall = _frequencies(conn, terms)
    seen = {}
    for user in (None, *PEOPLE):
        who = memory.principal.as_user(user) if user else memory.principal
        rows = _candidate_rows(conn, who, EPISODE_COLS, COLUMN_WEIGHTS, terms, overall, None, 60, 3)
        owners = {
            r[0]: conn.execute("SELECT owner FROM episodes WHERE episode_id = ?", [r[0]]).fetchone()[0]
            for r in rows
        }
        assert all(o is None or (user is not None and user in o) for o in owners.values()), user
        seen[user] = set(owners)
    assert len({frozenset(s) for s in seen.values()}) == len(seen)  # each principal its own set


def test_what_a_rolled_back_transaction_saw_is_not_kept(settings: Settings) -> None:
    # The change counter does not go back on a rollback: a search inside a transaction that
    # is then undone must not leave its matches behind for the next one to serve.
    _archive(settings)
    with open_memory(settings, "npc") as m:
        conn, alice = m.conn, m.principal.as_user("alice")
        terms = query_terms("kitten teal")
        overall = _frequencies(conn, terms)

        def found() -> set[str]:
            rows = _candidate_rows(conn, alice, EPISODE_COLS, COLUMN_WEIGHTS, terms, overall, None, 60, 3)
            return {str(r[0]) for r in rows}

        hidden_where = "agent_id='npc' AND owner IS NOT NULL AND instr(owner, 'alice') = 0"
        hidden = {str(r[0]) for r in conn.execute(f"SELECT episode_id FROM episodes WHERE {hidden_where}")}
        assert hidden and not found() & hidden
        conn.execute("BEGIN")
        conn.execute(f"UPDATE episodes SET owner = NULL WHERE {hidden_where}")
        assert found() & hidden  # inside the transaction they are visible
        conn.execute("ROLLBACK")
        assert not found() & hidden
