"""An episode's passages stored by column: no Python object per passage while it is kept.

A user with two thousand long turns has about 22,000 passages prepared in the
process (runtime.episode_text). Kept as one `Passage` object each, with a
list of their lowered texts and, once shown, a word set each, they were a
third of the objects the garbage collector walks: a full collection cost
30-60 ms, and landed on whichever search triggered it (about one in a hundred
or two). Kept here by column instead: each episode's texts joined into one
string with their boundaries in an array, the per-passage numbers in arrays,
the speakers and turn ids once per quote. A `Passage` is built only when
someone asks for one (a result, a reranker's neighbour), and the search reads
the columns it needs without building any.

The near-duplicate check's word sets (each passage's distinct words, as
`quote_search` compares them) are also taken here, once, when the episode is
prepared: numbered in one vocabulary (`WordNumbers`), each passage's numbers
sorted in one flat array. A search then builds the set of a result it shows
from a slice, instead of reading and splitting the text of every new result.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import accumulate, pairwise
from typing import Any, overload

import numpy as np
from tiermem.runtime.passages import PASSAGE_CHARS, Passage, split_text

# The words the near-duplicate check compares: runs of lowered letters and digits.
DEDUP_WORD = re.compile(r"[a-z0-9]+")


def _position(j: int, n: int) -> int:
    """Index `j` of a sequence of `n` as a list reads it (negative from the end), or IndexError."""
    at = j + n if j < 0 else j
    if not 0 <= at < n:
        raise IndexError(j)
    return at


class JoinedTexts(Sequence[str]):
    """Texts kept as one string and their boundaries: text j is `joined[at[j]:at[j + 1]]`."""

    __slots__ = ("at", "joined")

    def __init__(self, texts: Sequence[str]) -> None:
        self.joined = "".join(texts)
        # An array of machine integers: read as Python ints, and nothing in it for the collector.
        self.at = array("q", accumulate((len(t) for t in texts), initial=0))

    def __len__(self) -> int:
        return len(self.at) - 1

    @overload
    def __getitem__(self, j: int) -> str: ...

    @overload
    def __getitem__(self, j: slice) -> list[str]: ...

    def __getitem__(self, j: int | slice) -> str | list[str]:
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(len(self)))]
        j = _position(j, len(self))
        return self.joined[self.at[j] : self.at[j + 1]]

    def __iter__(self) -> Iterator[str]:
        joined = self.joined
        for a, b in pairwise(self.at):
            yield joined[a:b]


class PassageColumns(Sequence[Passage]):
    """An episode's passages (runtime.passages), by column; `self[j]` builds passage j's `Passage`."""

    __slots__ = ("n", "part", "parts", "quote", "quote_events", "quote_speakers", "texts")

    def __init__(self, quotes: Sequence[Any], limit: int = PASSAGE_CHARS) -> None:
        texts: list[str] = []
        quote: list[int] = []
        part: list[int] = []
        parts: list[int] = []
        speakers: list[str] = []
        events: list[str] = []
        for qi, q in enumerate(quotes):
            has = isinstance(q, dict)
            speakers.append(str(q.get("speaker") or "") if has else "")
            events.append(str(q.get("event_id") or "") if has else "")
            if not has or not q.get("text"):
                continue
            pieces = split_text(str(q["text"]), limit)
            texts.extend(pieces)
            quote.extend([qi] * len(pieces))
            part.extend(range(len(pieces)))
            parts.extend([len(pieces)] * len(pieces))
        self.texts = JoinedTexts(texts)
        self.quote = np.array(quote, dtype=np.int64)  # each passage's position in the quotes
        self.part = array("q", part)
        self.parts = array("q", parts)
        # Per quote, not per passage: an episode has ten quotes and a hundred passages.
        self.quote_speakers = tuple(speakers)
        self.quote_events = tuple(events)
        self.n = len(texts)  # how many passages (what the searches' sizes read, without a call)

    def __len__(self) -> int:
        return self.n

    @overload
    def __getitem__(self, j: int) -> Passage: ...

    @overload
    def __getitem__(self, j: slice) -> list[Passage]: ...

    def __getitem__(self, j: int | slice) -> Passage | list[Passage]:
        if isinstance(j, slice):
            return [self[k] for k in range(*j.indices(len(self)))]
        j = _position(j, len(self))
        q = int(self.quote[j])
        return Passage(
            idx=j,
            quote=q,
            part=self.part[j],
            parts=self.parts[j],
            text=self.texts[j],
            speaker=self.quote_speakers[q],
            event_id=self.quote_events[q],
        )

    def text(self, j: int) -> str:
        return self.texts[j]

    def speaker(self, j: int) -> str:
        return self.quote_speakers[int(self.quote[j])]

    def event_id(self, j: int) -> str:
        return self.quote_events[int(self.quote[j])]


class WordNumbers:
    """One number per word, in the order met: the near-duplicate check's vocabulary for one process.

    Any one fixed order of words serves the check's prefixes (quote_search);
    the last met first files sets under rarer words (common ones are met in
    the first texts), so few sets share a filing word.
    """

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        # Per fixed word set asked of `numbered`: the numbers of its words met so far, and the rest.
        self._known: dict[frozenset[str], tuple[set[int], set[str]]] = {}

    def numbered(self, words: frozenset[str]) -> set[int]:
        """The numbers of those of `words` met so far; kept per set, so only its words not met yet
        are looked up again (numbers are never taken back). `words` must be a module's constant
        (stop words): each set asked is kept for the vocabulary's life, so sets made per question
        or per reader would grow it without bound. The answer is the kept set itself: callers
        combine it into a new set (`|`) and never change it in place."""
        kept = self._known.get(words)
        if kept is None:
            kept = self._known[words] = (set(), set(words))
        found, missing = kept
        numbers = self.numbers
        for word in tuple(missing):  # a copy: another thread may take words out meanwhile
            n = numbers.get(word)
            if n is not None:
                found.add(n)
                missing.discard(word)
        return found

    def sets(self, word_lists: Iterable[Iterable[str]]) -> tuple[np.ndarray, np.ndarray]:
        """(every list's distinct words' numbers, ascending, one list after the other; the boundaries)."""
        numbers = self.numbers
        flat: list[int] = []
        sizes: list[int] = []
        for words in word_lists:
            before = len(flat)
            for word in words:
                n = numbers.get(word)
                if n is None:
                    n = numbers[word] = len(numbers)
                flat.append(n)
            sizes.append(len(flat) - before)
        at = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=at[1:])
        ids = np.array(flat, dtype=np.int64)
        if len(ids):
            # Each list's numbers sorted (and the lists kept in order): one sort for all of them.
            ids = ids[np.lexsort((ids, np.repeat(np.arange(len(sizes)), sizes)))]
        return ids, at


def dedup_words(lowered: str, indexed: Iterable[str] | None) -> Iterable[str]:
    """The distinct words of a lowered passage as the near-duplicate check splits it.

    `indexed`: its distinct words as the passage index split them (runs of
    word characters); on ASCII text without an underscore those are the same
    words, so the text is not split a second time.
    """
    if indexed is not None and lowered.isascii() and "_" not in lowered:
        return indexed
    return set(DEDUP_WORD.findall(lowered))
