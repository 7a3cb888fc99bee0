"""The quote search's result order: by score, best first, then (date, turn, part) among equal scores.

A quote search returns passages sorted by (-score, the episode's start,
the turn's id, the part): the key that makes the order of a result
independent of how the candidates were read. Building that key for each of
the few hundred passages that can make the result, and sorting them as
Python tuples, was a quarter of a millisecond of every recall, while
passages that tie on a score are rare (a zero score is the usual one). So
the passages are sorted by score with numpy (stable: in passage order
within a score), and only runs of equal scores are sorted further by the
rest of the key, keeping passage order among equal keys as sorting the
whole keys does (Python's sort is stable too): the same order, element
for element (tests/test_passage_order.py compares the two on ties of every
kind).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def by_score(
    scores: np.ndarray, chosen: np.ndarray, rest: Callable[[int], tuple[Any, ...]]
) -> list[tuple[int, float]]:
    """(passage, score) of the `chosen` passages (ascending), in the order of sorting them by
    (-score, `rest(passage)`)."""
    if np.isnan(scores[chosen]).any():
        # A NaN compares unequal to everything: the whole keys' sort places it by where it stands,
        # which sorting by score alone does not reproduce. Never met in a search; ordered alike.
        return by_whole_key(scores, chosen, rest)
    picked = chosen[np.argsort(-scores[chosen], kind="stable")]
    values = scores[picked]
    out = list(zip(picked.tolist(), values.tolist(), strict=True))
    if len(values) < 2:
        return out
    tied = np.flatnonzero(values[1:] == values[:-1]).tolist()  # k: out[k] and out[k + 1] tie
    t = 0
    while t < len(tied):
        start = end = tied[t]
        while t < len(tied) and tied[t] == end:  # a run of equal scores, out[start : end + 1]
            end += 1
            t += 1
        run = out[start : end + 1]
        run.sort(key=lambda e: rest(e[0]))
        out[start : end + 1] = run
    return out


def by_whole_key(
    scores: np.ndarray, chosen: np.ndarray, rest: Callable[[int], tuple[Any, ...]]
) -> list[tuple[int, float]]:
    """The same order built as the whole keys sorted: what `by_score` must equal (the tests compare
    them), and what it gives for scores with a NaN."""
    keyed = [((-s, *rest(i)), i, s) for i, s in zip(chosen.tolist(), scores[chosen].tolist(), strict=True)]
    keyed.sort(key=lambda e: e[0])
    return [(i, s) for _, i, s in keyed]
