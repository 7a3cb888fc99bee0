"""What a passage of the recalled shortlist says beyond its search score: the reranker's word features.

The quote search folds everything it knows about a passage into one score;
the reranker (runtime.rerank) looks again at the shortlist's head with
features the score does not separate, all read from the shortlist itself and
the passages around each one in its episode, without any model:

- `named_self` / `named_other`: the question names someone, and the passage
  is theirs / someone else's;
- `when_dated`: a "when" question, and the passage states a date (a resolved
  relative date or a derived date note);
- `prev_asks` / `prev_other`: the turn before it ends with a question mark /
  is another speaker's (an answer is the turn after a question);
- `next_asks`: the turn after it is a question (a statement someone asks about);
- `day_mass`: how much of the shortlist's best (the first DAY_WINDOW) was said
  the same day, besides the passage itself (the turns of one conversation
  about the question's topic sit together);
- `image`: it carries a shared picture's description;
- `content` / `content_share`: log(1 + its distinct content words) and their
  share of its distinct words: words that are not stop words, small talk ("thanks", "awesome",
  "hey") or the speakers' names. "Thanks, Mel! Your kind words mean a lot."
  matches a question about kindness and says nothing.

Measured on LoCoMo dev (leave-one-conversation-out, bench/RESULTS.md), three
more added nothing and were left out: the share of the question's term groups
a passage or the turn before it holds (the search score has it already), and
a number or a capitalised word inside a sentence. A passage's words are those
the near-duplicate check numbered when its episode was prepared (an array
slice, not the text split again), kept with its prepared episode, so what a
reranking costs per passage is a few set operations.
"""

from __future__ import annotations

import math
import re
import sqlite3
import weakref
from array import array
from collections.abc import Callable, Collection, Sequence
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray
from tiermem.runtime.episode_search import _WORD
from tiermem.runtime.episode_text import TEXTS, Prepared
from tiermem.runtime.hotstore import database_key
from tiermem.runtime.passage_columns import PassageColumns, WordNumbers

from tiermem.text import STOP_WORDS, wordset

WORD_FEATURES = (
    "named_self",
    "named_other",
    "when_dated",
    "prev_asks",
    "prev_other",
    "next_asks",
    "day_mass",
    "image",
    "content",
    "content_share",
)
DAY_WINDOW = 20  # the best passages whose days count for `day_mass`
# Small talk: words that carry no fact whatever the conversation is about.
SMALL_TALK = wordset(
    """hey hi hello yo thanks thank thx wow whoa oh omg yeah yes yep yup yay ok okay cool awesome great
    amazing nice good glad sounds sound hear heard sorry congrats congratulations lol haha really totally
    absolutely definitely sure lovely super stoked happy proud fantastic wonderful incredible exciting
    excited dear buddy man bro mate pal lately ah aw aww wish luck keep up things thing going let know
    hope hoping cheers care take bye see soon talk later chat catch again long time been meet mean means
    lot much"""
)
_NO_CONTENT = STOP_WORDS | SMALL_TALK  # with the speakers' names: what is not a content word
_NAMES = re.compile(r"\b[A-Z][a-z]+")
_ASKS_WHEN = re.compile(r"^\s*(?:when|how long|what (?:year|month|date|day|time))\b", re.I)
_IMAGE = " [image:"

Said = tuple[str, str]  # (speaker, text)


class Around(NamedTuple):
    """What a passage is in its episode, whatever the question: its words and its neighbours."""

    # Its distinct words (lowered), caption included; `words` gives them as a set. Kept per passage
    # as their numbers in `numbered` (the near-duplicate check's vocabulary, taken when a long
    # episode was prepared: an array slice, nothing for the collector to walk) or, for a short
    # episode, as a tuple: a set stays tracked, and the collector's young passes walked every word
    # of every newly kept set again and again (3-4 ms a pass on a long conversation).
    distinct: Collection[str] | NDArray[np.int64]
    before: Said | None
    prev_asks: bool  # the turn before it ends with a question mark
    prev_other: bool  # ...and is another speaker's
    next_asks: bool  # the turn after it ends with a question mark
    image: bool  # it carries a shared picture's description
    content: dict[frozenset[str], int]  # the speakers' names met -> its content words with them
    numbered: WordNumbers | None = None  # the vocabulary `distinct` is numbered in (None: words)

    @property
    def words(self) -> frozenset[str]:
        """Its distinct words (lowered), caption included. For tests and inspection only: a numbered
        passage is spelled out through the whole vocabulary (every word met), far too dear per passage
        on a search's path, which reads `distinct` and `numbered` instead."""
        if self.numbered is None:
            return frozenset(self.distinct)
        spelled = list(self.numbered.numbers)  # numbered in the order met: word n is the n-th
        return frozenset(spelled[n] for n in self.distinct.tolist())  # type: ignore[union-attr]


class _Episode:
    """What the reranker keeps of one prepared episode: its passages' facts, worked out when first asked."""

    __slots__ = ("_positions", "counted_for", "counts", "entry", "facts", "marks")

    def __init__(self, entry: weakref.ref[Prepared], n: int) -> None:
        self.entry = entry
        self.facts: list[Around | None] = [None] * n  # per passage
        self._positions: dict[tuple[str, int], int] | None = None
        # What `placed_word_features` read of a long episode's passages, kept in arrays (nothing for
        # the collector to walk): per passage 0 (not read yet) or 1 | prev_asks << 1 | prev_other << 2
        # | next_asks << 3 | image << 4; and its content words (for the speakers' names
        # `counted_for`) and distinct words, -1 until counted.
        self.marks = bytearray(n)
        self.counts = array("q", [-1]) * (2 * n)
        self.counted_for: frozenset[str] | None = None

    @property
    def positions(self) -> dict[tuple[str, int], int]:
        """(event id, part) -> passage: built only for results that do not carry their passage's place."""
        if self._positions is None:
            entry = self.entry()
            ps = entry.passages if entry is not None else ()
            self._positions = {(e, part): j for j in range(len(ps)) for _, _, e, part in [_said(ps, j)]}
        return self._positions


# Kept only while the prepared episode itself is: when runtime.episode_text lets an episode go (a
# new version, an erasure), what was kept of its passages' words and texts goes with it.
_EPISODES: dict[int, _Episode] = {}


def _forgetter(key: int) -> Callable[[weakref.ref[Prepared]], None]:
    """What drops episode `key`'s kept facts when its prepared episode goes (one lookup: a whole
    cache of episodes let go at once must not cost a scan of all the others for each)."""

    def forget(ref: weakref.ref[Prepared]) -> None:
        kept = _EPISODES.get(key)
        if kept is not None and kept.entry is ref:
            del _EPISODES[key]

    return forget


def _episode(entry: Prepared) -> _Episode:
    """What the reranker keeps per prepared episode, while the episode is kept (runtime.episode_text)."""
    kept = _EPISODES.get(id(entry))
    if kept is None or kept.entry() is not entry:
        if len(_EPISODES) > 4096:
            _EPISODES.clear()
        ref = weakref.ref(entry, _forgetter(id(entry)))
        kept = _EPISODES[id(entry)] = _Episode(ref, len(entry.passages))
    return kept


def _said(ps: Sequence[Any], j: int) -> tuple[str, str, str, int]:
    """Passage j's (speaker, text, event id, part), read from the columns without building a `Passage`."""
    if isinstance(ps, PassageColumns):
        return ps.speaker(j), ps.text(j), ps.event_id(j), ps.part[j]
    p = ps[j]
    return p.speaker, p.text, p.event_id, p.part


def _facts(entry: Prepared, j: int) -> Around:
    ps = entry.passages
    speaker, text, _, _ = _said(ps, j)
    before = _said(ps, j - 1)[:2] if j > 0 else None
    distinct: Collection[str] | NDArray[np.int64]
    numbered = None
    if isinstance(ps, PassageColumns) and entry.start >= 0:
        # A long episode's: the words the near-duplicate check took when it was prepared (the same
        # split of the same lowered text), not the text split again per new result. (A short
        # episode's few words are split as fast as the numbers are read and counted.)
        numbered = entry.dedup_by if entry.dedup_by is not None else TEXTS.numbers
        ids, at = TEXTS.dedup(entry, numbered)
        distinct = ids[int(at[j]) : int(at[j + 1])]
    else:
        distinct = tuple(set(_WORD.findall(text.lower())))
    return Around(
        distinct=distinct,
        numbered=numbered,
        before=before,
        prev_asks=before is not None and before[1].rstrip().endswith("?"),
        prev_other=before is not None and before[0].lower() != speaker.lower(),
        next_asks=j + 1 < len(ps) and _said(ps, j + 1)[1].rstrip().endswith("?"),
        image=_IMAGE in text,
        content={},
    )


# A result's passage: its prepared episode and its place there, as the search that found it had them.
Placed = tuple[Prepared, int]


def surroundings(
    conn: sqlite3.Connection, head: Sequence[dict[str, Any]], placed: Sequence[Placed] | None = None
) -> list[Around]:
    """Each passage's words and neighbours, from the prepared episodes; worked out once per passage
    and kept with its episode.

    `placed` (one per item of `head`): each result's prepared episode and place, carried from the
    search that just found it (checked against the store's erasure mark by that search), so
    nothing is asked of the store again. Without it, the episodes are asked of runtime.episode_text.
    """
    if placed is not None and len(placed) >= len(head):
        pairs: list[Placed | None] = list(placed[: len(head)])
    else:
        pairs = _looked_up(conn, head)
    out = []
    for pair in pairs:
        if pair is None:
            # The episode was read again since the search and no longer holds this passage (erased
            # or replaced meanwhile): the passage keeps its place, with no word features to add.
            out.append(Around(frozenset(), None, False, False, False, False, {}))
            continue
        out.append(_around(*pair))
    return out


def _around(entry: Prepared, at: int) -> Around:
    """Passage `at` of `entry`'s words and neighbours, worked out once and kept with its episode."""
    kept = _episode(entry)
    facts = kept.facts[at]
    if facts is None:
        facts = kept.facts[at] = _facts(entry, at)
    return facts


def _looked_up(conn: sqlite3.Connection, head: Sequence[dict[str, Any]]) -> list[Placed | None]:
    """Each item's prepared episode and place, asked of runtime.episode_text (None: no longer there)."""
    ids = list(dict.fromkeys(str(item["episode_id"]) for item in head))
    entries = dict(zip(ids, TEXTS.prepared(conn, database_key(conn), ids), strict=True))
    out: list[Placed | None] = []
    for item in head:
        entry = entries[str(item["episode_id"])]
        at = _episode(entry).positions.get((item["event_id"], int(item["part"] or 0)))
        out.append(None if at is None else (entry, at))
    return out


def _content(
    at: Around, words: tuple[frozenset[str], frozenset[str]], numbered: dict[WordNumbers, set[int]]
) -> int:
    """How many of the passage's distinct words are not in `no_content` (`words`: the speakers' names,
    and `no_content`: those and `_NO_CONTENT`); `numbered` keeps the numbers of `no_content` per
    vocabulary, for one call: a word never met has no number, and no passage holds it."""
    names, no_content = words
    if at.numbered is None:
        return len(at.distinct) - len(no_content.intersection(at.distinct))
    ids = numbered.get(at.numbered)
    if ids is None:
        known = at.numbered.numbers
        ids = at.numbered.numbered(_NO_CONTENT) | {n for w in names if (n := known.get(w)) is not None}
        numbered[at.numbered] = ids
    return len(at.distinct) - len(ids.intersection(at.distinct.tolist()))  # type: ignore[union-attr]


class _Question(NamedTuple):
    """What the word features read of the question and the shortlist as a whole."""

    named: set[str]  # the names the question holds, lowered
    asks_when: bool
    scores: list[float]
    top: float
    days: dict[str, float]  # each day's share of the best DAY_WINDOW scores
    names: frozenset[str]  # the shortlist's speakers' names and their shortenings
    no_content: frozenset[str]


def _question(query: str, head: Sequence[dict[str, Any]]) -> _Question:
    speakers = {str(item.get("speaker") or "").lower() for item in head} - {""}
    scores = np.array([float(item["score"]) for item in head])
    top = float(scores.max()) or 1.0
    days: dict[str, float] = {}
    listed = scores.tolist()
    for item, s in zip(head[:DAY_WINDOW], listed[:DAY_WINDOW], strict=False):
        days[item["date"]] = days.get(item["date"], 0.0) + s / top
    names = frozenset(s[:k] for s in speakers for k in range(3, len(s) + 1))  # "mel" for Melanie
    return _Question(
        named={w.lower() for w in _NAMES.findall(query)},
        asks_when=_ASKS_WHEN.search(query) is not None,
        scores=listed,
        top=top,
        days=days,
        names=names,
        no_content=_NO_CONTENT | names,
    )


def _row(
    asked: _Question,
    i: int,
    item: dict[str, Any],
    flags: tuple[int, int, int, int],
    words: tuple[int, int],
) -> list[float]:
    """Passage i's `WORD_FEATURES`; `flags`: (prev_asks, prev_other, next_asks, image), each true when
    not 0; `words`: its content words and distinct words."""
    named = asked.named
    speaker = str(item.get("speaker") or "").lower()
    own_day = asked.scores[i] / asked.top if i < DAY_WINDOW else 0.0
    content, distinct = words
    return [
        float(bool(named) and speaker in named),
        float(bool(named) and speaker not in named),
        float(asked.asks_when and bool(item.get("anchors") or item.get("notes"))),
        float(bool(flags[0])),
        float(bool(flags[1])),
        float(bool(flags[2])),
        asked.days.get(item["date"], 0.0) - own_day,
        float(bool(flags[3])),
        math.log1p(content),
        content / max(1, distinct),
    ]


def word_features(
    query: str, head: Sequence[dict[str, Any]], around: Sequence[Around]
) -> NDArray[np.float64]:
    """The `WORD_FEATURES` of each passage of `head` (search results, best first), one row each;
    `around`: each passage's words and neighbours (`surroundings`)."""
    if not head:
        return np.zeros((0, len(WORD_FEATURES)))
    asked = _question(query, head)
    rows = []
    numbered: dict[WordNumbers, set[int]] = {}  # per vocabulary: the numbers of `no_content`
    for i, (item, at) in enumerate(zip(head, around, strict=True)):
        content = at.content.get(asked.names, -1)
        if content < 0:
            content = at.content[asked.names] = _content(at, (asked.names, asked.no_content), numbered)
        flags = (at.prev_asks, at.prev_other, at.next_asks, at.image)
        rows.append(_row(asked, i, item, flags, (content, len(at.distinct))))
    return np.array(rows, dtype=np.float64)


def _ends_asking(joined: str, start: int, end: int) -> bool:
    """Whether `joined[start:end]` ends with a question mark, white space aside (its last character
    read first: most passages end with neither)."""
    if start == end:
        return False
    last = joined[end - 1]
    if last == "?":
        return True
    return last.isspace() and joined[start:end].rstrip().endswith("?")


def placed_word_features(
    query: str, head: Sequence[dict[str, Any]], placed: Sequence[Placed]
) -> NDArray[np.float64]:
    """`word_features` of `head` with `surroundings(conn, head, placed)`, read from each passage's
    prepared episode on the spot: a long episode's passages build no `Around` (a new question's
    results are mostly passages not shown before, and building theirs was half a reranking); what
    was read is kept in its episode's arrays (`_Episode.marks`, `_Episode.counts`)."""
    if not head:
        return np.zeros((0, len(WORD_FEATURES)))
    asked = _question(query, head)
    marks, words = [], []
    numbered: dict[WordNumbers, set[int]] = {}
    for entry, j in placed[: len(head)]:
        ps = entry.passages
        if not isinstance(ps, PassageColumns) or entry.start < 0:
            at = _around(entry, j)  # a short episode's: its words split from the text, kept
            content = at.content.get(asked.names, -1)
            if content < 0:
                content = at.content[asked.names] = _content(at, (asked.names, asked.no_content), numbered)
            marks.append(at.prev_asks << 1 | at.prev_other << 2 | at.next_asks << 3 | at.image << 4)
            words.append((content, len(at.distinct)))
            continue
        kept = _episode(entry)
        marks.append(kept.marks[j] or _marked(kept, entry, j))
        # The reset and the tag below are plain stores, not one step: they assume one reranking of
        # an episode at a time. The interpreter lock makes that nearly so (a thread switch between
        # them is rare); without it (free-threading) two rerankings with other speakers could count
        # with each other's names, so such a build needs a lock here.
        if kept.counted_for is not asked.names:
            if kept.counted_for != asked.names:  # other speakers: other words count as content
                kept.counts = array("q", [-1]) * len(kept.counts)
            kept.counted_for = asked.names  # the same names: met as the same object from here on
        counts = kept.counts
        if counts[2 * j] < 0:
            counts[2 * j], counts[2 * j + 1] = _counted(entry, j, asked.names, numbered)
        words.append((counts[2 * j], counts[2 * j + 1]))
    return np.array(
        [
            _row(asked, i, item, (m & 2, m & 4, m & 8, m & 16), w)
            for i, (item, m, w) in enumerate(zip(head, marks, words, strict=True))
        ],
        dtype=np.float64,
    )


def _counted(
    entry: Prepared, j: int, names: frozenset[str], numbered: dict[WordNumbers, set[int]]
) -> tuple[int, int]:
    """A long episode's passage j: (its content words, its distinct words), from its numbered set;
    `numbered` keeps the numbers of the words that are not content per vocabulary, for one call."""
    vocabulary = entry.dedup_by if entry.dedup_by is not None else TEXTS.numbers
    ids, at = TEXTS.dedup(entry, vocabulary)
    words = ids[at[j] : at[j + 1]]
    ignored = numbered.get(vocabulary)
    if ignored is None:
        known = vocabulary.numbers
        ignored = vocabulary.numbered(_NO_CONTENT) | {n for w in names if (n := known.get(w)) is not None}
        numbered[vocabulary] = ignored
    return len(words) - len(ignored.intersection(words.tolist())), len(words)


def _marked(kept: _Episode, entry: Prepared, j: int) -> int:
    """Passage j's neighbours' endings and speakers and its picture mark, read from the columns and
    kept (`_Episode.marks`)."""
    ps = entry.passages
    joined, bounds, quote, speakers = ps.texts.joined, ps.texts.at, ps.quote, ps.quote_speakers
    before = j > 0
    said, said_before = int(quote[j]), int(quote[j - 1]) if before else -1
    mark = (
        1
        | (before and _ends_asking(joined, bounds[j - 1], bounds[j])) << 1
        # A passage after another of its own turn follows the same speaker.
        | (before and said_before != said and speakers[said_before].lower() != speakers[said].lower()) << 2
        | (j + 1 < ps.n and _ends_asking(joined, bounds[j + 1], bounds[j + 2])) << 3
        | (joined.find(_IMAGE, bounds[j], bounds[j + 1]) >= 0) << 4
    )
    kept.marks[j] = mark
    return mark
