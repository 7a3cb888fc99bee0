"""Where a quote search's candidate passages sit, and what each one is, read in one pass per search.

runtime.quote_search scores the passages of its candidate episodes as one
array per property, in candidate order: each passage's candidate and place
there, whether it opens or closes its episode, ends with a question, is a
whole turn or says when, and its turn's length. On a long conversation
(two hundred candidates, 23,000 passages) gathering them was a dozen
concatenations and comparisons per search, each a pass over every passage
and a Python step per candidate. What does not depend on the question is
the same for every search, so each prepared episode keeps its passages'
yes/no properties as one array of bits (`packed`, made at the episode's first
search), and a search joins the candidates' bits once and takes each property
out with one operation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np

if TYPE_CHECKING:
    from tiermem.runtime.episode_text import Prepared

FIRST, LAST, ASKING, WHOLE, ANSWERS = 1, 2, 4, 8, 16  # a passage's bits
# ANSWERS: a whole turn right after a question in its episode (it may take that turn's match whole)


class Layout(NamedTuple):
    """One search's candidate passages, in candidate order (one entry per passage unless said)."""

    sizes: np.ndarray  # per candidate: its passages
    firsts: np.ndarray  # per candidate: its first passage
    episode: np.ndarray  # the passage's candidate
    local: np.ndarray  # its place among its episode's passages
    first: np.ndarray  # it opens its episode's passages
    last: np.ndarray  # ...closes them
    asking: np.ndarray  # it ends with a question
    whole: np.ndarray  # it is a whole turn
    says_when: np.ndarray  # it says when (all False unless the question asks when: a search's own copy)
    answers: np.ndarray  # it is a whole turn after a question (not across episodes)
    turn_words: np.ndarray  # its turn's words (its BM25 length: a search's own copy)


def _key(asking: re.Pattern[str]) -> str:
    """Where an entry keeps its bits: among its per-pattern flags, under a key naming the pattern that
    no search pattern uses (a NUL first)."""
    return f"\0layout\0{asking.pattern}"


def packed(entry: Prepared, asking: re.Pattern[str], key: str = "") -> np.ndarray:
    """The entry's passages' bits (FIRST, LAST, ASKING, WHOLE, ANSWERS), made once and kept with it
    (`key`: `_key` of the pattern, when the caller has it). Nothing is matched that the search did
    not match before: `asking` is found in every candidate at its first search."""
    key = key or _key(asking)
    got = entry.flags.get(key)
    if got is None:
        n = entry.passages.n
        bits = np.zeros(n, dtype=np.uint8)
        if n:
            ends_asking = entry.found(asking)
            bits[0] |= FIRST
            bits[n - 1] |= LAST
            bits[ends_asking] |= ASKING
            bits[entry.whole_turn] |= WHOLE
            bits[1:][entry.whole_turn[1:] & ends_asking[:-1]] |= ANSWERS
        got = entry.flags[key] = bits
    return got


def _bit(bits: np.ndarray, bit: int) -> np.ndarray:
    return (bits & bit).astype(bool)


def layout(
    entries: Sequence[Prepared], asking: re.Pattern[str], says: re.Pattern[str], asks_when: bool
) -> Layout:
    """The candidates' passages laid out for one search (`asks_when`: whether the question asks when).

    The same arrays as concatenating each entry's own (`Prepared.found`, `whole_turn`, `turn_words`)
    and numbering its passages. The bits are kept for the indexed (long) episodes only, read again
    and again on a long conversation; a search with a short candidate (a large archive's, each
    met a few times) concatenates as it always did (bits made per short episode cost more than
    they save)."""
    sizes = np.fromiter((e.passages.n for e in entries), dtype=np.int64, count=len(entries))
    total = int(sizes.sum())
    episode = np.repeat(np.arange(len(entries), dtype=np.int64), sizes)
    firsts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    local = np.arange(total, dtype=np.int64) - np.repeat(firsts, sizes)
    says_when = np.zeros(total, dtype=bool)
    if asks_when and total:
        says_when = np.concatenate([e.found(says) for e in entries])
    turn_words = np.concatenate([e.turn_words for e in entries]) if entries else np.zeros(0)
    if all(e.start >= 0 for e in entries):
        key = _key(asking)
        kept = [e.flags.get(key) for e in entries]  # each made at its episode's first search
        missing = any(b is None for b in kept)
        bits = [packed(e, asking, key) for e in entries] if missing else cast("list[np.ndarray]", kept)
        joined = np.concatenate(bits) if bits else np.zeros(0, dtype=np.uint8)
        first, last, whole = _bit(joined, FIRST), _bit(joined, LAST), _bit(joined, WHOLE)
        ends_asking, answers = _bit(joined, ASKING), _bit(joined, ANSWERS)
    else:
        first, last = local == 0, local == np.repeat(sizes, sizes) - 1
        ends_asking = (
            np.concatenate([e.found(asking) for e in entries]) if entries else np.zeros(0, dtype=bool)
        )
        whole = np.concatenate([e.whole_turn for e in entries]) if entries else np.zeros(0, dtype=bool)
        answers = whole & np.r_[False, ends_asking[:-1]] & ~first if total else np.zeros(0, dtype=bool)
    return Layout(
        sizes=sizes,
        firsts=firsts,
        episode=episode,
        local=local,
        first=first,
        last=last,
        asking=ends_asking,
        whole=whole,
        says_when=says_when,
        answers=answers,
        turn_words=turn_words,
    )
