"""The quote search's compiled steps against their numpy ways, call by call, and against hostile input.

runtime._blockscore does several of a quote search's steps in one call each
(runtime.passage_compiled): the first pass's blocks (`first_pass`), the passages
of chosen blocks and those around them (`spread`), the blocks' summed maxima
(`block_sums`), the term counts of chosen passages and of the candidates'
headers (`near_counts`, through runtime.passage_counts). Each must give the
numpy way's numbers to the last bit on adversarial input (ties, infinities,
signed zeros, runs and gaps, short episodes counted from their text, words in
two groups), and refuse input that would make it read or write outside its
arrays, with a ValueError rather than a crash. The search's own results both
ways are pinned in test_read_path_long and test_passage_blocks; the layout of
the passages (runtime.passage_layout) is checked against concatenating each
prepared episode's own arrays here.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import numpy as np
import orjson
import pytest
from test_read_path_long import memory  # noqa: F401  (fixture)
from tiermem.runtime import passage_blocks, passage_compiled, passage_counts, passage_layout
from tiermem.runtime import quote_search as qs
from tiermem.runtime.episode_text import TEXTS, EpisodeTexts, TermMatcher, WordIndex
from tiermem.runtime.memory import AgentMemory


@pytest.fixture
def built() -> Iterator[Any]:
    """The extension, turned on (skipped where it was not built)."""
    if passage_compiled._blockscore is None:
        pytest.skip("the optional extension tiermem.runtime._blockscore is not built")
    before = passage_compiled.ENABLED
    passage_compiled.ENABLED = True
    yield passage_compiled._blockscore
    passage_compiled.ENABLED = before


def _numpy_first_pass(high: np.ndarray, size: np.ndarray, want: int) -> np.ndarray:
    order = np.argsort(-high, kind="stable")
    reach = int(np.searchsorted(np.cumsum(size[order]), want)) + 1
    return np.sort(order[:reach])


def test_first_pass_is_the_stable_sorts_start_on_ties_infinities_and_signed_zeros(built: Any) -> None:
    rng = np.random.default_rng(7)
    values = [0.0, -0.0, 1.5, 2.0, np.inf, -np.inf]
    for t in range(3000):
        n = int(rng.integers(0, 80))
        if t % 3 == 0:
            high = rng.random(n)
        elif t % 3 == 1:
            high = rng.integers(0, 3, n).astype(np.float64)  # many ties
        else:
            high = rng.choice(values, n)
        size = rng.integers(1, 5, n).astype(np.int64)
        want = int(rng.integers(-2, 120))
        got = passage_compiled.first_pass(high, size, want)
        assert got is not None
        expected = _numpy_first_pass(high, size, want)
        assert got.tolist() == expected.tolist(), (high, size, want)
        # The numpy fallback of the search (best_first) gives the same start.
        order = passage_blocks.best_first(high, max(want, 1))
        reach = int(np.searchsorted(np.cumsum(size[order]), want)) + 1
        assert np.sort(order[:reach]).tolist() == expected.tolist()


def test_first_pass_leaves_nans_and_empty_blocks_to_numpy(built: Any) -> None:
    assert passage_compiled.first_pass(np.array([1.0, np.nan]), np.array([1, 1]), 1) is None
    assert passage_compiled.first_pass(np.array([1.0, 2.0]), np.array([1, 0]), 1) is None
    with pytest.raises(ValueError):
        built.first_pass(np.array([1.0, 2.0]), np.array([1], dtype=np.int64), 1)  # sizes of other blocks
    with pytest.raises(ValueError):
        built.first_pass(np.array([1, 2], dtype=np.int32), np.array([1, 1], dtype=np.int64), 1)


def _blocks(rng: np.random.Generator, n_episodes: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Blocks as Blocks numbers them: consecutive episodes of consecutive blocks of 1..BLOCK passages."""
    sizes = rng.integers(1, 12, n_episodes)
    starts, lengths, at = [], [], 0
    for n in sizes.tolist():
        for b in range(0, n, passage_blocks.BLOCK):
            starts.append(at + b)
            lengths.append(min(passage_blocks.BLOCK, n - b))
        at += n
    return np.array(starts, dtype=np.int64), np.array(lengths, dtype=np.int64), at


def test_spread_gives_the_blocks_passages_their_surroundings_and_places(built: Any) -> None:
    rng = np.random.default_rng(3)
    for _ in range(500):
        start, size, n = _blocks(rng, int(rng.integers(1, 15)))
        chosen = np.flatnonzero(rng.random(len(start)) < rng.random())
        idx, near, pos = passage_compiled.spread(start, size, chosen, n)
        blocks = SimpleNamespace(start=start, size=size)
        expected = passage_blocks.Blocks.passages(blocks, chosen)  # type: ignore[arg-type]
        around = passage_blocks.around(expected, n)
        assert idx.tolist() == expected.tolist()
        assert near.tolist() == around.tolist()
        assert pos.tolist() == np.searchsorted(around, expected).tolist()


@pytest.mark.parametrize(
    ("chosen", "n"),
    [
        ([1, 0], 12),  # not ascending
        ([0, 0], 12),  # a block twice
        ([5], 12),  # no such block
        ([-1], 12),
        ([0, 1, 2], 7),  # passages past n
        ([0], -1),
    ],
)
def test_spread_refuses_blocks_outside_the_passages(built: Any, chosen: list[int], n: int) -> None:
    start = np.array([0, 4, 8], dtype=np.int64)
    size = np.array([4, 4, 4], dtype=np.int64)
    with pytest.raises(ValueError):
        built.spread(start, size, np.array(chosen, dtype=np.int64), n)


def test_spread_refuses_blocks_that_share_a_passage(built: Any) -> None:
    # Blocks 0 .. 3 and 3 .. 6: ascending starts, but passage 3 would be spread twice.
    start, size = np.array([0, 3], dtype=np.int64), np.array([4, 4], dtype=np.int64)
    with pytest.raises(ValueError):
        built.spread(start, size, np.array([0, 1], dtype=np.int64), 12)
    got = built.spread(start, np.array([3, 4], dtype=np.int64), np.array([0, 1], dtype=np.int64), 12)
    assert np.frombuffer(got[0], dtype=np.int64).tolist() == list(range(7))  # touching, not sharing: fine


def _numpy_block_sums(
    maxima: list[tuple[np.ndarray, np.ndarray, int]],
    ids: tuple[np.ndarray, ...],
    n: int,
    groups: int,
    blocks: int,
) -> np.ndarray:
    """Blocks.bounds's numpy way: a row per block id, a bincount per form."""
    firsts, counts, rows = ids
    row_of = np.full(blocks, -1, dtype=np.int64)
    for f, c, r in zip(firsts.tolist(), counts.tolist(), rows.tolist(), strict=True):
        if f >= 0:
            row_of[f : f + c] = np.arange(r, r + c)
    out = np.zeros((n, groups))
    for found, top, g in maxima:
        at = row_of[found]
        inside = at >= 0
        out[:, g] += np.bincount(at[inside], weights=top[inside], minlength=n)
    return out


def test_block_sums_are_the_bincounts_of_the_forms_maxima(built: Any) -> None:
    rng = np.random.default_rng(11)
    for _ in range(300):
        e = int(rng.integers(1, 12))
        counts = rng.integers(1, 6, e).astype(np.int64)
        rows = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        n = int(counts.sum())
        # Candidates' block ids: disjoint ranges of a larger index, in any order, some not indexed.
        slots = rng.permutation(e) * 8
        firsts = np.where(rng.random(e) < 0.2, -1, slots).astype(np.int64)
        blocks, groups = 8 * e + 8, int(rng.integers(1, 5))
        maxima = []
        for _ in range(int(rng.integers(0, 7))):
            found = np.sort(rng.choice(blocks, int(rng.integers(0, blocks)), replace=False)).astype(np.int64)
            maxima.append(
                (found, rng.integers(1, 9, len(found)).astype(np.int64), int(rng.integers(0, groups)))
            )
        got = np.zeros((n, groups))
        passage_compiled.block_sums(tuple(maxima), (firsts, counts, rows), got)
        expected = _numpy_block_sums(maxima, (firsts, counts, rows), n, groups, blocks)
        assert got.tobytes() == expected.tobytes()
        # Blocks in any order (the index makes them ascending; anything else is searched afresh).
        shuffled = tuple((f[::-1].copy(), t[::-1].copy(), g) for f, t, g in maxima)
        again = np.zeros((n, groups))
        passage_compiled.block_sums(shuffled, (firsts, counts, rows), again)
        assert again.tobytes() == expected.tobytes()


@pytest.mark.parametrize(
    ("maxima", "rows", "counts", "refused"),
    [
        (((np.array([0]), np.array([1]), 2),), [0], [2], "group"),  # a group past the array
        (((np.array([0]), np.array([1]), -1),), [0], [2], "group"),
        (((np.array([0]), np.array([1])),), [0], [2], "triples"),
        (((np.array([0, 1]), np.array([1]), 0),), [0], [2], "length"),  # tops of other blocks
        ((), [3], [2], "out of range"),  # rows past the array
        ((), [0], [-1], "out of range"),
        ((), [2**62], [2**62], "out of range"),  # a sum that would overflow
    ],
)
def test_block_sums_refuse_what_would_write_outside_their_rows(
    built: Any, maxima: Any, rows: list[int], counts: list[int], refused: str
) -> None:
    whole = np.zeros(16)
    out = whole[4:10].reshape(3, 2)
    with pytest.raises(ValueError, match="groups"):  # a group count whose bytes overflow: refused
        built.block_sums(
            (),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            np.zeros(0, dtype=np.int64),
            out,
            2**61,
        )
    i64 = [tuple(np.asarray(x, dtype=np.int64) if k < 2 else x for k, x in enumerate(m)) for m in maxima]
    ids = [np.array([0], dtype=np.int64), np.array(counts, dtype=np.int64), np.array(rows, dtype=np.int64)]
    with pytest.raises(ValueError, match=refused):
        built.block_sums(tuple(i64), *ids, out, 2)
    assert not whole.any()


def _index(rng: random.Random, words: list[str], n: int) -> tuple[WordIndex, list[str]]:
    index, texts = WordIndex(), []
    for _ in range(n):
        text = " ".join(rng.choices(words, k=rng.randint(0, 12)))
        texts.append(text)
        index.add(text)
    return index, texts


WORDS = ["paint", "painting", "painted", "pa", "a", "kit", "kitten", "kittens", "rain", "bread", "the", "of"]
GROUPS = [
    [("paint",), ("kit",)],
    [("painting", "pa"), ("paint",)],
    [("a", "the", "of")],
    [("rain",), ("zzz",)],
]


CHANGES = (0.1, -1 / 3, 7.7)


def test_near_counts_are_counts_at_with_the_changes_added_in_order(built: Any) -> None:
    rng = random.Random(5)
    nprng = np.random.default_rng(5)
    index, texts = _index(rng, WORDS, 300)
    seen = {"counted": 0, "short": 0, "changed": 0}
    for trial in range(200):
        groups = GROUPS[trial % len(GROUPS)]
        # Candidates: disjoint runs of the index (episodes), in any order, some adjacent there, some
        # short (counted from their text).
        cuts = sorted(rng.sample(range(1, 300), rng.randint(2, 16)))
        runs = [(a, b) for a, b in pairwise(cuts) if b - a <= 20]
        entries, at = [], 0
        for begin, end in rng.sample(runs, len(runs)):
            if rng.random() < 0.3:
                lowered = [" ".join(rng.choices(WORDS, k=rng.randint(0, 9))) for _ in range(end - begin)]
                entries.append(SimpleNamespace(start=-1, lowered=lowered))
            else:
                entries.append(SimpleNamespace(start=begin, lowered=texts[begin:end]))
            at += end - begin
        if not entries:
            continue
        sizes = np.array([len(e.lowered) for e in entries], dtype=np.int64)
        episode = np.repeat(np.arange(len(entries), dtype=np.int64), sizes)
        local = np.arange(at, dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        near = np.flatnonzero(nprng.random(at) < 0.5)
        # Changes that are not sums of powers of two (as captions' and notes' are): added in another
        # order, their sums differ in the last bit somewhere.
        extras = tuple(
            np.where(nprng.random((at, len(groups))) < 0.3, change, 0.0) for change in CHANGES[: trial % 4]
        )
        matcher = TermMatcher(groups)
        counter = passage_counts.NearCounts(index, entries, (episode, local), groups, matcher, extras)  # type: ignore[arg-type]
        got = counter(near)
        passage_compiled.ENABLED = False
        expected = counter(near)
        passage_compiled.ENABLED = True
        assert got.tobytes() == expected.tobytes(), trial
        seen["counted"] += int((got >= 1).sum())
        seen["short"] += sum(e.start < 0 and any(e.lowered) for e in entries)
        seen["changed"] += int((got % 1 != 0).sum())
    assert min(seen.values()) > 50  # counts, short episodes' counts and the changes were all compared


def _hostile_counts(built: Any, **change: Any) -> None:
    args: dict[str, Any] = {
        "lists": ((array("q", [0, 1]), array("q", [1, 1])),),
        "groups": np.array([0], dtype=np.int64),
        "starts": np.array([0], dtype=np.int64),
        "episode": np.zeros(2, dtype=np.int64),
        "local": np.arange(2, dtype=np.int64),
        "near": np.arange(2, dtype=np.int64),
        "extras": (),
        "out": np.zeros((2, 1)),
    }
    args.update(change)
    built.near_counts(*args.values())


@pytest.mark.parametrize(
    "change",
    [
        {"lists": ((array("q", [1, 0]), array("q", [1, 1])),)},  # postings not ascending
        {"lists": ((array("q", [0, 1]), array("q", [1])),)},  # counts of other postings
        {"lists": ((array("q", [0]),),)},  # not a pair
        {"groups": np.array([1], dtype=np.int64)},  # a group past the array
        {"groups": np.array([0, 0], dtype=np.int64)},  # groups of other words
        {"near": np.array([0, 2], dtype=np.int64)},  # a passage past the candidates'
        {"near": np.array([-1, 0], dtype=np.int64)},
        {"episode": np.array([0, 1], dtype=np.int64)},  # a candidate past the starts
        {"local": np.array([0, 2**62], dtype=np.int64)},  # an id near overflow
        {
            "local": np.array([-1, 0], dtype=np.int64),
            "starts": np.array([1], dtype=np.int64),
        },  # before its start
        {"extras": (np.zeros((1, 1)),)},  # changes of other passages
        {"out": np.zeros((2, 1), dtype=np.float32)},
    ],
)
def test_near_counts_refuse_what_would_read_or_write_outside_their_arrays(built: Any, change: Any) -> None:
    with pytest.raises(ValueError):
        _hostile_counts(built, **change)


def test_range_counts_refuse_a_group_count_whose_bytes_overflow(built: Any) -> None:
    one = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError):
        built.inside_counts(
            [array("q", [0])], [array("q", [1])], [(0, 0)], one, one + 1, one, np.zeros(2), 2**61
        )


def test_near_counts_of_good_input_are_counted(built: Any) -> None:
    out = np.zeros((2, 1))
    _hostile_counts(built, out=out)
    assert out.ravel().tolist() == [1.0, 1.0]


def test_header_counts_are_the_header_index_counts(
    memory: AgentMemory,  # noqa: F811
    built: Any,
) -> None:
    qs.search_quotes(memory.conn, memory.principal, "paint kitten", None, 5)  # everything prepared
    entries = list(TEXTS.entries.values())
    assert len(entries) > 3
    for query in ["paint kitten", "When did Ada paint?", "the a of", "zebra", "bread baking in May"]:
        groups = qs.query_term_groups(query)
        for chosen in (entries, entries[::-1], entries[:2] * 2):  # any order, an episode twice
            got = passage_counts.header_counts(TEXTS, chosen, groups)
            assert got.tobytes() == TEXTS.head_counts(chosen, groups).tobytes(), query


def test_layout_is_each_prepared_episodes_own_arrays_joined(memory: AgentMemory) -> None:  # noqa: F811
    qs.search_quotes(memory.conn, memory.principal, "paint kitten", None, 5)
    entries = list(TEXTS.entries.values())
    long = [e for e in entries if e.start >= 0]  # indexed: their bits are kept
    assert long and len(long) < len(entries)
    for chosen in (entries, entries[::-1], long, long[::-1]):
        for asks_when in (False, True):
            laid = passage_layout.layout(chosen, qs._ENDS_ASKING, qs._SAYS_WHEN, asks_when)
            local = np.concatenate([np.arange(e.passages.n) for e in chosen])
            sizes = np.array([e.passages.n for e in chosen])
            asking = np.concatenate([e.found(qs._ENDS_ASKING) for e in chosen])
            whole = np.concatenate([e.whole_turn for e in chosen])
            first = local == 0
            assert laid.local.tolist() == local.tolist()
            assert laid.sizes.tolist() == sizes.tolist()
            assert laid.episode.tolist() == np.repeat(np.arange(len(chosen)), sizes).tolist()
            assert laid.first.tolist() == first.tolist()
            assert laid.last.tolist() == (local == np.repeat(sizes, sizes) - 1).tolist()
            assert laid.asking.tolist() == asking.tolist()
            assert laid.whole.tolist() == whole.tolist()
            assert laid.answers.tolist() == (whole & np.r_[False, asking[:-1]] & ~first).tolist()
            when = np.concatenate([e.found(qs._SAYS_WHEN) for e in chosen])
            assert laid.says_when.tolist() == (when if asks_when else np.zeros_like(when)).tolist()
            assert laid.turn_words.tobytes() == np.concatenate([e.turn_words for e in chosen]).tobytes()
            assert asking.any() and whole.any() and when.any() and not whole.all()
    assert all(passage_layout._key(qs._ENDS_ASKING) in e.flags for e in long)


def test_a_whole_turn_opening_an_episode_does_not_answer_the_episode_before() -> None:
    """A question closing one candidate and a whole turn opening the next: not an answer (the turn
    before is in another episode), with short candidates (joined per search) and long ones (kept bits)."""
    texts = EpisodeTexts()

    def prepared(*said: str) -> Any:
        quotes = [{"text": t, "event_id": f"t{k}", "speaker": "Ada"} for k, t in enumerate(said)]
        return texts._add(orjson.dumps(quotes).decode())

    asks, replies = (
        prepared("I painted today.", "Did you see the kitten?"),
        prepared("Yes, at noon.", "Fine."),
    )
    filler = " ".join(["garden"] * 400)
    long_asks, long_replies = prepared(filler, "Did you see it?"), prepared("Yes, I did.", filler)
    assert asks.start < 0 and long_asks.start >= 0 and long_replies.start >= 0
    for chosen in ([asks, replies], [long_asks, long_replies], [long_asks, replies]):
        laid = passage_layout.layout(chosen, qs._ENDS_ASKING, qs._SAYS_WHEN, False)
        at = int(laid.sizes[0])  # the second candidate's first passage
        assert laid.asking[at - 1] and laid.whole[at] and laid.first[at]
        assert not laid.answers.any()
    # Inside one episode a whole turn after a question does answer it.
    within = prepared("Did you see the kitten?", "Yes, at noon.")
    assert passage_layout.layout([within], qs._ENDS_ASKING, qs._SAYS_WHEN, False).answers.tolist() == [
        False,
        True,
    ]


def test_blocked_counts_add_captions_then_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring every passage subtracts what captions change from the counts, then adds the notes'
    counts: the blocked search must add its two change arrays in that order (a caption's change is
    not a whole number when CAPTION_WEIGHT is not a sum of powers of two)."""
    from tiermem.runtime import passage_parts

    got: list[tuple[np.ndarray, ...]] = []

    class Stop(Exception):
        pass

    class Spy:
        def __init__(self, *args: Any) -> None:
            got.append(args[-1])
            raise Stop

    monkeypatch.setattr(passage_parts, "NearCounts", Spy)
    captions, noted = np.full((3, 1), -0.1), np.full((3, 1), 1 / 3)
    blocks = SimpleNamespace(index=SimpleNamespace(words=None))
    parts = SimpleNamespace(episode=np.zeros(3, dtype=np.int64))
    asked = SimpleNamespace(weights=[1.0], groups=[("paint",)], rx=None)
    for changes, expected in (((captions, noted), (captions, noted)), ((captions, captions), (captions,))):
        with pytest.raises(Stop):
            passage_parts.blocked(blocks, parts, np.ones(3), asked, (None, None, changes, None), 1, None)  # type: ignore[arg-type]
        assert len(got[-1]) == len(expected) and all(a is b for a, b in zip(got[-1], expected, strict=True))
