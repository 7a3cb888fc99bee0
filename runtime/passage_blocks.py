"""Blocks of a few consecutive passages with a provable bound: only the blocks that can matter are counted.

A quote search scores passages (runtime.quote_search):

    score = (own + beside + HEAD x header) x (FLOOR + coverage) x boost
            [x SPEAKER if its speaker is named] [x WHEN if it says when] + importance

On a long conversation (two hundred candidate episodes of ten 1,000-token
replies: 22,000 passages) the bound of runtime.passage_bounds skips most of
the exact scoring, but it needs every passage's own BM25 first: the term
counts of every passage, from the postings of every word the question
matches, and a few passes over 22,000 entries. Bounding whole episodes first
does not help (every episode holds the common words somewhere: three quarters
of the passages stay); bounding BLOCK consecutive passages does.

So each indexed episode's passages are cut into blocks of BLOCK (its last
block may be shorter), numbered when the episode is prepared (`BlockIndex`),
and, per query form, each block's largest count of the words the form matches
is taken from the postings once and kept (`BlockIndex.maxima`; the index only
grows, and it is dropped with everything prepared, on an erasure too). A
question's bound of every passage in a block (`Blocks.bounds`):

* its own BM25 at most that of, per term group, the sum of its forms' block
  maxima (a word counts once, for one group: the sum is at least its count)
  at the block's shortest turn length (BM25 grows with the count and shrinks
  with the length);
* a neighbour one or two places away lies in the block or the ones beside it
  in the same episode: at most the largest neighbour share of their bounds;
* coverage at most the groups the block, the blocks beside it or the header hold;
* every speaker / "when" boost the block's passages can get, the episode's
  time boost and importance.

The exact scores of the passages of the best-bounded blocks (DEPTH times the
search's depth of them) give a threshold: their `keep`-th best is at most the
`keep`-th best of all. Every block whose bound reaches it is scored exactly,
with the first ones (`Blocks.scored`): so every passage that can be among the
best `keep` is scored exactly, by the same operations as when every passage
is scored, and the result, order and ties included, is that of scoring every
passage. Bounds are widened by a relative 1e-9 against rounding. Blocks of
short episodes (counted per question, not indexed) and of episodes with notes
(whose words add to a turn's counts) are always scored.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from tiermem.runtime import passage_compiled as compiled

if TYPE_CHECKING:
    from tiermem.runtime.episode_text import Prepared, TermMatcher, WordIndex

BLOCK = 4  # passages per block: 2-4 leave the fewest passages (bench/bound_ceiling.py)
MIN_PASSAGES = 2_000  # fewer candidate passages than this: score them all
DEPTH = 3  # the first pass: the best-bounded blocks' passages, DEPTH x `keep` (2, 3, 5 measured)
SLACK = 1e-9  # relative widening of the bounds, against rounding
MAX_FORMS = 20_000  # kept forms' maxima; past this all are dropped (each is a few arrays of numbers)


class BlockIndex:
    """Each indexed passage's block (an episode's blocks are numbered together when it is prepared) and,
    per query form, each block's largest count of the words it matches."""

    def __init__(self, words: WordIndex) -> None:
        self.words = words  # the passage index whose passages are numbered here
        self.block_of = array("q")  # per indexed passage (its id in the word index): its block
        self.blocks = 0
        self._maxima: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}

    def add(self, n: int) -> int:
        """Number the blocks of the next `n` indexed passages (one episode); its first block (returned)."""
        first = self.blocks
        # A new array rather than this one grown: a search in another thread may hold a view of it,
        # and an array with a view cannot grow.
        self.block_of = self.block_of + array("q", (first + i // BLOCK for i in range(n)))
        self.blocks += -(-n // BLOCK)
        return first

    def maxima(self, form: str) -> tuple[np.ndarray, np.ndarray]:
        """(the blocks holding a word `form` matches, ascending; in each, the largest count in one passage
        of all those words together). Kept while the index holds the same passages."""
        words = self.words
        # The size before the postings are read: a thread indexing an episode meanwhile makes the
        # entry look stale next time instead of passing for the larger index.
        size = words.size
        kept = self._maxima.get(form)
        if kept is not None and kept[0] == size:
            return kept[1], kept[2]
        wids = words.matching(form)
        nothing = np.zeros(0, dtype=np.int64)
        pids, counts = postings_of(words, wids, size)
        if len(wids) > 1:  # several words: summed per passage first
            order = np.argsort(pids, kind="stable")
            pids, counts = pids[order], counts[order]
            starts = np.flatnonzero(np.r_[True, pids[1:] != pids[:-1]])
            counts, pids = np.add.reduceat(counts, starts), pids[starts]
        if len(pids):
            blocks = np.frombuffer(self.block_of, dtype=np.int64)[pids]  # a copy: the view goes at once
            starts = np.flatnonzero(np.r_[True, blocks[1:] != blocks[:-1]])
            found, top = blocks[starts], np.maximum.reduceat(counts, starts)
        else:
            found, top = nothing, nothing
        if len(self._maxima) >= MAX_FORMS:
            self._maxima.clear()
        self._maxima[form] = (size, found, top)
        return found, top


def postings_of(words: WordIndex, wids: Sequence[int], size: int) -> tuple[np.ndarray, np.ndarray]:
    """(text ids, their counts) of the words `wids` in order, joined, of the first `size` texts only.

    The index grows while other threads search (a long episode prepared meanwhile): the arrays are
    copied (each in one call, which no other thread interrupts) rather than viewed, since an array
    with a view cannot grow (the thread indexing would fail); and a text indexed after `size` was read
    is left out, since one half added has its word's text id but not yet its count.
    """
    pids, counts = array("q"), array("q")
    for w in wids:
        held, times = words.postings[w], words.counts[w]
        k = bisect_left(held, size)  # ascending ids: the texts before `size`, all added whole
        pids += held[:k]
        counts += times[:k]
    return np.frombuffer(pids, dtype=np.int64), np.frombuffer(counts, dtype=np.int64)


class Factors(NamedTuple):
    """The search's constants the bound needs."""

    head_share: float
    floor: float
    answer: float  # the share of the turn before, for a whole turn answering a question
    neighbour: float  # the largest share of any other neighbour one or two places away


def block_plan(
    index: BlockIndex,
    entries: Sequence[Prepared],
    sizes: np.ndarray,
    firsts: np.ndarray,
    noted: set[str],
    keep: int | None,
) -> Blocks | None:
    """The search's blocks in `index`, when bounding them can pay (None: count and score every passage).

    `noted`: the turns with notes (their episodes' blocks are always scored). Not below MIN_PASSAGES,
    nor without a depth, nor with an episode asked for twice, nor without an indexed episode, nor
    with one numbered in another index (everything prepared was dropped meanwhile).
    """
    n = int(sizes.sum())
    if keep is None or n < MIN_PASSAGES or n <= DEPTH * keep or len({id(e) for e in entries}) < len(entries):
        return None
    if any(e.block >= 0 and e.block_by is not index for e in entries):
        return None
    forced = np.array([e.block < 0 or not e.event_ids.isdisjoint(noted) for e in entries], dtype=bool)
    return None if forced.all() else Blocks(index, entries, sizes, firsts, forced)


class Blocks:
    """One search's candidate passages cut into their episodes' blocks (in candidate order)."""

    def __init__(
        self,
        index: BlockIndex,
        entries: Sequence[Prepared],
        sizes: np.ndarray,
        firsts: np.ndarray,
        forced: np.ndarray,
    ) -> None:
        """`forced`: per candidate, whether its blocks are always scored (short, or with notes)."""
        self.index = index
        self.entries = entries
        per = -(-sizes // BLOCK)
        self.episode = np.repeat(np.arange(len(entries), dtype=np.int64), per)
        block_first = np.concatenate(([0], np.cumsum(per)[:-1])).astype(np.int64)
        # Per candidate: its blocks' ids in the index (-1: not indexed), how many, its first one's row.
        self.ids = (np.array([e.block for e in entries], dtype=np.int64), per.astype(np.int64), block_first)
        self.nth = np.arange(len(self.episode), dtype=np.int64) - block_first[self.episode]
        self.start = firsts[self.episode] + BLOCK * self.nth  # each block's first passage
        self.size = np.minimum(BLOCK, sizes[self.episode] - BLOCK * self.nth)
        self.first = self.nth == 0
        self.last = self.nth == per[self.episode] - 1
        self.forced = forced[self.episode]
        self.n_passages = int(sizes.sum())

    def bounds(
        self,
        groups: Sequence[Sequence[str]],
        weights: Sequence[float],
        lengths: np.ndarray,
        parts: tuple[np.ndarray, ...],
        bm25: Callable[[np.ndarray, np.ndarray], np.ndarray],
        f: Factors,
        norm: tuple[float, float, float] | None = None,
    ) -> np.ndarray:
        """Per block, an upper bound of every one of its passages' exact scores (inf: always scored).

        `lengths`: per passage, its BM25 length; `parts`: per candidate its header's BM25, the groups
        its header holds, its time boost and importance, then per passage the speaker and "when"
        boosts it can get and whether it answers the turn before (a whole turn after a question);
        `bm25(counts, lengths)`: the search's own BM25 of rows of group counts, whose k1, b and average
        length are `norm` (given: the compiled pass of runtime.passage_compiled computes it, when built).
        """
        head, head_seen, boost, importance, most, answers = parts
        index, n = self.index, len(self.episode)
        if norm is not None and compiled.active() and groups:
            # The forms' block maxima summed per group in one compiled step, then the bounds in another.
            maxima = tuple((*index.maxima(form), g) for g, forms in enumerate(groups) for form in forms)
            summed = np.zeros((n, len(groups)))
            compiled.block_sums(maxima, self.ids, summed)
            return compiled.block_bounds(self, summed, weights, lengths, parts, f, norm, SLACK)
        row_of = np.full(index.blocks, -1, dtype=np.int64)
        indexed = self.ids[0][self.episode]
        ok = indexed >= 0
        row_of[indexed[ok] + self.nth[ok]] = np.flatnonzero(ok)
        counts = np.zeros((n, len(groups)))
        for g, forms in enumerate(groups):
            for form in forms:
                found, top = index.maxima(form)
                # Blocks numbered since `row_of` was made (another thread preparing) are none of the search's.
                known = found < len(row_of)
                found, top = found[known], top[known]
                rows = row_of[found]
                inside = rows >= 0
                counts[:, g] += np.bincount(rows[inside], weights=top[inside], minlength=n)
        if norm is not None and compiled.active():
            return compiled.block_bounds(self, counts, weights, lengths, parts, f, norm, SLACK)
        shortest = np.minimum.reduceat(lengths, self.start) if n else np.zeros(0)
        own = bm25(counts, shortest)
        own[self.forced] = np.inf
        # Neighbours one or two places away: in the block itself or the ones beside it (same episode).
        padded = np.zeros(n + 2)
        padded[1:-1] = own
        before = np.where(self.first, 0.0, padded[:-2])
        after = np.where(self.last, 0.0, padded[2:])
        share = np.where(np.maximum.reduceat(answers, self.start), max(f.answer, f.neighbour), f.neighbour)
        near = np.maximum(np.maximum(before, after), own) * share
        held = counts > 0
        seen = held | head_seen[self.episode]
        seen[1:] |= held[:-1] & ~self.first[1:, None]
        seen[:-1] |= held[1:] & ~self.last[:-1, None]
        coverage = np.zeros(n)
        for g, w in enumerate(weights):
            coverage = coverage + np.where(seen[:, g], w, 0.0)
        coverage = coverage / (sum(weights) or 1.0)
        at = self.episode
        high = (own + near + f.head_share * head[at]) * (f.floor + coverage) * boost[at]
        high = high * np.maximum.reduceat(most, self.start) + importance[at]
        high[self.forced] = np.inf
        return high + np.abs(high) * SLACK

    def passages(self, chosen: np.ndarray) -> np.ndarray:
        """The passages (ascending) of the blocks `chosen` (ascending)."""
        sizes = self.size[chosen]
        step = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        return np.repeat(self.start[chosen], sizes) + step

    def scored(
        self,
        high: np.ndarray,
        keep: int,
        count: Callable[[np.ndarray], np.ndarray],
        exact: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(passages, ascending; their exact scores; their term counts): every passage of the blocks
        that can hold one of the best `keep` (`high`: the blocks' bounds).

        `count(near)`: the term counts of passages `near`; `exact(idx, near, counts of near)`: the
        exact scores of passages `idx` (`near`: them and the passages one and two places away).
        The best-bounded blocks' passages (DEPTH x `keep`) are scored first: their `keep`-th best
        score is the threshold every other block's bound must reach.
        """
        first = compiled.first_pass(high, self.size, DEPTH * keep) if compiled.active() else None
        if first is None:  # not built, or a NaN bound: numpy decides
            order = best_first(high, DEPTH * keep)
            reach = int(np.searchsorted(np.cumsum(self.size[order]), DEPTH * keep)) + 1
            first = np.sort(order[:reach])
        idx, scores, counts = self._exact(first, count, exact)
        if len(scores) >= keep:
            theta = np.partition(scores, len(scores) - keep)[len(scores) - keep]
            left = high >= theta - abs(theta) * SLACK
        else:
            left = np.ones(len(high), dtype=bool)
        left[first] = False  # the blocks not scored yet, ascending
        more = np.flatnonzero(left)
        if len(more):
            idx2, scores2, counts2 = self._exact(more, count, exact)
            order = np.argsort(np.concatenate([idx, idx2]), kind="stable")
            idx = np.concatenate([idx, idx2])[order]
            scores, counts = (
                np.concatenate([scores, scores2])[order],
                np.concatenate([counts, counts2])[order],
            )
        return idx, scores, counts

    def _exact(
        self,
        chosen: np.ndarray,
        count: Callable[[np.ndarray], np.ndarray],
        exact: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if compiled.active():
            idx, near, pos = compiled.spread(self.start, self.size, chosen, self.n_passages)
        else:
            idx = self.passages(chosen)
            near = around(idx, self.n_passages)
            pos = np.searchsorted(near, idx)
        counted = count(near)
        return idx, exact(idx, near, counted), counted[pos]


def best_first(high: np.ndarray, n: int) -> np.ndarray:
    """The first `n` (at least) of `np.argsort(-high, kind="stable")`: the blocks with the highest
    bounds, ties in block order. A block holds at least one passage, so the first pass never
    reaches past the first DEPTH x `keep` of that order, and only those need sorting (a stable
    sort of every block was a tenth of a long conversation's quote search)."""
    neg = -high
    if n >= len(neg):
        return np.argsort(neg, kind="stable")
    cut = np.partition(neg, n - 1)[n - 1]
    if np.isnan(cut):  # NaNs sort last, and compare false: the whole sort decides
        return np.argsort(neg, kind="stable")
    # Every block at or above the n-th highest bound, in block order; sorted stably, the ones
    # tied with the n-th keep that order, as in the sort of them all.
    held = np.flatnonzero(neg <= cut)
    return held[np.argsort(neg[held], kind="stable")]


def around(idx: np.ndarray, n: int) -> np.ndarray:
    """`idx` and the passages one and two places from each (within 0..n-1), ascending: what their
    exact scores read (their neighbours' own match and words)."""
    marked = np.zeros(n + 4, dtype=bool)
    for step in range(5):
        marked[idx + step] = True  # idx - 2 + step, shifted by two
    return np.flatnonzero(marked[2 : n + 2])


def counts_at(
    words: WordIndex,
    entries: Sequence[Prepared],
    episode: np.ndarray,
    local: np.ndarray,
    at: np.ndarray,
    groups: Sequence[Sequence[str]],
    matcher: TermMatcher | None,
) -> np.ndarray:
    """(len(at), groups): the term counts of the candidate passages `at` (ascending), as
    `EpisodeTexts.term_counts` counts them for every passage: the postings inside the runs of
    consecutive indexed passages, the matcher over a short episode's text."""
    out = np.zeros((len(at), len(groups)))
    if not len(at) or not groups:
        return out
    starts = np.array([e.start for e in entries], dtype=np.int64)[episode[at]]
    pid = np.where(starts >= 0, starts + local[at], -1)
    indexed = np.flatnonzero(pid >= 0)
    if len(indexed):
        p, rows = pid[indexed], indexed
        breaks = np.flatnonzero((p[1:] != p[:-1] + 1) | (rows[1:] != rows[:-1] + 1)) + 1
        run_starts = np.r_[0, breaks]
        sizes = np.diff(np.r_[run_starts, len(p)])
        got = words.counts_in(p[run_starts], groups, sizes, list(range(len(sizes))))
        out[indexed] = got
    if matcher is not None:
        forms = tuple(f for g in groups for f in g)
        for i in np.flatnonzero(pid < 0).tolist():
            text = entries[int(episode[at[i]])].lowered[int(local[at[i]])]
            if any(f in text for f in forms):
                out[i] = matcher.counts(text)
    return out
