"""The near-duplicate check's word sets and filing prefixes as first written, one result at a time:
the reference the tests hold the search's own check (runtime.near_duplicates) to."""

from __future__ import annotations

from itertools import islice

import numpy as np


def dedup_set(
    ids: np.ndarray, at: np.ndarray, j: int, keep: float, late: frozenset[int] = frozenset()
) -> tuple[frozenset[int], tuple[int, ...]]:
    """Passage j's word set and its prefix for the near-duplicate check: its first `len - int(keep x len)
    + 2` words in one order, last met first (the order of `WordNumbers`) but the words `late` after all
    others (a search's own words: any one order for all the sets a check compares will do)."""
    order = ids[int(at[j]) : int(at[j + 1])][::-1].tolist()
    length = len(order) - int(keep * len(order)) + 2
    key = frozenset(order)
    if late and not late.isdisjoint(key):
        prefix = list(islice((w for w in order if w not in late), length))
        if len(prefix) < length:  # `order` descends: the late words it holds, in its order
            prefix += sorted(late & key, reverse=True)[: length - len(prefix)]
        return key, tuple(prefix)
    return key, tuple(order[:length])
