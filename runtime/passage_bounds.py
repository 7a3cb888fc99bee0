"""Which candidate passages can still make a quote search's result: a provable bound, rankings exact.

A quote search scores every passage of its candidate episodes (runtime.quote_search):

    score = (own + beside + HEAD x header) x (FLOOR + coverage) x boost
            [x SPEAKER if its speaker is named] [x WHEN if it says when] + importance

where `own` is the passage's BM25, `beside` a share of its better neighbour's
and `coverage` the share of the question's weight that it, its neighbours or
its header contain. On a long conversation (two hundred candidate episodes of
ten 1,000-token replies: 22,000 passages) the neighbour, coverage and boost
passes over every passage, and then picking the best ones, were most of a
search; yet only the few hundred best can be shown.

So, once `own` is known for every passage (it needs the term counts anyway),
each passage gets two cheap bounds on its exact score:

* a lower bound: no neighbour's share, coverage from its own words only, no
  speaker or "when" boost (each of these only adds or multiplies by >= 1);
* an upper bound: the larger neighbour's whole `own` as its share, full
  coverage, every boost the question can give it.

The `keep`-th best lower bound is at most the `keep`-th best exact score, so
a passage whose upper bound is below it cannot be among the best `keep`: it
is skipped, and everything at or above the `keep`-th best exact score is
scored exactly, by the same operations in the same order, so the result (and
its order, ties included) is that of scoring every passage. Both bounds are
widened by a relative 1e-9 against rounding. Below `MIN_PASSAGES` nothing is
skipped (LoCoMo-sized searches are scored whole).
"""

from __future__ import annotations

import numpy as np

MIN_PASSAGES = 2_000  # fewer candidate passages than this: score them all
SLACK = 1e-9  # relative widening of both bounds, against rounding


def bounds(
    own: np.ndarray,
    hit_weight: np.ndarray,
    total_weight: float,
    head: np.ndarray,
    boost: np.ndarray,
    importance: np.ndarray,
    most_boost: np.ndarray,
    factors: tuple[float, float, float, float, float],
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) bound of every passage's exact score.

    Per passage: `own` BM25, `hit_weight` the question's weight its own words
    hold, `head` its episode header's BM25, `boost` its episode's time boost,
    `importance` its episode's additive importance, `most_boost` the largest
    product of the speaker and "when" boosts it can get. `factors`: (the
    header's share, the coverage floor, the largest neighbour share, the
    coverage floor plus full coverage, the share of a passage two places away).
    """
    head_share, floor, neighbour, full, far_share = factors
    base = own + head_share * head
    low = base * (floor + hit_weight / total_weight) * boost + importance
    # own >= 0: a wrapped value only widens these
    nearby = neighbour * np.maximum(np.roll(own, 1), np.roll(own, -1))
    further = far_share * np.maximum(np.roll(own, 2), np.roll(own, -2))
    high = (base + np.maximum(nearby, further)) * full * boost * most_boost + importance
    return low - np.abs(low) * SLACK, high + np.abs(high) * SLACK


def survivors(
    own: np.ndarray,
    hit_weight: np.ndarray,
    total_weight: float,
    head: np.ndarray,
    boost: np.ndarray,
    importance: np.ndarray,
    most_boost: np.ndarray,
    factors: tuple[float, float, float, float, float],
    keep: int | None,
) -> np.ndarray | None:
    """Indices (ascending) of the passages that can be among the best `keep` (`bounds`); None: all."""
    n = len(own)
    if keep is None or n < MIN_PASSAGES or n <= keep:
        return None
    low, high = bounds(own, hit_weight, total_weight, head, boost, importance, most_boost, factors)
    theta = np.partition(low, n - keep)[n - keep]
    chosen = np.flatnonzero(high >= theta)
    return None if len(chosen) == n else chosen
