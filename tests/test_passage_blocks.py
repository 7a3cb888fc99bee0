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
bench/RESULTS.md). Each runs with the compiled pass (runtime.passage_compiled)
and with the numpy path forced; and the compiled pass's bounds and exact
scores are numpy's to the last bit, call by call.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers_runtime import append, episode
from test_read_path_long import QUERIES, WORDS, _reference_quotes, memory, scoring  # noqa: F401  (fixtures)
from tiermem.runtime import passage_blocks, passage_bounds, passage_compiled
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
    scoring: str,  # noqa: F811
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
    repeated: AgentMemory,
    monkeypatch: pytest.MonkeyPatch,
    scoring: str,  # noqa: F811
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
    repeated: AgentMemory,
    monkeypatch: pytest.MonkeyPatch,
    scoring: str,  # noqa: F811
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


def _compared(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Every compiled bound and exact score also computed by the numpy path: equal to the last bit."""
    checked = {"bounds": 0, "exact": 0, "named": 0, "when": 0}
    bounds = passage_blocks.Blocks.bounds
    exact = passage_compiled.exact_scores

    def both_bounds(self: passage_blocks.Blocks, *args: Any) -> np.ndarray:
        fast = bounds(self, *args)
        slow = bounds(self, *args[:6])  # without BM25's constants: the numpy path
        assert fast.dtype == slow.dtype and fast.tobytes() == slow.tobytes()
        checked["bounds"] += len(fast)
        return fast

    def both_exact(parts: Any, idx: np.ndarray, near: np.ndarray, counted: np.ndarray, *rest: Any) -> Any:
        fast = exact(parts, idx, near, counted, *rest)
        shares = rest[0]
        own = qs.bm25_rows(counted, parts.turn_words[near], parts.weights, shares.avg_words)
        slow = parts.exact(idx, near, counted, own, qs._neighbours)
        assert fast.dtype == slow.dtype and fast.tobytes() == slow.tobytes()
        checked["exact"] += len(fast)
        checked["named"] += int(parts.named and parts.by_named[idx].any())
        checked["when"] += int(parts.asks_when and parts.says_when[idx].any())
        return fast

    monkeypatch.setattr(passage_blocks.Blocks, "bounds", both_bounds)
    monkeypatch.setattr(passage_compiled, "exact_scores", both_exact)
    return checked


def test_compiled_pass_gives_numpys_bounds_and_scores_to_the_last_bit(
    repeated: AgentMemory,
    memory: AgentMemory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the tied store and the long-turn store (notes, captions, named speakers, "when" questions),
    at several depths: the compiled pass's numbers are the numpy path's, byte for byte."""
    if passage_compiled._blockscore is None:
        pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
    monkeypatch.setattr(passage_compiled, "ENABLED", True)
    monkeypatch.setattr(passage_blocks, "MIN_PASSAGES", 0)
    checked = _compared(monkeypatch)
    rng = random.Random(5)
    queries = [" ".join(rng.sample(VOCABULARY[:90], rng.choice([1, 2, 4]))) for _ in range(8)]
    queries += ["When did Ada paint?", "Talker kitten 2023", "the a of"]
    for depth in (1, 3):
        monkeypatch.setattr(passage_blocks, "DEPTH", depth)
        _searches(repeated, queries)
        for query in QUERIES:
            qs.search_quotes(memory.conn, memory.principal, query, None, 40)
    assert checked["bounds"] > 1000 and checked["exact"] > 1000
    assert checked["named"] and checked["when"]  # the speaker and "when" boosts were compared too


def test_compiled_pass_refuses_passages_whose_neighbours_it_was_not_given() -> None:
    """The compiled pass reads a passage's neighbours from `near`: a call without them is an error,
    not a read past the arrays."""
    if passage_compiled._blockscore is None:
        pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
    from types import SimpleNamespace

    n = 10
    parts = SimpleNamespace(
        k=SimpleNamespace(head=0.3, floor=0.5, speaker=2.5, when=1.5),
        weights=[1.0, 2.0],
        turn_words=np.full(n, 20.0),
        first=np.eye(1, n, 0, dtype=bool)[0],
        last=np.eye(1, n, n - 1, dtype=bool)[0],
        asking=np.zeros(n, dtype=bool),
        whole=np.ones(n, dtype=bool),
        episode=np.zeros(n, dtype=np.int64),
        head_seen=np.zeros((1, 2), dtype=bool),
        heads=np.zeros(1),
        boost=np.ones(1),
        gain=np.zeros(1),
        named=False,
        asks_when=False,
    )
    shares = passage_compiled.Shares(1.0, 0.6, 0.6, 24.0)
    near = passage_blocks.around(np.array([4]), n)
    counted = np.ones((len(near), 2))
    norm = (1.2, 0.75)
    one = np.array([4])
    got = passage_compiled.exact_scores(parts, one, near, counted, shares, norm)  # type: ignore[arg-type]
    assert len(got) == 1 and got[0] > 0
    with pytest.raises(ValueError):
        passage_compiled.exact_scores(parts, one, near[1:], counted[1:], shares, norm)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        passage_compiled.exact_scores(parts, one, near, counted[1:], shares, norm)  # type: ignore[arg-type]


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


@pytest.mark.parametrize(
    ("postings", "starts", "sizes", "offsets", "refused"),
    [
        ([7, 0], [0], [1], [0], "not ascending"),  # a posting past its range would land past the rows
        ([0], [0], [1], [2**63 - 1], "out of range"),  # an offset whose sum with the size overflows
        ([0], [2**63 - 1], [1], [0], "out of range"),  # a range whose end overflows
        ([0], [0], [5], [0], "out of range"),  # more rows than the array has
    ],
)
def test_compiled_counts_refuse_what_would_write_outside_their_rows(
    postings: list[int], starts: list[int], sizes: list[int], offsets: list[int], refused: str
) -> None:
    # The index only ever appends ascending ids; a broken invariant is an error, never a write
    # outside the array (the array here is the first part of a larger one, which must stay zero).
    compiled = passage_compiled._blockscore
    if compiled is None:
        pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
    from array import array

    whole = np.zeros(16)
    out = whole[4:8]
    with pytest.raises(ValueError, match=refused):
        compiled.inside_counts(
            [array("q", postings)],
            [array("q", [5] * len(postings))],
            [(0, 0)],
            np.array(starts, dtype=np.int64),
            np.array(sizes, dtype=np.int64),
            np.array(offsets, dtype=np.int64),
            out,
            1,
        )
    assert not whole[:4].any() and not whole[8:].any()


def test_compiled_counts_hold_their_lists_while_reading_a_word_s_numbers() -> None:
    # Reading a (word, group) pair's numbers can run Python code that empties the caller's lists.
    compiled = passage_compiled._blockscore
    if compiled is None:
        pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
    from array import array

    words: list[Any] = []

    class Emptying:
        def __index__(self) -> int:
            words.clear()
            return 0

    words += [(Emptying(), 0), (0, 0)]
    out = np.zeros((2, 1))
    compiled.inside_counts(
        [array("q", [0, 1])],
        [array("q", [2, 3])],
        words,
        np.array([0], dtype=np.int64),
        np.array([2], dtype=np.int64),
        np.array([0], dtype=np.int64),
        out,
        1,
    )
    assert out.ravel().tolist() == [4.0, 6.0]  # both pairs counted, from the list as it was given


def test_a_search_reading_the_index_while_an_episode_is_indexed_finds_every_passage_in_a_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread's search can read the postings between any two steps of preparing a long episode:
    every passage it finds there must already be numbered in a block. The reader runs here after each
    passage enters the index (the interleaving two threads can give), and its maxima must be those of the
    passages indexed so far."""
    import orjson
    from tiermem.runtime.episode_text import EpisodeTexts, WordIndex

    texts = EpisodeTexts()
    quotes = [
        {"text": f"the kitten {'ran ' * (k % 3)}{'filler ' * 60}{k}", "event_id": f"t{k}", "speaker": "Ada"}
        for k in range(9)
    ]
    raw = orjson.dumps(quotes).decode()
    texts._add(raw)  # one episode before: the second one's passages are not at the index's start
    seen: list[tuple[list[int], list[int]]] = []
    real = WordIndex.add_counted

    def add_counted(self: WordIndex, words: Any) -> int:
        pid = real(self, words)
        if self is texts.words:
            found, top = texts.blocks.maxima("kitten")  # a search's read, between two passages
            seen.append((found.tolist(), top.tolist()))
        return pid

    monkeypatch.setattr(WordIndex, "add_counted", add_counted)
    texts._add(raw)
    assert len(seen) == len(quotes)
    # After the k-th passage: the first episode's three blocks, then the second's blocks so far.
    for k, (found, top) in enumerate(seen):
        blocks = 3 + k // passage_blocks.BLOCK + 1
        assert found == list(range(blocks)) and top == [1] * blocks
    assert len(texts.blocks.block_of) == texts.words.size == 2 * len(quotes)


class _Meanwhile:
    """numpy, except that each call of one of `names` (a view of a buffer, by default) is followed by
    `step()`: what another thread can do right then (the interpreter may switch threads after any call)."""

    def __init__(self, step: Any, names: tuple[str, ...] = ("frombuffer",)) -> None:
        self.step, self.names = step, names

    def __getattr__(self, name: str) -> Any:
        real = getattr(np, name)
        if name not in self.names:
            return real

        def then(*args: Any, **kwargs: Any) -> Any:
            got = real(*args, **kwargs)
            self.step()
            return got

        return then


def test_a_search_holds_no_view_of_the_index_that_another_thread_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The index's arrays grow while other threads search; an array with a view cannot grow (the
    thread indexing an episode would fail half way). The reads of the postings (block maxima, the
    numpy way of counting) run here with an episode indexed after every view they make: nothing
    fails, and they count the texts indexed when they started."""
    import orjson
    from tiermem.runtime import episode_text
    from tiermem.runtime.episode_text import EpisodeTexts

    def raw(seed: int) -> str:
        quotes = [
            {
                "text": f"the kitten {'ran ' * ((k + seed) % 3)}{'filler ' * 60}{k}",
                "event_id": f"t{k}",
                "speaker": "A",
            }
            for k in range(9)
        ]
        return orjson.dumps(quotes).decode()

    texts = EpisodeTexts()
    for seed in range(2):
        texts._add(raw(seed))
    groups = [("kitten",), ("ran",)]
    starts, sizes = np.array([0, 9], dtype=np.int64), np.array([9, 9], dtype=np.int64)
    small, small_sizes = np.array([9], dtype=np.int64), np.array([3], dtype=np.int64)
    monkeypatch.setattr(passage_compiled, "ENABLED", False)
    expected = (
        texts.blocks.maxima("kitten"),
        texts.words.counts_in(starts, groups, sizes, [0, 1]),
        texts.words.counts_in(small, groups, small_sizes, [0]),
    )
    texts.blocks._maxima.clear()
    later = [raw(seed) for seed in range(2, 40)]
    meanwhile = _Meanwhile(lambda: later and texts._add(later.pop()))
    monkeypatch.setattr(passage_blocks, "np", meanwhile)
    monkeypatch.setattr(episode_text, "np", meanwhile)
    found, top = texts.blocks.maxima("kitten")
    assert (found.tolist(), top.tolist()) == (expected[0][0].tolist(), expected[0][1].tolist())
    size = texts.words.size
    assert texts.words.counts_in(starts, groups, sizes, [0, 1]).tolist() == expected[1].tolist()
    assert texts.words.counts_in(small, groups, small_sizes, [0]).tolist() == expected[2].tolist()
    n = texts.words.size  # every text, in one range: counted by the pass over whole postings
    whole = texts.words.counts_in(np.array([0]), groups, np.array([n]), [0])
    assert len(later) < 38 - 3 and texts.words.size > n > size  # episodes were indexed during the reads
    later.clear()
    assert whole.tolist() == texts.words.counts_in(np.array([0]), groups, np.array([n]), [0]).tolist()
    assert len(texts.blocks.block_of) == texts.words.size


def test_blocks_numbered_while_a_search_bounds_its_own_are_none_of_its(
    memory: AgentMemory,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The numpy way of bounding blocks gives each of the search's blocks a row, then reads the forms'
    maxima: another thread may prepare an episode in between, whose blocks hold the question's words.
    They are none of the search's (results unchanged), not an index past the rows."""
    import orjson
    from tiermem.runtime.episode_text import TEXTS

    monkeypatch.setattr(passage_blocks, "MIN_PASSAGES", 0)
    monkeypatch.setattr(passage_compiled, "ENABLED", False)
    expected = [qs.search_quotes(memory.conn, memory.principal, q, None, 5) for q in QUERIES]
    said = " ".join(WORDS) + " " + " ".join(["filler"] * 300)
    later = [
        orjson.dumps([{"text": said, "event_id": f"x{k}", "speaker": "Ada"}]).decode() for k in range(30)
    ]
    monkeypatch.setattr(
        passage_blocks, "np", _Meanwhile(lambda: later and TEXTS._add(later.pop()), ("full",))
    )
    try:
        got = [qs.search_quotes(memory.conn, memory.principal, q, None, 5) for q in QUERIES]
        assert len(later) < 30  # episodes were prepared while searches bounded their blocks
    finally:
        TEXTS.clear()  # the stand-ins are in no store
    assert got == expected


class _WatchedLock:
    """The preparers' lock, telling when another thread has come to it (to wait, or to take it)."""

    def __init__(self, lock: Any) -> None:
        self.lock, self.owner = lock, threading.get_ident()
        self.others = threading.Event()

    def __enter__(self) -> None:
        if threading.get_ident() != self.owner:
            self.others.set()
        self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def test_two_threads_preparing_at_once_number_each_episodes_passages_as_one_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long episode's passages are its `start` onwards in the index. Another thread preparing an
    episode of another store right after this one's first passage entered the index must wait for it:
    here it is started at that moment, and this thread goes on only once it has either come to the lock
    or finished. Every passage's words must then be found under its own number."""
    import orjson
    from helpers_runtime import Rows
    from tiermem.runtime.episode_text import _RUN, EpisodeTexts, WordIndex

    def row(episode_id: str, word: str) -> tuple[str, ...]:
        quotes = [
            {
                "text": f"{word}{k} the {word} {'filler ' * 60}{k}",
                "event_id": f"{episode_id}-{k}",
                "speaker": "Ada",
            }
            for k in range(9)
        ]
        return (episode_id, orjson.dumps(quotes).decode(), episode_id, "", "2024-01-01T00:00:00Z")

    texts = EpisodeTexts()
    watched = _WatchedLock(texts.lock)
    monkeypatch.setattr(texts, "lock", watched)
    other = threading.Thread(target=lambda: texts.prepared(Rows([row("b", "otter")]), "db-b", ["b"]))
    real = WordIndex.add_counted

    def add_counted(self: WordIndex, words: Any) -> int:
        pid = real(self, words)
        if self is texts.words and not other.is_alive() and other.ident is None:
            other.start()  # the other preparer, between this episode's first and second passage
            while not (watched.others.is_set() or not other.is_alive()):
                other.join(0.001)
        return pid

    monkeypatch.setattr(WordIndex, "add_counted", add_counted)
    (first,) = texts.prepared(Rows([row("a", "kitten")]), "db-a", ["a"])
    other.join()
    second = texts.entries[("db-b", "b")]
    assert first.start >= 0 and second.start >= 0
    for entry in (first, second):
        for j, text in enumerate(entry.lowered):
            for word in set(_RUN.findall(text)):
                assert entry.start + j in texts.words.postings[texts.words.word_ids[word]]
