"""Long conversations: passages skipped by a provable bound, notes kept per episode; results unchanged.

A quote search skips the passages whose upper bound is below the best lower
bounds (runtime.passage_bounds) and keeps the notes of its candidate
episodes until a note changes (runtime.note_cache). These tests pin that the
results stay those of scoring every passage from its text (the reference of
test_read_path_long), that every exact score lies within its bounds (what
fails when a bound is broken), that the bound does skip passages here, and
that kept notes follow inserts, erasures and the reader's visibility.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_read_path_long import QUERIES, _reference_quotes, memory  # noqa: F401  (the fixture)
from tiermem.runtime import hotstore, note_cache, passage_bounds
from tiermem.runtime import quote_search as qs
from tiermem.runtime.hotstore import open_hot_store
from tiermem.runtime.memory import AgentMemory
from tiermem.runtime.notes import notes_for
from tiermem.runtime.visibility import Principal

from tiermem.settings import Settings


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """Every call of the bound: (its arguments, what it returned)."""
    calls: list[tuple[Any, ...]] = []
    real = passage_bounds.survivors

    def survivors(*args: Any) -> Any:
        out = real(*args)
        calls.append((args, out))
        return out

    monkeypatch.setattr(qs, "survivors", survivors)
    return calls


def test_bounded_search_ranks_exactly_as_scoring_every_passage(
    memory: AgentMemory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(passage_bounds, "MIN_PASSAGES", 0)  # bound every search, however small
    calls = _recording(monkeypatch)
    for query in QUERIES:
        for limit in (1, 5, 40):
            expected = _reference_quotes(memory, query, limit)
            assert qs.search_quotes(memory.conn, memory.principal, query, None, limit) == expected, query
    skipped = [len(args[0].own) - len(out) for args, out in calls if out is not None]
    assert skipped and max(skipped) > len(calls[0][0][0].own) // 2  # it did skip, most passages at best


def test_every_exact_score_lies_within_its_bounds(
    memory: AgentMemory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conn, who = memory.conn, memory.principal
    calls = _recording(monkeypatch)
    checked = 0
    for query in [*QUERIES, "When did Ada paint in May?", "Did Talker ask about the kitten?"]:
        calls.clear()
        found = _scored(conn, who, query)
        if not calls:
            continue
        args = calls[0][0]
        assert args[-1] is None and found.complete  # scored whole: every passage's exact score
        low, high = passage_bounds.bounds(args[0], args[1])
        assert np.all(low <= found.scores), query
        assert np.all(found.scores <= high), query
        checked += len(found.scores)
    assert checked > 1000


def _scored(conn: Any, who: Principal, query: str) -> Any:
    """`_score_passages` of `query` with every candidate passage, as `search_quotes` prepares it."""
    groups = qs.query_term_groups(query)
    terms = [f for g in groups for f in g]
    single: dict[str, str] = {}
    overall = qs.term_counts(conn, terms, single, None)
    cols = "e.episode_id, e.name, e.summary, NULL, e.start_ts, e.end_ts, e.importance"
    rows = qs._candidate_rows(
        conn, who, cols, qs.PLAIN_WEIGHTS, terms, overall, None, qs.QUOTE_CANDIDATES, 3, single
    )
    asked = qs._asked(conn, who, query, groups, overall)
    entries = qs.TEXTS.prepared(conn, qs.database_key(conn), [str(r[0]) for r in rows], [r[1] for r in rows])
    notes = notes_for(conn, who, set().union(*(e.event_ids for e in entries)))
    return qs._score_passages(rows, entries, asked, {}, notes)


def test_survivors_keep_every_passage_that_can_make_the_best() -> None:
    rng = np.random.default_rng(3)
    n, keep = 5000, 300
    own = rng.exponential(1.0, n) * (rng.random(n) < 0.7)
    head = np.repeat(rng.random(n // 50), 50)
    boost = np.repeat(1.0 + 0.5 * (rng.random(n // 50) < 0.2), 50)
    importance = np.repeat(0.01 * rng.integers(0, 10, n // 50), 50)
    hit = rng.random(n) * 3.0
    most = np.where(rng.random(n) < 0.1, 2.5, 1.0)
    factors = passage_bounds.Factors(0.3, 0.5, 1.0, 1.5, 0.6)
    passages = passage_bounds.Passages(own, hit, 3.0, head, boost, importance, most)
    # Exact scores anywhere within the bounds: the best `keep` of them must all survive.
    low, high = passage_bounds.bounds(passages, factors)
    for _ in range(5):
        exact = low + (high - low) * rng.random(n)
        best = np.argsort(-exact, kind="stable")[:keep]
        chosen = passage_bounds.survivors(passages, factors, keep)
        assert chosen is not None and len(chosen) < n
        assert set(best.tolist()) <= set(chosen.tolist())
    assert passage_bounds.survivors(passages, factors, None) is None
    # A neighbour's share reaches one and two places on, never past either end of the array.
    alone, zeros, ones = np.array([0.0, 0.0, 1.0, 0.0, 0.0]), np.zeros(5), np.ones(5)
    low, high = passage_bounds.bounds(
        passage_bounds.Passages(alone, alone, 1.0, zeros, ones, zeros, ones), factors
    )
    assert np.all(high[[0, 1, 3, 4]] > 0) and high[2] >= 1.5 and np.all(low[[0, 1, 3, 4]] == 0)


def test_kept_notes_follow_inserts_erasures_and_visibility(memory: AgentMemory, settings: Settings) -> None:  # noqa: F811
    conn, who = memory.conn, memory.principal
    ids = [str(r[0]) for r in conn.execute("SELECT episode_id FROM episodes ORDER BY episode_id")]
    entries = qs.TEXTS.prepared(conn, qs.database_key(conn), ids)
    cited = [e.event_ids for e in entries]

    def expected(p: Principal) -> Any:
        return notes_for(conn, p, set().union(*cited))

    first = note_cache.episode_notes(conn, who, ids, cited)
    assert first == expected(who) and first  # the fixture's notes, as a lookup of every turn finds them
    assert note_cache._KEPT.by_episode  # and kept
    # A note erased by another connection (as the projector does) is not served again.
    gone = conn.execute("SELECT note_id, source_event_id, speaker FROM notes LIMIT 1").fetchone()
    other = open_hot_store(settings)
    with other:
        other.execute("DELETE FROM notes WHERE note_id = ?", [gone[0]])
    other.close()
    after = note_cache.episode_notes(conn, who, ids, cited)
    assert after == expected(who) and after != first
    # A note added through this connection is seen at once.
    conn.execute(
        "INSERT INTO notes (note_id, agent_id, source_event_id, speaker, kind, text, ts, owner)"
        " VALUES ('n-new', 'talker', ?, ?, 'dates', 'next week = 2 June 2023', '2023-05-09T10:00:00Z', NULL)",
        [gone[1], gone[2]],
    )
    conn.commit()
    added = note_cache.episode_notes(conn, who, ids, cited)
    assert added == expected(who) and (gone[1], gone[2]) in added
    # Another reader gets what it may see, not what the first one was given.
    stranger = Principal(agent_id="talker", user="someone-else")
    assert note_cache.episode_notes(conn, stranger, ids, cited) == expected(stranger)
    assert expected(stranger) != expected(who)


def test_a_store_rebuilt_at_the_same_path_meets_none_of_the_old_ones_kept_notes(tmp_path: Path) -> None:
    path = tmp_path / "hot.sqlite"
    alice = Principal(agent_id="bot", user="alice")

    def store_with_note(note_id: str, text: str) -> sqlite3.Connection:
        conn = hotstore.connect(path)
        conn.execute(
            "INSERT INTO notes (note_id, agent_id, source_event_id, speaker, kind, text, ts, owner)"
            " VALUES (?, 'bot', 'turn-1', 'user', 'dates', ?, '2026-01-01T00:00:00Z', 'alice')",
            (note_id, text),
        )
        return conn

    old = store_with_note("n1", "ERASED canary-ALICE-7731")
    assert "canary-ALICE" in str(note_cache.episode_notes(old, alice, ["ep-1"], [frozenset({"turn-1"})]))
    for suffix in ("", "-wal", "-shm"):  # removed and made again, as a rebuild does
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    new = store_with_note("n2", "rebuilt note")
    assert hotstore.database_key(new) != hotstore.database_key(old)
    served = str(note_cache.episode_notes(new, alice, ["ep-1"], [frozenset({"turn-1"})]))
    assert "rebuilt note" in served and "canary-ALICE" not in served
    old.close()
    new.close()
