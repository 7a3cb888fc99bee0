"""Episodes' remembered turns prepared once per process, and term counts from an inverted index.

Scoring a question against the candidate episodes needs each episode's key
quotes parsed, its long turns split into passages (runtime.passages), every
passage lowered, and how often each asked-for term occurs in each passage.
Done on every call, that work is linear in the text of every candidate: for a
user with two thousand turns of ~1,000 tokens (every episode a candidate) it
was about a second per recall, almost all of it reading, splitting and
scanning text that no question changes. Reading the quotes back from the
store is itself most of that (tens of MB per call): the search therefore asks
the store only for the episodes' ids and small columns, and for the quotes of
episodes not prepared yet.

So each episode is prepared once (`EpisodeTexts.prepared`) and the words of
its passages go into one inverted index: word -> the passages holding it, with
counts. A question's counts over the candidate passages then come from the
postings of the words its terms match (`term_counts`), not from the text.

A term counts in a passage exactly as a regex pass over the lowered text
would count it (`\\b(?:(t1)[a-z0-9]*|(t2)\\b|...)`): each run of word
characters is one word, a form of four or more characters matches a word it
starts, a shorter form only the whole word, and a word counts once, for the
first group that matches it.

Episodes are immutable in the hot store (an episode row is inserted once and
only deleted), and an episode id names one log event, so a prepared episode
is keyed by (database, episode id). What a reader may see is never decided
here: only episodes the candidate query returned for the principal are asked
for, and prepared text of a deleted episode is simply never asked for again.
"""

from __future__ import annotations

import gc
import re
import sqlite3
import threading
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
from tiermem.runtime import passage_compiled as compiled
from tiermem.runtime.hotstore import erasure_mark
from tiermem.runtime.passage_blocks import BlockIndex, postings_of
from tiermem.runtime.passage_columns import JoinedTexts, PassageColumns, WordNumbers, dedup_words

from tiermem.attachments import split_described
from tiermem.dates import anchor_relative_dates
from tiermem.ids import parse_ts

_RUN = re.compile(r"\w+")
PREFIX_MIN = 4  # forms of this length or more match as prefixes (as the search always matched them)
# Bounds of the per-process cache: past one, everything prepared is dropped and prepared again
# (MAX_PASSAGES bounds the indexed passages and, apart, the indexed headers: one per episode).
MAX_PASSAGES = 1_000_000
MAX_CHARS = 200_000_000
# Episodes with more passage text than this are indexed; shorter ones are counted per question (`TermMatcher`).
INDEX_CHARS = 2_000
# Preparing at least this many passages in one call ends with a full garbage collection (`settle`):
# about a tenth of a second of preparing, to which the collection adds at most a few tens of ms.
SETTLE_PASSAGES = 2_000


@dataclass
class Prepared:
    """One episode's quotes and passages, ready for scoring (shared: callers copy what they return)."""

    quotes: list[Any]
    passages: PassageColumns
    lowered: JoinedTexts  # each passage's text, lowered
    spaces: np.ndarray  # spaces in each lowered passage (its length in words is this + 1)
    quote_of: np.ndarray  # each passage's position in `quotes`
    quote_spaces: list[int]  # spaces in each quote's whole lowered text ("" without text)
    event_ids: frozenset[str]  # the turns its quotes cite
    speakers: dict[str, np.ndarray]  # each speaker (lowered) -> their passages
    start: int  # its first passage's id in the index (-1: not indexed)
    block: int = -1  # its first block's id (runtime.passage_blocks; -1: not indexed)
    block_by: BlockIndex | None = None  # the block numbering it is in
    name: str | None = None  # the episode's name when it was prepared
    head: int = -1  # its header's (name and summary) id in the index
    head_spaces: int = 0  # spaces in the lowered header (its length in words is this + 1)
    # Per pattern: the passages it is found in; and, under a key no pattern has (a NUL first), the
    # passages' layout bits for a question pattern (runtime.passage_layout's `packed`).
    flags: dict[str, np.ndarray] = field(default_factory=dict)
    # The passages' words for the near-duplicate check (runtime.passage_columns): each passage's
    # numbers, ascending, at dedup_ids[dedup_at[j]:dedup_at[j + 1]].
    # None until asked for, on a short episode (EpisodeTexts.dedup).
    dedup_ids: np.ndarray | None = None
    dedup_at: np.ndarray | None = None
    dedup_by: WordNumbers | None = None  # the vocabulary they are numbered in
    # (passage, its attachments' descriptions, lowered) for the passages that have any: scored at a
    # weight of their own, and only these are visited per question.
    described: list[tuple[int, str]] = field(default_factory=list)
    # Each passage's turn's length in words plus one per passage (the BM25 length of its passages).
    turn_words: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # Whether each passage is the whole of its turn (a turn not split into passages).
    whole_turn: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # Each quote's speaker, lowered ("" without one).
    quote_speakers: list[str] = field(default_factory=list)
    # (passage, the date it was said) -> the relative dates it contains, resolved: when asked.
    anchors: dict[tuple[int, Any], list[tuple[str, str]]] = field(default_factory=dict)
    # When the episode started (what its passages' relative dates are resolved against), and
    # those of its passages that have any, resolved when it was prepared (passage -> them).
    said_ts: str | None = None
    said_anchors: dict[int, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    def found(self, pattern: re.Pattern[str]) -> np.ndarray:
        """Which passages `pattern` is found in (kept per pattern: the patterns are the search's own)."""
        got = self.flags.get(pattern.pattern)
        if got is None:
            got = self.flags[pattern.pattern] = np.array(
                [pattern.search(t) is not None for t in self.lowered], dtype=bool
            )
        return got


def _prepare(raw: str | None) -> tuple[list[Any], PassageColumns, list[str], list[int], frozenset[str]]:
    quotes = orjson.loads(raw or "[]")
    passages = PassageColumns(quotes)
    lowered = [t.lower() for t in passages.texts]
    quote_spaces = [str(q.get("text", "")).lower().count(" ") for q in quotes]
    ids = frozenset(str(q["event_id"]) for q in quotes if isinstance(q, dict) and q.get("event_id"))
    return quotes, passages, lowered, quote_spaces, ids


def settle(added: int) -> None:
    """After preparing many passages at once, one full garbage collection, on this call.

    Everything prepared stays, so the collector's next full pass (due once the
    objects that survived its young passes reach a quarter of the long-lived
    ones) would walk it all on whichever later search triggers it: right
    after a long conversation's first recall (a second of preparing) that was
    the next few questions, each otherwise a few milliseconds. Collected
    here, the count of long-lived objects includes what was prepared, and
    the next full pass is hundreds of searches away. Not when the application
    turned the collector off.
    """
    if added >= SETTLE_PASSAGES and gc.isenabled():
        gc.collect()


def _anchor(entry: Prepared, start: str | None) -> None:
    """Resolve the relative dates of the entry's passages against its start, once: a search shows
    passages with their episode's start as the date they were said (about 12 us a passage, which
    was most of a new result's cost when done per question)."""
    try:
        at = parse_ts(start) if start else None
    except ValueError:
        return
    if at is None:
        return
    entry.said_ts = start
    for j, text in enumerate(entry.passages.texts):
        found = anchor_relative_dates(text, at)
        if found:
            entry.said_anchors[j] = tuple(found)


class WordIndex:
    """An inverted index of lowered texts, each numbered as added: word -> texts holding it, with counts."""

    def __init__(self) -> None:
        self.word_ids: dict[str, int] = {}
        self.by_head: dict[str, list[str]] = {}  # a word's first PREFIX_MIN characters -> words
        self.postings: list[array[int]] = []  # per word id: text ids
        self.counts: list[array[int]] = []  # per word id: occurrences in those texts
        self.size = 0  # texts added

    def add(self, text: str) -> int:
        """Index one lowered text as the next text id (returned)."""
        return self.add_counted(Counter(_RUN.findall(text)))

    def add_counted(self, words: Counter[str]) -> int:
        """Index one text, given as its words' counts, as the next text id (returned)."""
        pid = self.size
        for word, n in words.items():
            wid = self.word_ids.get(word)
            if wid is None:
                wid = self.word_ids[word] = len(self.postings)
                self.postings.append(array("q"))
                self.counts.append(array("q"))
                if len(word) >= PREFIX_MIN:
                    self.by_head.setdefault(word[:PREFIX_MIN], []).append(word)
            self.postings[wid].append(pid)
            self.counts[wid].append(n)
        self.size += 1
        return pid

    def matching(self, form: str) -> list[int]:
        """Ids of the indexed words `form` matches (a prefix of four or more characters, else whole)."""
        if len(form) < PREFIX_MIN:
            wid = self.word_ids.get(form)
            return [] if wid is None else [wid]
        return [self.word_ids[w] for w in self.by_head.get(form[:PREFIX_MIN], ()) if w.startswith(form)]

    def counts_in(
        self,
        starts: np.ndarray,
        groups: Sequence[Sequence[str]],
        sizes: np.ndarray,
        indexed: list[int],
    ) -> np.ndarray:
        """(`sizes` summed, groups): counts from the postings of the words the groups match.

        Row blocks follow `sizes`; block `indexed[i]` is the texts `starts[i]`,
        `starts[i] + 1`, ... (the other blocks stay zero).
        """
        total, n_groups = int(sizes.sum()), len(groups)
        group_of: dict[int, int] = {}
        for g, forms in enumerate(groups):
            for form in forms:
                for wid in self.matching(form):
                    group_of.setdefault(wid, g)  # a word counts for the first group matching it
        if not group_of:
            return np.zeros((total, n_groups))
        wids = list(group_of)
        # Each posting's text among the blocks': blocks are ranges of text ids.
        chosen = np.array(indexed, dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))[chosen]
        order = np.argsort(starts, kind="stable")
        s_starts, s_sizes, s_offsets = starts[order], sizes[chosen][order], offsets[order]
        if 2 * int(s_sizes.sum()) < self.size and bool(np.all(s_starts[1:] > s_starts[:-1])):
            # The blocks are a small part of the index (other episodes, other agents): only the
            # postings inside them are read, each word's found by binary search of its block ranges.
            if compiled.active():
                ranges = (s_starts, s_sizes, s_offsets)
                words = [(w, group_of[w]) for w in wids]
                return compiled.inside_counts(self.postings, self.counts, words, ranges, total, n_groups)
            position, labels, counts = self._inside(wids, group_of, s_starts, s_sizes, s_offsets)
            flat = np.bincount(position * n_groups + labels, weights=counts, minlength=total * n_groups)
            return flat.reshape(total, n_groups)
        size = self.size  # texts indexed meanwhile (another thread) are left out
        pids, counts = postings_of(self, wids, size)
        lengths = np.array([bisect_left(self.postings[w], size) for w in wids], dtype=np.int64)
        labels = np.repeat(np.array([group_of[w] for w in wids], dtype=np.int64), lengths)
        # Each text id's row among the blocks (-1: in none), then each posting's row by one lookup.
        inside = int(s_sizes.sum())
        step = np.arange(inside, dtype=np.int64) - np.repeat(np.cumsum(s_sizes) - s_sizes, s_sizes)
        row_of = np.full(size, -1, dtype=np.int64)
        row_of[np.repeat(s_starts, s_sizes) + step] = np.repeat(s_offsets, s_sizes) + step
        position = row_of[pids]
        ok = position >= 0
        flat = np.bincount(
            position[ok] * n_groups + labels[ok], weights=counts[ok], minlength=total * n_groups
        )
        return flat.reshape(total, n_groups)

    def _inside(
        self,
        wids: list[int],
        group_of: dict[int, int],
        starts: np.ndarray,
        sizes: np.ndarray,
        offsets: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row, group, count) of every posting of `wids` inside the blocks (sorted, disjoint ranges).

        Word by word, each word's postings in text order: the order of the
        full pass, so the same sums.
        """
        positions, labels, counts = [], [], []
        for w in wids:
            # Copied: a view would stop another thread from indexing (an array with a view cannot grow).
            pids, times = postings_of(self, [w], self.size)
            lo = np.searchsorted(pids, starts)
            n = np.searchsorted(pids, starts + sizes) - lo
            total = int(n.sum())
            if not total:
                continue
            block = np.repeat(np.arange(len(starts), dtype=np.int64), n)
            at = np.arange(total, dtype=np.int64) + np.repeat(lo - (np.cumsum(n) - n), n)
            positions.append(offsets[block] + pids[at] - starts[block])
            counts.append(times[at])
            labels.append(np.full(total, group_of[w], dtype=np.int64))
        if not positions:
            nothing = np.zeros(0, dtype=np.int64)
            return nothing, nothing, nothing
        return np.concatenate(positions), np.concatenate(labels), np.concatenate(counts)


class EpisodeTexts:
    """The per-process cache of prepared episodes and the inverted indexes over their passages and headers."""

    def __init__(self) -> None:
        # Other per-process caches of episode text (runtime.fts_rows), told the store's erasure
        # mark at every read as this cache checks it: each drops what it read before an erasure.
        self.erasure_checks: list[Callable[[str, int], None]] = []
        # The same caches, told when this process has just erased something in a store:
        # each drops what it holds of that store at once, not at the next read of it (which may
        # never come): `erasure_done`.
        self.erasure_drops: list[Callable[[str], None]] = []
        # Held by whoever prepares (adds to the indexes, or clears them): an episode's passages are
        # numbered as one run (its `start` onwards), so two threads preparing at once would interleave
        # their ids. Searches only read, and do not take it.
        self.lock = threading.RLock()
        self.clear()

    def clear(self) -> None:
        # Every word met by `prefix`, numbered in the order met: never renumbered, so a prefix
        # taken once holds for every later search (until everything is dropped, prefixes too).
        self.met: dict[str, int] = {}
        # The prepared passages' words, numbered for the near-duplicate check (runtime.passage_columns).
        self.numbers = WordNumbers()
        self.entries: dict[tuple[str, str], Prepared] = {}
        self.words = WordIndex()  # the passages of long episodes
        # Every episode's name and summary: apart, so a header's counts do not walk the postings of
        # thousands of passages.
        self.heads = WordIndex()
        # The indexed passages' blocks and, per query form, each block's largest count (runtime.passage_blocks).
        self.blocks = BlockIndex(self.words)
        self.chars = 0
        # The databases with long episodes prepared (indexed): where ranking them per word pays
        # (runtime.fts_ranks).
        self.long_dbs: set[str] = set()
        self.erased: dict[str, int] = {}  # database -> its erasure mark when its entries were read

    def erasure_done(self, db: str) -> None:
        """This process has just committed an erasure in `db` (runtime.sqlite_apply): the prepared
        texts go (all of them, as on an erasure found by a read), and every cache drops that store."""
        with self.lock:
            self.clear()
            for drop in self.erasure_drops:
                drop(db)

    @property
    def passages(self) -> int:
        return self.words.size

    def prepared(
        self,
        conn: sqlite3.Connection,
        db: str,
        episode_ids: Sequence[str],
        names: Sequence[str] | None = None,
    ) -> list[Prepared]:
        """The prepared episodes, in the order asked; the missing ones read in one query.

        `names` (the episodes' names as just read) also re-reads an episode
        whose name is not the one it was prepared with: a row that was deleted
        and inserted again with other content is never scored with the old text.
        """
        with self.lock:
            if self.passages > MAX_PASSAGES or self.heads.size > MAX_PASSAGES or self.chars > MAX_CHARS:
                self.clear()  # before looking: every episode asked for is then prepared again
            # An erasure since this store's entries were read: everything goes (erasures are rare), so
            # that no erased text stays in this process, served or not.
            mark = erasure_mark(conn)
            if self.erased.get(db, mark) != mark:
                self.clear()
            self.erased[db] = mark
            for check in self.erasure_checks:
                check(db, mark)
            stale = {
                e
                for e, name in zip(episode_ids, names or (), strict=False)
                if (db, e) in self.entries and self.entries[(db, e)].name != name
            }
            missing = [e for e in dict.fromkeys(episode_ids) if (db, e) not in self.entries or e in stale]
            if missing:
                marks = ",".join("?" * len(missing))
                raws = {
                    r[0]: r[1:]
                    for r in conn.execute(
                        "SELECT episode_id, key_quotes, name, summary, start_ts FROM episodes"
                        f" WHERE episode_id IN ({marks})",
                        missing,
                    ).fetchall()
                }
                named = dict(zip(episode_ids, names or (), strict=False))
                added = 0
                for episode_id in missing:
                    raw, name, summary, said = raws.get(episode_id, (None, None, None, None))
                    entry = self._add(raw)
                    added += entry.passages.n
                    if entry.start >= 0:  # long: its passages are shown again and again
                        _anchor(entry, said)
                        self.long_dbs.add(db)
                    # The header as the searches score it: name and summary, lowered, one word run each.
                    head = f"{name or ''} {summary or ''}".lower()
                    entry.head, entry.head_spaces = self.heads.add(head), head.count(" ")
                    entry.name = named.get(episode_id)
                    self.entries[(db, episode_id)] = entry
                settle(added)
            return [self.entries[(db, e)] for e in episode_ids]

    def _add(self, raw: str | None) -> Prepared:
        quotes, passages, lowered, quote_spaces, ids = _prepare(raw)
        if sum(len(t) for t in lowered) <= INDEX_CHARS:
            # Short: counting its words per question costs less than indexing it (most episodes, once seen).
            return self._prepared(quotes, passages, lowered, quote_spaces, ids, -1, None)
        start = self.words.size
        counted = [Counter(_RUN.findall(text)) for text in lowered]
        # Its blocks numbered before its passages enter the index: a search in another thread that
        # reads the postings meanwhile finds every passage in them already in a block.
        block = self.blocks.add(len(counted))
        for counts in counted:
            self.words.add_counted(counts)
        self.chars += len(raw or "")
        words = [dedup_words(t, c.keys()) for t, c in zip(lowered, counted, strict=True)]
        entry = self._prepared(quotes, passages, lowered, quote_spaces, ids, start, words)
        entry.block, entry.block_by = block, self.blocks
        return entry

    def _prepared(
        self,
        quotes: list[Any],
        passages: PassageColumns,
        lowered: list[str],
        quote_spaces: list[int],
        ids: frozenset[str],
        start: int,
        words: list[Any] | None,
    ) -> Prepared:
        spaces = np.array([t.count(" ") for t in lowered], dtype=np.int64)
        quote_of = passages.quote
        lengths = spaces.astype(np.float64) + 2
        # Short episodes (most, in a large archive) are numbered when first shown (`dedup`).
        dedup_ids, dedup_at = self.numbers.sets(words) if words is not None else (None, None)
        said_by: dict[str, list[int]] = {}
        lowered_speakers = [s.lower() for s in passages.quote_speakers]
        for j, q in enumerate(quote_of.tolist()):
            said_by.setdefault(lowered_speakers[q], []).append(j)
        return Prepared(
            quotes=quotes,
            passages=passages,
            lowered=JoinedTexts(lowered),
            spaces=spaces,
            quote_of=quote_of,
            turn_words=np.bincount(quote_of, weights=lengths)[quote_of] if len(passages) else lengths,
            whole_turn=np.bincount(quote_of)[quote_of] == 1 if len(passages) else np.zeros(0, dtype=bool),
            quote_spaces=quote_spaces,
            event_ids=ids,
            speakers={name: np.array(at, dtype=np.int64) for name, at in said_by.items()},
            start=start,
            dedup_ids=dedup_ids,
            dedup_at=dedup_at,
            dedup_by=self.numbers if words is not None else None,
            described=[(j, d) for j, t in enumerate(lowered) if "[" in t and (d := split_described(t)[1])],
            quote_speakers=[
                str(q.get("speaker") or "").lower() if isinstance(q, dict) else "" for q in quotes
            ],
        )

    def dedup(self, entry: Prepared, numbers: WordNumbers) -> tuple[np.ndarray, np.ndarray]:
        """The entry's passages' words for the near-duplicate check, numbered in `numbers` (numbered
        once: long episodes' when they were prepared, a short one's when it is first shown).

        One search numbers all its sets in the one vocabulary it started with (`numbers`): if
        another thread drops everything meanwhile (a new vocabulary), an entry numbered in
        either is numbered again in that one, so no two sets it compares mean different words
        by the same number.
        """
        if entry.dedup_by is numbers and entry.dedup_ids is not None and entry.dedup_at is not None:
            return entry.dedup_ids, entry.dedup_at
        ids, at = numbers.sets([dedup_words(t, None) for t in entry.lowered])
        if numbers is self.numbers:
            entry.dedup_ids, entry.dedup_at, entry.dedup_by = ids, at, numbers
        return ids, at

    def prefix(self, key: frozenset[str], length: int) -> tuple[str, ...]:
        """The first `length` words of `key` in one fixed order of all words: the last met first.

        Any one order serves the near-duplicate check; words met late tend to
        be rare (the common ones are met in the first texts), and rare words
        file few sets under the same word.
        """
        met = self.met
        for word in key:
            if word not in met:
                met[word] = len(met)
        return tuple(sorted(key, key=met.__getitem__, reverse=True)[:length])

    def term_counts(
        self, entries: Sequence[Prepared], groups: Sequence[Sequence[str]], matcher: TermMatcher | None
    ) -> np.ndarray:
        """(passages of `entries` in order, groups): how often each group's forms occur in each passage.

        `matcher` (the search's, for these groups) counts the short episodes, which are not indexed.
        """
        sizes = np.array([e.passages.n for e in entries], dtype=np.int64)
        total = int(sizes.sum())
        n_groups = len(groups)
        out = np.zeros((total, n_groups))
        if not total or not n_groups:
            return out
        forms = tuple(f for g in groups for f in g)
        at = 0
        for e in entries:
            if e.start < 0 and matcher is not None:
                for j, text in enumerate(e.lowered):
                    # Every match contains one of the forms as it is: a text holding none needs no pass.
                    if any(f in text for f in forms):
                        out[at + j] = matcher.counts(text)
            at += e.passages.n
        indexed = [k for k, e in enumerate(entries) if e.start >= 0]
        if indexed:
            starts = np.array([entries[k].start for k in indexed], dtype=np.int64)
            out += self.words.counts_in(starts, groups, sizes, indexed)
        return out

    def head_counts(self, entries: Sequence[Prepared], groups: Sequence[Sequence[str]]) -> np.ndarray:
        """(entries, groups): how often each group's forms occur in each entry's name and summary."""
        if not entries or not groups:
            return np.zeros((len(entries), len(groups)))
        # Each header once (an episode asked for twice gets its counts twice, not once and zeros).
        heads, back = np.unique(np.array([e.head for e in entries], dtype=np.int64), return_inverse=True)
        ones = np.ones(len(heads), dtype=np.int64)
        return self.heads.counts_in(heads, groups, ones, list(range(len(heads))))[back]


TEXTS = EpisodeTexts()


class TermMatcher:
    """Counts of term groups in a text, as a regex `\\b(?:(g1 forms)|(g2 forms)|...)` would count them.

    Each run of word characters is one word; a form of four or more
    characters matches a word it starts, a shorter one only the whole word,
    and a word counts once, for the first group with a matching form. No
    pattern is compiled: compiling one per question (its alternatives are the
    question's words) cost about a millisecond a search, more than counting.
    """

    def __init__(self, groups: Sequence[Sequence[str]]) -> None:
        self.groups = [tuple(g) for g in groups]
        self._group_of: dict[str, int] = {}  # word -> its group (-1: none), as met
        # A word can only match a short form it equals or a long form sharing its first
        # PREFIX_MIN characters: most words of a text are ruled out by two set lookups.
        forms = [f for g in self.groups for f in g]
        self._whole = frozenset(f for f in forms if len(f) < PREFIX_MIN)
        self._heads = frozenset(f[:PREFIX_MIN] for f in forms if len(f) >= PREFIX_MIN)

    def group_of(self, word: str) -> int:
        g = self._group_of.get(word)
        if g is None:
            if word not in self._whole and word[:PREFIX_MIN] not in self._heads:
                self._group_of[word] = -1
                return -1
            g = next(
                (
                    k
                    for k, forms in enumerate(self.groups)
                    if any(word.startswith(f) if len(f) >= PREFIX_MIN else word == f for f in forms)
                ),
                -1,
            )
            self._group_of[word] = g
        return g

    def counts(self, text: str) -> list[int]:
        out = [0] * len(self.groups)
        for word in _RUN.findall(text):
            g = self.group_of(word)
            if g >= 0:
                out[g] += 1
        return out
