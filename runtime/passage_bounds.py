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

from typing import NamedTuple

import numpy as np

MIN_PASSAGES = 2_000  # fewer candidate passages than this: score them all
SLACK = 1e-9  # relative widening of both bounds, against rounding


class Factors(NamedTuple):
    """The search's constants the bounds need."""

    head_share: float  # the header's share
    floor: float  # the coverage floor
    neighbour: float  # the largest share of a neighbour's match
    full: float  # the coverage floor plus full coverage
    far_share: float  # the share of a passage two places away


class Passages(NamedTuple):
    """Per candidate passage, what its exact score is made of (one array entry per passage, in order)."""

    own: np.ndarray  # its own BM25 (>= 0)
    hit_weight: np.ndarray  # the question's weight its own words hold
    total_weight: float  # the question's whole weight
    head: np.ndarray  # its episode header's BM25
    boost: np.ndarray  # its episode's time boost
    importance: np.ndarray  # its episode's additive importance
    most_boost: np.ndarray  # the largest product of the speaker and "when" boosts it can get


def bounds(p: Passages, f: Factors) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) bound of every passage's exact score (computed in place, a few arrays in all)."""
    base = p.head * f.head_share
    base += p.own
    low = p.hit_weight / p.total_weight
    low += f.floor
    low *= base
    low *= p.boost
    low += p.importance
    # The best share a passage can get from a passage one or two places away, whichever episode that
    # is in (only widens the bound); nothing past either end of the array (the first passage has
    # none before it, the last none after).
    n = len(p.own)
    padded = np.zeros(n + 4)
    padded[2 : n + 2] = p.own
    high = np.maximum(padded[1 : n + 1], padded[3 : n + 3])
    high *= f.neighbour
    further = np.maximum(padded[:n], padded[4:])
    further *= f.far_share
    np.maximum(high, further, out=high)
    high += base
    high *= f.full
    high *= p.boost
    high *= p.most_boost
    high += p.importance
    # Widened against rounding: low - |low| x SLACK, high + |high| x SLACK.
    low -= np.abs(low) * SLACK
    high += np.abs(high) * SLACK
    return low, high


def survivors(p: Passages, f: Factors, keep: int | None) -> np.ndarray | None:
    """Indices (ascending) of the passages that can be among the best `keep` (`bounds`); None: all."""
    n = len(p.own)
    if keep is None or n < MIN_PASSAGES or n <= keep:
        return None
    low, high = bounds(p, f)
    theta = np.partition(low, n - keep)[n - keep]
    chosen = np.flatnonzero(high >= theta)
    return None if len(chosen) == n else chosen
