"""Blocks of passages bounded first (runtime.passage_blocks): rankings exactly those of scoring every passage.

A quote search over many long turns bounds blocks of a few consecutive
passages before counting any, and counts and scores only the blocks that can
hold one of the best. These tests pin that its results, order and ties
included, are those of scoring every passage: on the long-turn store of
test_read_path_long (notes, captions, questions, the same turn said twice) and
on a generated store of many episodes whose turns repeat word for word (equal
scores at every depth, so ties sit at the threshold, and near-duplicates send
the search deeper than its first depth). Also that blocks do skip passages
there, and that every passage a block's bound covers scores within it (how
many are skipped on a long conversation: bench/bound_ceiling.py and
bench/RESULTS.md).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_runtime import append, episode
from test_read_path_long import QUERIES, WORDS, _reference_quotes, memory  # noqa: F401  (the fixture)
from tiermem.runtime import passage_blocks, passage_bounds
from tiermem.runtime import quote_search as qs
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project

from tiermem.settings import Settings


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every blocked search: (its candidate passages, the passages it scored exactly)."""
    calls: list[tuple[int, int]] = []
    real = passage_blocks.Blocks.scored

    def scored(self: passage_blocks.Blocks, *args: Any) -> Any:
        out = real(self, *args)
        calls.append((self.n_passages, len(out[0])))
        return out

    monkeypatch.setattr(passage_blocks.Blocks, "scored", scored)
    return calls


def test_blocked_search_ranks_exactly_as_scoring_every_passage_from_its_text(
    memory: AgentMemory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(passage_blocks, "MIN_PASSAGES", 0)  # block every search, however small
    calls = _recording(monkeypatch)
    for query in QUERIES:
        for limit in (1, 5, 40):
            expected = _reference_quotes(memory, query, limit)
            assert qs.search_quotes(memory.conn, memory.principal, query, None, limit) == expected, query
    assert calls and min(scored / total for total, scored in calls) < 1.0  # something was skipped


@pytest.fixture
def repeated(settings: Settings) -> Iterator[AgentMemory]:
    """120 episodes of eight long turns; each episode's turns are one of 30 sets, said again word for
    word in three other episodes of the same day and importance (equal scores everywhere)."""
    rng = random.Random(3)
    weights = [1.0 / (i + 1) for i in range(len(VOCABULARY))]  # a few common words, many rare ones
    sets = [
        [" ".join(rng.choices(VOCABULARY, weights, k=rng.choice([40, 300]))) + "." for _ in range(8)]
        for _ in range(30)
    ]
    events = [
        episode(
            "talker",
            f"talk {i}",
            "a long talk",
            key_quotes=[
                {"text": t, "event_id": f"t{i}.{j}", "speaker": ["Ada", "Talker"][j % 2]}
                for j, t in enumerate(sets[i % 30])
            ],
            participants=["ada"],
            start_ts=f"2023-05-{1 + i % 30:02d}T10:00:00Z",
            end_ts=f"2023-05-{1 + i % 30:02d}T11:00:00Z",
            importance=1 + i % 30 % 5,
            source_event_ids=[f"src-{i}"],
        )
        for i in range(120)
    ]
    append(settings, *events)
    project(settings)
    with open_memory(settings, "talker", user="ada") as m:
        yield m


VOCABULARY = [*WORDS, *(f"w{a}{b}x" for a in "bdfgklmnprst" for b in "aeiou")]


def _searches(m: AgentMemory, queries: list[str]) -> list[Any]:
    out: list[Any] = []
    for query in queries:
        for limit in (1, 3, 10, 40, 60):
            out.append(qs.search_quotes(m.conn, m.principal, query, None, limit))
    return out


def test_blocks_rank_tied_passages_as_scoring_every_passage(
    repeated: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(9)
    queries = [" ".join(rng.sample(VOCABULARY[:90], rng.choice([1, 2, 4]))) for _ in range(12)]
    queries += ["When did Ada paint?", "Talker kitten 2023", "the a of"]
    # Every passage scored (neither bound); then each bound alone.
    monkeypatch.setattr(passage_blocks, "MIN_PASSAGES", 10**9)
    monkeypatch.setattr(passage_bounds, "MIN_PASSAGES", 10**9)
    whole = _searches(repeated, queries)
    monkeypatch.setattr(passage_bounds, "MIN_PASSAGES", 0)
    assert _searches(repeated, queries) == whole
    monkeypatch.setattr(passage_blocks, "MIN_PASSAGES", 0)
    for depth in (1, 2, 4):  # a first pass of a few blocks, and of many
        monkeypatch.setattr(passage_blocks, "DEPTH", depth)
        calls = _recording(monkeypatch)
        assert _searches(repeated, queries) == whole, depth
        assert calls and min(scored / total for total, scored in calls) < 0.5  # some skip most passages
    ties = [r["score"] for found in whole for r in found]
    assert len(ties) - len(set(ties)) > 100  # equal scores were ranked (and ordered) alike


def test_every_passage_scores_within_its_blocks_bound(
    repeated: AgentMemory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound of a block is at least the exact score of each of its passages (what a looser count,
    length, neighbour, coverage or boost term would break)."""
    monkeypatch.setattr(passage_blocks, "MIN_PASSAGES", 0)
    seen: list[tuple[np.ndarray, passage_blocks.Blocks, Any]] = []
    real = passage_blocks.Blocks.scored

    def scored(self: passage_blocks.Blocks, high: np.ndarray, keep: int, count: Any, exact: Any) -> Any:
        seen.append((high, self, self._exact(np.arange(len(high)), count, exact)))  # every block, exactly
        return real(self, high, keep, count, exact)

    monkeypatch.setattr(passage_blocks.Blocks, "scored", scored)
    checked = 0
    for query in [
        "paint quilt",
        "When did Ada paint?",
        "kitten",
        "Talker guitar lesson",
        "rain miso 2023",
        "wbax",
    ]:
        seen.clear()
        qs.search_quotes(repeated.conn, repeated.principal, query, None, 40)
        for high, blocks, (idx, scores, _) in seen:
            assert len(idx) == blocks.n_passages
            block = np.searchsorted(blocks.start, idx, side="right") - 1
            assert np.all(scores <= high[block]), query
            checked += len(idx)
    assert checked > 5000


def test_block_maxima_follow_the_erasure_mark(tmp_path: Path) -> None:
    """The blocks and their kept maxima live with the prepared episodes: the first read after an erasure
    starts them again (nothing kept from before it), aligned with the passage index."""
    from tiermem.runtime.episode_text import TEXTS

    from tiermem import Memory

    filler = " ".join(f"filler{k} about the garden and the pot" for k in range(120))  # long: indexed
    mem = Memory.open(tmp_path / "data", env={}, compressor={"min_unprocessed": 1, "keep_recent": 0})
    try:
        bot = mem.agent("a1")
        said = [
            bot.record_turn("alice", f"I hid key {i}. {filler}", f"Noted {i}.", ts=f"2024-03-01T1{i}:00:00Z")
            for i in range(4)
        ]
        mem.compress()
        mem.refresh()
        bot.call_tool("recall_memory", {"query": "garden pot"}, user="alice")
        before = TEXTS.blocks
        before.maxima("garden")
        assert before._maxima and len(before.block_of) == TEXTS.words.size > 0
        mem.forget(event=said[1].event_id, reason="test")
        mem.refresh()
        bot.call_tool("recall_memory", {"query": "filler7"}, user="alice")
        assert TEXTS.blocks is not before and "garden" not in TEXTS.blocks._maxima
        assert len(TEXTS.blocks.block_of) == TEXTS.words.size
    finally:
        mem.close()


def test_no_blocks_for_an_episode_numbered_in_a_dropped_index() -> None:
    """An episode prepared before everything was dropped (another thread's erasure) carries block ids of
    the old numbering: the search then counts every passage rather than read another index's blocks."""
    from types import SimpleNamespace

    from tiermem.runtime.episode_text import WordIndex

    old, new = passage_blocks.BlockIndex(WordIndex()), passage_blocks.BlockIndex(WordIndex())
    sizes = np.array([1500, 1500], dtype=np.int64)
    firsts = np.array([0, 1500], dtype=np.int64)

    def entry(index: passage_blocks.BlockIndex) -> Any:
        return SimpleNamespace(block=index.add(1500), block_by=index, event_ids=frozenset())

    current = [entry(new), entry(new)]
    assert passage_blocks.block_plan(new, current, sizes, firsts, set(), 100) is not None
    assert passage_blocks.block_plan(new, [current[0], entry(old)], sizes, firsts, set(), 100) is None
