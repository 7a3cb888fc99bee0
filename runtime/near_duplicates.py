"""The quote search's near-duplicate check: near-identical passages kept once.

Two rankings make it. The dense and fused rankings' results carry word sets
split from their text (`_distinct`, one result at a time); the lexical
ranking checks a whole run of results at once (`distinct_run`, optionally
compiled in runtime/_distinct.c) over the numbers their episodes were
prepared with. Both resolve a kept passage's relative dates (`_anchors`).

The quote search keeps a passage once when an earlier one it keeps has
nearly the same words (Jaccard of their distinct words at least `keep`,
`DUPLICATE_JACCARD`): the same reply quoted by two episodes, a long turn's
repeated part. For the lexical ranking each result's distinct words are a
slice of the numbers its episode was prepared with (runtime.passage_columns),
ascending.

A result is compared only with the kept results that share a word of its
filing prefix (its words read from the highest number down, the question's
own words after all others, as many as near-identity needs): two
near-identical sets always share one. Built one result at a time as a frozen
set and a tuple each, with the question's words filtered out of the whole
set, that was about ten microseconds a result, a tenth of a recall on a long
conversation, while near-identical pairs are rare. Here a result's prefix is
read from the top of its slice only (the few highest numbers, as many as the
prefix and the question's words can take), and its whole set is built only
when a comparison needs it (a kept result of a close enough size shares a
prefix word): the same pairs compared, by the same arithmetic as
`_near_identical`, so the same results kept. A `keep` outside (0, 1] is
refused on both paths.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from datetime import datetime
from types import ModuleType
from typing import Any, TypeVar, cast

import numpy as np
from tiermem.runtime.episode_search import _WORD
from tiermem.runtime.episode_text import TEXTS, Prepared

from tiermem.dates import anchor_relative_dates

T = TypeVar("T")

DUPLICATE_JACCARD = 0.9

_compiled: ModuleType | None  # runtime/_distinct.c
try:
    _compiled = importlib.import_module("tiermem.runtime._distinct")
except ImportError:  # not built: the Python path
    _compiled = None

ENABLED = _compiled is not None  # whether the compiled check is used (tests turn it off)


def filing_prefix(words: np.ndarray, late: frozenset[int], keep: float) -> list[int]:
    """The filing prefix of a set (its distinct numbers, ascending), read from its top only."""
    n = len(words)
    length = min(n, n - int(keep * n) + 2)  # never longer than the set, as the compiled check reads it
    head = words[max(0, n - length - len(late)) :].tolist()
    head.reverse()  # highest first
    if not late or late.isdisjoint(head):
        return head[:length]  # any of the question's words it holds come after these
    prefix = [w for w in head if w not in late][:length]
    if len(prefix) < length:
        # The head held every word but the question's (it is the whole set): those fill the rest.
        prefix += sorted(late.intersection(head), reverse=True)[: length - len(prefix)]
    return prefix


class _Kept:
    """The results kept so far: their sets, each one's words once a comparison needed them, and the
    kept results filed under each word of their prefixes."""

    __slots__ = ("by_word", "keep", "sets", "words")

    def __init__(self, keep: float) -> None:
        self.keep = keep
        self.sets: list[np.ndarray] = []
        self.words: list[frozenset[int] | None] = []
        self.by_word: dict[int, list[int]] = {}

    def meets(self, words: np.ndarray, prefix: list[int]) -> bool:
        """Whether a kept result filed under a word of `prefix` is near-identical to set `words`."""
        n, keep = len(words), self.keep
        mine: frozenset[int] | None = None
        seen: set[int] = set()
        for w in prefix:
            for m in self.by_word.get(w, ()):
                if m in seen:
                    continue
                seen.add(m)
                other = len(self.sets[m])
                if min(n, other) < keep * max(n, other):
                    continue  # sizes too far apart to be near-identical
                if mine is None:
                    mine = frozenset(words.tolist())
                theirs = self.words[m]
                if theirs is None:
                    theirs = self.words[m] = frozenset(self.sets[m].tolist())
                shared = len(mine & theirs)
                if shared >= keep * (n + other - shared):
                    return True
        return False

    def add(self, words: np.ndarray, prefix: list[int]) -> None:
        for w in prefix:
            self.by_word.setdefault(w, []).append(len(self.sets))
        self.sets.append(words)
        self.words.append(None)


def distinct_run(
    ranked: Iterator[tuple[T, np.ndarray]], late: frozenset[int], keep: float, limit: int
) -> list[T]:
    """The first `limit` of `ranked` ((what, its set), best first), each dropped when near-identical
    to one kept (at least one taken, as `_distinct` does). Each set: its distinct
    numbers, ascending, as int64 (the compiled check refuses any other)."""
    if ENABLED and _compiled is not None:
        late_words = np.array(sorted(late), dtype=np.int64)
        return cast(list[T], _compiled.distinct_run(ranked, late_words, float(keep), int(limit)))
    return python_run(ranked, late, keep, limit)


def python_run(
    ranked: Iterator[tuple[T, np.ndarray]], late: frozenset[int], keep: float, limit: int
) -> list[T]:
    """`distinct_run` in Python: the definition, and what runs without the compiled check."""
    if not 0.0 < keep <= 1.0:  # NaN too; refused as the compiled check refuses it
        raise ValueError("keep must be a number in (0, 1]")
    out: list[T] = []
    kept = _Kept(keep)
    for what, words in ranked:
        prefix = filing_prefix(words, late, keep)
        if kept.meets(words, prefix):
            continue
        kept.add(words, prefix)
        out.append(what)
        if len(out) >= limit:
            break
    return out


def _dedup_key(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def _near_identical(a: frozenset[str], b: frozenset[str]) -> bool:
    """Jaccard(a, b) >= DUPLICATE_JACCARD, without building the union (|a | b| = |a| + |b| - |a & b|).

    The shared words are at most the smaller set and the union at least the
    larger, so sets whose sizes differ by more than that share cannot be
    near-identical: most pairs are ruled out by their sizes alone.
    """
    small, large = (len(a), len(b)) if len(a) <= len(b) else (len(b), len(a))
    if small < DUPLICATE_JACCARD * large:
        return False
    shared = len(a & b)
    return shared >= DUPLICATE_JACCARD * (len(a) + len(b) - shared)


def _prefix(key: frozenset[str]) -> tuple[str, ...]:
    """The words of `key` under which `_distinct` files it: its rarest, as many as near-identity needs.

    Two near-identical sets share a word among their first |set| - ceil(DUPLICATE_JACCARD x |set|) + 1
    in any one order of words; the prefix here is one word longer, against rounding. The order is
    fixed for the process (runtime.episode_text), so a passage's prefix is taken once.
    """
    return TEXTS.prefix(key, len(key) - int(DUPLICATE_JACCARD * len(key)) + 2)


def _anchors(
    text: str, at: datetime, passage: tuple[Prepared, int] | None, ts: str | None = None
) -> list[tuple[str, str]]:
    """The relative dates of a passage said `at` (written `ts`), resolved (kept with its prepared episode)."""
    if passage is None:
        return anchor_relative_dates(text, at)
    entry, j = passage
    if ts is not None and ts == entry.said_ts:  # its episode's start: resolved when it was prepared
        return list(entry.said_anchors.get(j, ()))
    found = entry.anchors.get((j, at))
    if found is None:
        found = entry.anchors[(j, at)] = anchor_relative_dates(text, at)
    return list(found)


def _keyed(text: str) -> tuple[frozenset[str], tuple[str, ...]]:
    key = _dedup_key(text)
    return key, _prefix(key)


def _distinct(
    ranked: Any, limit: int, placed: list[tuple[Prepared, int]] | None = None
) -> list[dict[str, Any]]:
    """The first `limit` of (score, item, (word set, its `_prefix`)) best first, near-identical passages
    kept once (only kept sets that share a prefix word are compared); `placed` receives their passages."""
    out: list[dict[str, Any]] = []
    keys: list[frozenset[str]] = []
    by_word: dict[str, list[int]] = {}
    for score, item, (key, prefix) in ranked:
        met = {i for w in prefix for i in by_word.get(w, ())}
        if any(_near_identical(key, keys[i]) for i in met):
            continue
        for w in prefix:
            by_word.setdefault(w, []).append(len(keys))
        keys.append(key)
        at = item.pop("at")
        passage = item.pop("_passage", None)
        if placed is not None and passage is not None:
            placed.append(passage)
        # A turn's stored date notes say what its relative dates meant; older turns are resolved here.
        item["anchors"] = [] if item["notes"] else _anchors(item["text"], at, passage, item["ts"])
        item.pop("boost")
        item.pop("hits", None)
        item["score"] = round(score, 4)
        out.append(item)
        if len(out) >= limit:
            break
    return out
