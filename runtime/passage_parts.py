"""What a quote search's exact passage score is made of, besides each passage's own words.

runtime.quote_search scores a passage from its term counts and, per search,
from what surrounds it: the words of its attachments' descriptions (at their
own weight), the notes derived from its turn (absolute dates: their words
count with the turn and lengthen it), its speaker when the question names
them, its neighbours and its episode's header and boosts. This module holds
those per-search parts (`Parts`) and the exact score of any set of passages
from them (`Parts.exact`), so that a search can score every passage, the ones
a passage bound keeps (runtime.passage_bounds) or only those of the blocks
that can matter (runtime.passage_blocks, `blocked`), always by the same operations
(compiled, when built: runtime.passage_compiled).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tiermem.runtime import passage_compiled as compiled
from tiermem.runtime.episode_scores import K1, B, _term_counts, bm25_rows
from tiermem.runtime.episode_text import Prepared
from tiermem.runtime.notes import Note, note_words
from tiermem.runtime.passage_blocks import Blocks, Factors
from tiermem.runtime.passage_compiled import Shares
from tiermem.runtime.passage_counts import NearCounts


def weigh_captions(
    entries: Sequence[Prepared], firsts: np.ndarray, asked: Any, counts: np.ndarray, weight: float
) -> None:
    """Counts of what the passages' attachment descriptions add, scaled down to `weight`."""
    n_groups = len(asked.groups)
    for k, e in enumerate(entries):
        for j, described in e.described:
            extra = _term_counts(described, asked.rx, n_groups, asked.forms)
            if any(extra):
                counts[int(firsts[k]) + j] -= (1.0 - weight) * np.array(extra, dtype=np.float64)


def add_notes(
    entries: Sequence[Prepared],
    firsts: np.ndarray,
    notes: dict[tuple[str, str], list[Note]],
    asked: Any,
    counts: np.ndarray,
    lengths: tuple[np.ndarray, np.ndarray],
    says: re.Pattern[str],
) -> None:
    """Notes derived from a turn (absolute dates) are scored as part of it: their words add counts
    (and length, to every passage of the turn: `lengths` = (each passage's turn words, whether it
    says when), a passage is weighed by its whole turn's words)."""
    noted = {event_id for event_id, _ in notes}
    if not noted:
        return
    turn_words, says_when = lengths
    for k, e in enumerate(entries):
        if e.event_ids.isdisjoint(noted):
            continue
        p = e.passages
        for j in range(len(p)):
            extra = note_words(notes.get((p.event_id(j), p.speaker(j)), []), p.text(j)).lower()
            if extra:
                i = int(firsts[k]) + j
                counts[i] += _term_counts(extra, asked.rx, len(asked.groups))
                turn_words[int(firsts[k]) + np.flatnonzero(e.quote_of == e.quote_of[j])] += extra.count(" ")
                says_when[i] |= says.search(extra) is not None


def named_passages(entries: Sequence[Prepared], firsts: np.ndarray, named: set[str], n: int) -> np.ndarray:
    """Which of the `n` candidate passages a speaker the question names said."""
    out = np.zeros(n, dtype=bool)
    for k, e in enumerate(entries):
        for speaker, at in e.speakers.items() if named else ():
            if speaker in named:
                out[firsts[k] + at] = True
    return out


class Weights:
    """The search's constants an exact score reads (quote_search's, read when the search starts)."""

    def __init__(self, head: float, floor: float, speaker: float, when: float) -> None:
        self.head, self.floor, self.speaker, self.when = head, floor, speaker, when


@dataclass
class Parts:
    """Per search, per candidate passage (in order) or per candidate: what its exact score is made of
    but its own term counts."""

    weights: list[float]  # the question's term groups' weights
    named: bool  # whether the question names a speaker
    asks_when: bool
    episode: np.ndarray  # each passage's candidate
    first: np.ndarray  # whether it opens its episode's passages
    last: np.ndarray  # ...closes them
    turn_words: np.ndarray  # its BM25 length
    says_when: np.ndarray
    asking: np.ndarray  # it ends with a question
    whole: np.ndarray  # it is a whole turn
    by_named: np.ndarray  # a named speaker said it
    heads: np.ndarray  # per candidate: its header's BM25
    head_seen: np.ndarray  # per candidate: the groups its header holds
    boost: np.ndarray  # per candidate: its time boost
    gain: np.ndarray  # per candidate: its importance
    k: Weights
    answers: np.ndarray  # whether it may take the turn before whole (a whole turn after a question)

    def exact(
        self,
        idx: np.ndarray,
        near: np.ndarray,
        counted: np.ndarray,
        own: np.ndarray,
        neighbours: Callable[..., np.ndarray],
    ) -> np.ndarray:
        """The exact scores of passages `idx` (ascending). `near` (ascending) holds them and the
        passages one and two places from each, `counted` / `own` their term counts / BM25;
        `neighbours(own, first, last, at, asking, whole)`: the search's neighbour share."""
        first, last, k = self.first, self.last, self.k
        pos, hit, at = np.searchsorted(near, idx), counted > 0, self.episode[idx]
        beside = neighbours(own, first[near], last[near], pos, self.asking[near], self.whole[near])
        seen = hit[pos] | self.head_seen[at]
        seen |= hit[np.maximum(pos - 1, 0)] & ~first[idx, None]
        seen |= hit[np.minimum(pos + 1, len(near) - 1)] & ~last[idx, None]
        coverage = np.zeros(len(idx))
        for g, w in enumerate(self.weights):
            coverage = coverage + np.where(seen[:, g], w, 0.0)
        coverage = coverage / (sum(self.weights) or 1.0)
        scores = (own[pos] + beside + k.head * self.heads[at]) * (k.floor + coverage) * self.boost[at]
        if self.named:
            scores = np.where(self.by_named[idx], scores * k.speaker, scores)
        if self.asks_when:
            scores = np.where(self.says_when[idx], scores * k.when, scores)
        return scores + self.gain[at]


def blocked(
    blocks: Blocks,
    parts: Parts,
    most: np.ndarray,
    asked: Any,
    have: tuple[Any, ...],
    keep: int,
    shares: Shares,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(passages, their exact scores, their counts): those of the blocks that can hold one of the
    best `keep` (runtime.passage_blocks). `have`: (candidates, each passage's place in its episode,
    what captions and notes change in the counts, the search's neighbour share as `Parts.exact`
    takes it); `most`: per passage, the largest speaker and "when" boost it can get."""
    entries, local, (captions, noted), neighbours = have
    weights = asked.weights
    # Term counts of passages `near` (ascending) with what captions, then notes, change.
    extras = (captions,) if noted is captions else (captions, noted)
    count = NearCounts(blocks.index.words, entries, (parts.episode, local), asked.groups, asked.rx, extras)

    def exact(idx: np.ndarray, near: np.ndarray, counted: np.ndarray) -> np.ndarray:
        if compiled.active():
            return compiled.exact_scores(parts, idx, near, counted, shares, (K1, B))
        own = bm25_rows(counted, parts.turn_words[near], weights, shares.avg_words)
        return parts.exact(idx, near, counted, own, neighbours)

    high = blocks.bounds(
        asked.groups,
        weights,
        parts.turn_words,
        (parts.heads, parts.head_seen, parts.boost, parts.gain, most, parts.answers),
        lambda c, length: bm25_rows(c, length, weights, shares.avg_words),
        Factors(parts.k.head, parts.k.floor, shares.answer, max(shares.neighbour, shares.far)),
        (K1, B, shares.avg_words),
    )
    return blocks.scored(high, keep, count, exact)
