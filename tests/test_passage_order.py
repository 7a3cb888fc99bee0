"""The quote search's result order sorted by score first, ties by the rest of the key: the same order
as sorting every passage's whole key (runtime.passage_order)."""

from __future__ import annotations

import random
from itertools import pairwise

import numpy as np
from tiermem.runtime.passage_order import by_score, by_whole_key


def _case(rng: random.Random, n: int) -> tuple[np.ndarray, np.ndarray, dict[int, tuple[str, str, int]]]:
    # Few distinct scores (ties of every length, zeros of both signs among them) and few distinct
    # rest keys (passages equal on the whole key too, which keep passage order).
    pool = [0.0, -0.0, 1.5, 2.25, 2.25 + 1e-12, 3.0, rng.random()]
    scores = np.array([rng.choice(pool) for _ in range(n)], dtype=np.float64)
    chosen = np.array(sorted(rng.sample(range(n), rng.randint(0, n))), dtype=np.int64)
    rest = {
        i: (rng.choice(["2026-03-01", "2026-03-02"]), rng.choice(["t1", "t2", "t3"]), rng.randint(0, 2))
        for i in range(n)
    }
    return scores, chosen, rest


def test_the_order_is_that_of_the_whole_keys() -> None:
    rng = random.Random(5)
    runs = 0
    for n in [0, 1, 2, 3, 5, 40, 300]:
        for _ in range(60):
            scores, chosen, rest = _case(rng, n)
            got = by_score(scores, chosen, rest.__getitem__)
            assert got == by_whole_key(scores, chosen, rest.__getitem__)
            runs += any(a[1] == b[1] for a, b in pairwise(got))
    assert runs > 100  # most cases had ties to order


def test_no_tie_reads_no_key() -> None:
    scores = np.array([0.5, 2.0, 1.0, 3.0])
    read: list[int] = []

    def rest(i: int) -> tuple[int]:
        read.append(i)
        return (i,)

    assert by_score(scores, np.arange(4), rest) == [(3, 3.0), (1, 2.0), (2, 1.0), (0, 0.5)]
    assert read == []


def test_a_nan_score_is_ordered_as_the_whole_keys_order_it() -> None:
    """A NaN compares unequal to every score: the whole keys' sort places it where it stands, and
    `by_score` gives that order too (it sorts the whole keys when a NaN is among the scores)."""
    rng = random.Random(11)
    nan = float("nan")
    for n in [1, 2, 3, 5, 40]:
        for _ in range(40):
            scores, chosen, rest = _case(rng, n)
            for i in rng.sample(range(n), rng.randint(1, n)):
                scores[i] = nan
            got = by_score(scores, chosen, rest.__getitem__)
            want = by_whole_key(scores, chosen, rest.__getitem__)
            # Compared by position and passage: NaN is not equal to itself.
            assert [g[0] for g in got] == [w[0] for w in want]
    fixed = np.array([1.0, nan, 1.0, 0.5, nan])
    got = by_score(fixed, np.arange(5), lambda i: ("d", "t", i % 2))
    assert [g[0] for g in got] == [
        w[0] for w in by_whole_key(fixed, np.arange(5), lambda i: ("d", "t", i % 2))
    ]
