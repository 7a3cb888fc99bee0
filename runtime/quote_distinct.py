"""The quote search's results kept once each: near-identical passages dropped, one at a time.

`_distinct` takes ranked results with their word sets (the dense and fused
rankings' results, whose sets are split from their text) and keeps the first
`limit`, a passage near-identical (`DUPLICATE_JACCARD`) to one kept dropped;
the lexical ranking makes the same check for a run of results at once
(runtime.passage_distinct), over the numbers its episodes were prepared with.
Both resolve a kept passage's relative dates (`_anchors`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tiermem.runtime.episode_search import _WORD
from tiermem.runtime.episode_text import TEXTS, Prepared

from tiermem.dates import anchor_relative_dates

DUPLICATE_JACCARD = 0.9


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
