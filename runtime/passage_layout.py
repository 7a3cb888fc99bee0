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

FIRST, LAST, ASKING, WHOLE, SAYS_WHEN, ANSWERS = 1, 2, 4, 8, 16, 32  # a passage's bits
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


def _key(asking: re.Pattern[str], says: re.Pattern[str]) -> str:
    """Where an entry keeps its bits: among its per-pattern flags, under a key naming both patterns
    that no search pattern uses (a NUL first)."""
    return f"\0layout\0{asking.pattern}\0{says.pattern}"


def packed(entry: Prepared, asking: re.Pattern[str], says: re.Pattern[str], key: str = "") -> np.ndarray:
    """The entry's passages' bits (FIRST, LAST, ASKING, WHOLE, SAYS_WHEN, ANSWERS), made once and kept
    with it (`key`: `_key` of the patterns, when the caller has it)."""
    key = key or _key(asking, says)
    got = entry.flags.get(key)
    if got is None:
        n = entry.passages.n
        bits = np.zeros(n, dtype=np.uint8)
        if n:
            bits[0] |= FIRST
            bits[n - 1] |= LAST
            bits[entry.found(asking)] |= ASKING
            bits[entry.whole_turn] |= WHOLE
            bits[entry.found(says)] |= SAYS_WHEN
            bits[1:][entry.whole_turn[1:] & entry.found(asking)[:-1]] |= ANSWERS
        got = entry.flags[key] = bits
    return got


def _bit(bits: np.ndarray, bit: int) -> np.ndarray:
    return (bits & bit).astype(bool)


def layout(
    entries: Sequence[Prepared], asking: re.Pattern[str], says: re.Pattern[str], asks_when: bool
) -> Layout:
    """The candidates' passages laid out for one search (`asks_when`: whether the question asks when).

    The same arrays as concatenating each entry's own (`Prepared.found`, `whole_turn`, `turn_words`)
    and numbering its passages."""
    key = _key(asking, says)
    kept = [e.flags.get(key) for e in entries]  # each made at its episode's first search
    missing = any(b is None for b in kept)
    bits = [packed(e, asking, says, key) for e in entries] if missing else cast("list[np.ndarray]", kept)
    sizes = np.fromiter(map(len, bits), dtype=np.int64, count=len(bits))
    joined = np.concatenate(bits) if bits else np.zeros(0, dtype=np.uint8)
    total = len(joined)
    episode = np.repeat(np.arange(len(entries), dtype=np.int64), sizes)
    firsts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    local = np.arange(total, dtype=np.int64) - np.repeat(firsts, sizes)
    says_when = _bit(joined, SAYS_WHEN) if asks_when and total else np.zeros(total, dtype=bool)
    return Layout(
        sizes=sizes,
        firsts=firsts,
        episode=episode,
        local=local,
        first=_bit(joined, FIRST),
        last=_bit(joined, LAST),
        asking=_bit(joined, ASKING),
        whole=_bit(joined, WHOLE),
        says_when=says_when,
        answers=_bit(joined, ANSWERS),
        turn_words=np.concatenate([e.turn_words for e in entries]),
    )
