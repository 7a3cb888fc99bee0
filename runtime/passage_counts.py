"""A quote search's term counts of the passages it scores exactly, in one compiled step per pass.

A search over a long conversation counts the question's words in a few
thousand of its candidate passages, in two passes (runtime.passage_blocks:
the best-bounded blocks, then every block that can still matter), and adds to
them what the passages' attachment descriptions and notes change. Counted
through `counts_at` (the passage index's `counts_in`) each pass rebuilt the
same word lists and runs of passages with a dozen numpy steps, then added
the changes row by row. `NearCounts` takes what does not change between the
passes once per search (the words the question matches, with their groups,
and each candidate's place in the index), and the compiled `near_counts` of
runtime._blockscore does the rest in one call: the same integer sums (any
order gives them) and the same additions, in the same order, as the numpy
path, which runs when the extension is not built.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from tiermem.runtime import passage_compiled as compiled
from tiermem.runtime.passage_blocks import counts_at

if TYPE_CHECKING:
    from tiermem.runtime.episode_text import EpisodeTexts, Prepared, TermMatcher, WordIndex


def word_lists(
    words: WordIndex, groups: Sequence[Sequence[str]]
) -> tuple[tuple[tuple[array[int], array[int]], ...], np.ndarray]:
    """The (postings, counts) of every indexed word the groups match, and each one's group: the first
    group with a form matching it (as `WordIndex.counts_in` counts a word once)."""
    group_of: dict[int, int] = {}
    for g, forms in enumerate(groups):
        for form in forms:
            for wid in words.matching(form):
                group_of.setdefault(wid, g)
    lists = tuple((words.postings[w], words.counts[w]) for w in group_of)
    return lists, np.array(list(group_of.values()), dtype=np.int64)


def header_counts(
    texts: EpisodeTexts, entries: Sequence[Prepared], groups: Sequence[Sequence[str]]
) -> np.ndarray:
    """(entries, groups): `EpisodeTexts.head_counts`, the counts of the groups in each entry's name and
    summary, from the header index in one compiled call (numpy's way when it is not built)."""
    n = len(entries)
    if not compiled.active() or not n or not groups:
        return texts.head_counts(entries, groups)
    out = np.zeros((n, len(groups)))
    lists, group_of = word_lists(texts.heads, groups)
    if lists:
        # Each entry a "candidate" of one passage: its header, text `head` of the header index.
        heads = np.array([e.head for e in entries], dtype=np.int64)
        each = np.arange(n, dtype=np.int64)
        compiled.near_counts(lists, group_of, heads, (each, np.zeros(n, dtype=np.int64)), each, (), out)
    return out


class NearCounts:
    """The term counts of any of one search's candidate passages, with what captions and notes change."""

    def __init__(
        self,
        words: WordIndex,
        entries: Sequence[Prepared],
        place: tuple[np.ndarray, np.ndarray],
        groups: Sequence[Sequence[str]],
        matcher: TermMatcher | None,
        extras: tuple[np.ndarray, ...],
    ) -> None:
        """`place`: per candidate passage its candidate and its position there; `extras`: (passages,
        groups) arrays added to the counts in order (what captions, then notes, change)."""
        self.words, self.entries, self.groups = words, entries, groups
        self.matcher, self.extras = matcher, extras
        self.episode, self.local = place
        self.starts = np.array([e.start for e in entries], dtype=np.int64)
        self.lists, self.group_of = word_lists(words, groups)
        self.short = bool((self.starts < 0).any()) and matcher is not None
        self.forms = tuple(f for g in groups for f in g)

    def __call__(self, near: np.ndarray) -> np.ndarray:
        """(len(near), groups): the counts of passages `near` (ascending), plus the extras."""
        if not compiled.active() or not len(near) or not self.groups:
            got = counts_at(
                self.words, self.entries, self.episode, self.local, near, self.groups, self.matcher
            )
            for extra in self.extras:
                got = got + extra[near]
            return got
        out = np.zeros((len(near), len(self.groups)))
        compiled.near_counts(
            self.lists, self.group_of, self.starts, (self.episode, self.local), near, self.extras, out
        )
        if self.short:  # a short episode's passages are counted from their text (counts_at's way)
            assert self.matcher is not None
            at = self.episode[near]
            for i in np.flatnonzero(self.starts[at] < 0).tolist():
                text = self.entries[int(at[i])].lowered[int(self.local[near[i]])]
                if any(f in text for f in self.forms):
                    row = np.array(self.matcher.counts(text), dtype=np.float64)
                    for extra in self.extras:
                        row = row + extra[near[i]]
                    out[i] = row
        return out
