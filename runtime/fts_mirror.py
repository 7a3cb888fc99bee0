"""The episode index's word counts, copied once per process, so that a new word's BM25 needs no query.

A question's words are ranked phrase by phrase (runtime.fts_ranks), and
each phrase met for the first time since the episodes last changed was one
FTS5 query: 0.3–0.8 ms a word on a long conversation (the index walks every
position of the word in every document, twice, and reads every document's
length), which made the slowest questions those with words never asked.

This module keeps, per store, what FTS5's `bm25()` reads: each document's
length in tokens, the table's row count and total tokens (its averages
record), and per token the documents holding it with a count per column.
A phrase's ranks are then worked out here with FTS5's own formula and in its
order of operations (`ranks`), so they are bit for bit the index's (checked
on every row of long stores in tests/test_fts_mirror.py):

* a document's weighted frequency is the sum of its column weights, one
  instance after another in column order (FTS5 visits the instances in
  position order), from zero;
* `idf = log((rows - hits + 0.5) / (hits + 0.5))`, at least 1e-6, where hits
  counts the documents holding the phrase;
* `-(idf * (f * (k1 + 1)) / (f + k1 * (1 - b + b * D / avgdl)))`, with D the
  document's tokens in all columns and avgdl the table's tokens per row.

The tokens are the table's own: `episodes_fts` uses FTS5's default
tokenizer (unicode61), which on ASCII text takes each run of letters and
digits, lowered. A run holding other characters (accents, curly quotes,
emoji) is handed to that same tokenizer in a private in-memory table, so no
rule of it is copied here. Every document's token count per column is then
checked against the index's own (`episodes_fts_docsize`), and the totals
against its averages record: on any difference nothing is kept and the
index is asked, as it is for a table defined otherwise.

What is kept is filed under the version of the kept ranks (runtime.fts_ranks:
the store, its schema cookie, the newest episode rowid, the count of
deletions and updates). Episodes only added (the count unchanged, the newest
rowid higher) are read and appended; any other change reads everything
again. Like the other copies of episode text, an erasure drops it at once
(`EpisodeTexts.erasure_checks`), with the tokenizer's runs (of any store),
and it is bounded by what it costs to read and to hold (`MAX_TOKENS`, `MAX_BYTES`): past
either, nothing is kept and the index is asked, as before, without reading the store again until
it has fewer tokens.
"""

from __future__ import annotations

import math
import re
import sqlite3
import sys
import threading
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
from tiermem.runtime import episode_index
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import erasure_mark

# The one table definition copied here (runtime.episode_index): another tokenizer or column list is
# left to the index.
DEFINITION, COLUMNS = episode_index.DEFINITION, episode_index.COLUMNS
K1, B = 1.2, 0.75  # bm25()'s constants
MAX_TOKEN = 32768  # FTS5 keeps at most this many bytes of a token
# A store with more tokens than this is not copied: reading one takes about 0.2 us a token on a
# conversation's text (a second for this many), more where most words are new.
MAX_TOKENS = 5_000_000
# Nor one whose copy would hold more than this many bytes (`Mirror.size`): a posting takes 8, a
# distinct token its string and about `TOKEN_BYTES`, a distinct head its string and `HEAD_BYTES`.
# Text of words each met once (identifiers, text without spaces) reaches it at two to four hundred
# thousand tokens, about a second's read.
MAX_BYTES = 100_000_000
TOKEN_BYTES = 160  # its postings array and its entries in `postings` and its head's list
HEAD_BYTES = 160  # a head's list and its entry in `by_head`
# A phrase whose weighted frequencies would take more than this many additions is left to the index.
MAX_ADDITIONS = 4_000_000
PREFIX_HEAD = 4  # tokens are filed by their first characters: prefixes this long are looked up there
COUNT_BITS = 31  # a posting's instances, below 2**30 (a document's tokens are)

# ASCII text: every character but a letter or digit separates tokens, letters are lowered.
_ASCII = str.maketrans(
    {i: " " for i in range(128) if not chr(i).isalnum()} | {i: i + 32 for i in range(ord("A"), ord("Z") + 1)}
)
# Other text: runs between ASCII separators; a run with other characters goes to the tokenizer.
_RUN = re.compile(r"[^\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f]+")


class Unsure(Exception):
    """The copy would not be the index's: nothing is kept, the index is asked."""


class TooCostly(Unsure):
    """The copy would cost more than `MAX_BYTES`: the index is asked until the store has fewer
    tokens than were read (`tokens`) when that was found."""

    def __init__(self, tokens: int) -> None:
        super().__init__(f"more than {MAX_BYTES} bytes to keep after {tokens} tokens")
        self.tokens = tokens


def varints(blob: bytes) -> list[int]:
    """SQLite's variable-length integers, one after another (FTS5's sizes and averages records)."""
    out, i, n = [], 0, len(blob)
    while i < n:
        value = 0
        for k in range(9):
            byte = blob[i]
            i += 1
            if k == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        out.append(value)
    return out


class _Tokenizer:
    """FTS5's default tokenizer over runs of non-ASCII text, in a private in-memory table.

    The runs tokenized are kept (the same words recur), bounded by their characters (a run can be
    a paragraph of text without spaces), and dropped with the table's connection when the store
    erases something (`forget`): they are episode text like the copy's tokens.

    Its callers hold their own locks (this module's, runtime.archive_stats'), not each other's, and
    its table is written and read per call: its own lock is held around every use of the table and
    the runs, or two calls would number their rows alike and one would close the table under another."""

    MAX_CHARS = 1_000_000

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.kept: dict[str, tuple[str, ...]] = {}
        self.chars = 0  # the kept runs' characters
        self.conn: sqlite3.Connection | None = None

    def forget(self) -> None:
        """Drop every run kept, and the private table with the pages that held them."""
        with self.lock:
            self.kept, self.chars = {}, 0
            if self.conn is not None:
                self.conn.close()
                self.conn = None

    def tokens(self, runs: set[str]) -> dict[str, tuple[str, ...]]:
        with self.lock:
            return self._tokens(runs)

    def _tokens(self, runs: set[str]) -> dict[str, tuple[str, ...]]:
        """(Under the lock.)"""
        out = {r: self.kept[r] for r in runs if r in self.kept}
        missing = [r for r in runs if r not in out]
        if not missing:
            return out
        if self.conn is None:
            self.conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            self.conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
            self.conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
        conn = self.conn
        conn.executemany("INSERT INTO t (rowid, x) VALUES (?, ?)", enumerate(missing, 1))
        found: dict[int, list[tuple[int, str]]] = {}
        for term, doc, offset in conn.execute("SELECT term, doc, offset FROM v"):
            found.setdefault(doc, []).append((offset, term))
        conn.execute("DELETE FROM t")
        new = {run: tuple(t for _, t in sorted(found.get(k, []))) for k, run in enumerate(missing, 1)}
        out.update(new)
        size = sum(map(len, missing))
        if self.chars + size > self.MAX_CHARS:
            self.kept, self.chars = {}, 0
        if size <= self.MAX_CHARS:
            self.kept.update(new)
            self.chars += size
        return out


_TOKENIZER = _Tokenizer()


def tokens(text: str | None) -> list[str]:
    """The tokens FTS5's default tokenizer makes of `text`, in order."""
    words = _words(text)
    if text and len(text) > MAX_TOKEN and max(map(len, words), default=0) > MAX_TOKEN:
        return _kept_bytes(words)
    return words


def counted(text: str | None) -> tuple[Counter[str], int]:
    """How often each token of `text` occurs (`tokens`), and how many tokens it has."""
    words = _words(text)
    found = Counter(words)
    # Looked for among the distinct tokens: a long text has a few thousand, and many more words.
    if text and len(text) > MAX_TOKEN and max(map(len, found), default=0) > MAX_TOKEN:
        found = Counter(_kept_bytes(words))
    return found, len(words)


def _kept_bytes(words: list[str]) -> list[str]:
    """The tokens as the index keeps them: at most `MAX_TOKEN` bytes (ASCII: a byte a character;
    the others come from the tokenizer's own index, already cut)."""
    return [w[:MAX_TOKEN] if w.isascii() else w for w in words]


def _words(text: str | None) -> list[str]:
    if not text:
        return []
    if text.isascii():
        words = text.translate(_ASCII).split()
    else:
        runs = _RUN.findall(text)
        other = _TOKENIZER.tokens({r for r in runs if not r.isascii()})
        words = []
        for run in runs:
            if run.isascii():
                words.append(run.lower())
            else:
                words.extend(other[run])
    return words


class Mirror:
    """One store's copy: documents in rowid order, and per token its postings (document, column, count)."""

    def __init__(self, base: tuple[Any, ...], mark: int) -> None:
        self.base = base  # (database, schema cookie, change count): what appending keeps
        self.mark = mark  # the store's erasure mark when it was read
        self.newest = 0  # the newest rowid read
        self.rowids = array("q")
        self.lengths = array("q")  # each document's tokens in all columns
        self.column_tokens = [0] * COLUMNS
        # Per token: its postings, each (document * COLUMNS + column) << COUNT_BITS | instances there,
        # ascending (one number a posting: one append while reading).
        self.postings: dict[str, array[int]] = {}
        self.by_head: dict[str, list[str]] = {}
        self.doc_counts: dict[str, int] = {}  # per token, once asked: the documents holding it
        self.arrays: tuple[np.ndarray, np.ndarray] | None = None  # `_arrays`
        self.n_row = 0
        self.n_token = 0
        self.size = 0  # about how many bytes the postings and tokens take (`MAX_BYTES`)

    def add(self, conn: sqlite3.Connection, after: int, upto: int) -> None:
        """Read the documents with rowids in (after, upto], then check the totals against the index."""
        rows = index_documents(conn, after, upto)
        for row in rows:
            sizes = varints(row[-1])
            if sum(sizes) >= 2**30:
                raise Unsure(f"rowid {row[0]}: too long to sum its weights exactly here")
            doc = len(self.rowids)
            total = 0
            for col, (found, n) in enumerate(document_tokens(row, sizes)):
                total += n
                self.column_tokens[col] += n
                self._file(doc * COLUMNS + col, found)
            self.rowids.append(int(row[0]))
            self.lengths.append(total)
            self.size += 16
            if self.size > MAX_BYTES:
                raise TooCostly(sum(self.column_tokens))
        if rows:
            self.doc_counts = {}  # counted before these documents: too few now
        self.newest = max(self.newest, upto)
        block = conn.execute("SELECT block FROM episodes_fts_data WHERE id = 1").fetchone()
        averages = varints(block[0]) if block else []
        if len(averages) != 1 + COLUMNS:  # a table never written to has an empty record
            raise Unsure("the index's averages record is not one of rows and each column's tokens")
        self.n_row, self.n_token = averages[0], sum(averages[1:])
        if self.n_token > MAX_TOKENS:
            raise Unsure("too many tokens to keep")
        if self.n_row != len(self.rowids) or averages[1:] != self.column_tokens:
            raise Unsure("the index's averages are not those of the documents read")

    def _file(self, code: int, words: Counter[str]) -> None:
        postings, shifted = self.postings, code << COUNT_BITS
        size = 8 * len(words)
        for word, n in words.items():
            found = postings.get(word)
            if found is None:
                found = postings[word] = array("q")
                head = word[:PREFIX_HEAD]
                listed = self.by_head.get(head)
                if listed is None:
                    listed = self.by_head[head] = []
                    size += HEAD_BYTES + sys.getsizeof(head)
                listed.append(word)
                size += TOKEN_BYTES + sys.getsizeof(word)
            found.append(shifted | n)
        self.size += size

    def matching(self, word: str, prefix: bool) -> list[str] | None:
        """The tokens a phrase of `word` matches (None: a prefix too short to look up, or a word
        longer than a token whose cut the index makes in bytes: left to the index)."""
        if len(word) > MAX_TOKEN // 4 and len(word.encode()) > MAX_TOKEN:
            if not word.isascii():
                return None
            word = word[:MAX_TOKEN]  # as the index cuts a query's token
        if not prefix:
            return [word] if word in self.postings else []
        if len(word) < PREFIX_HEAD:
            return None
        return [w for w in self.by_head.get(word[:PREFIX_HEAD], ()) if w.startswith(word)]

    def documents(self, word: str, prefix: bool) -> tuple[int, str] | None:
        """What fts5vocab says of a term: the documents holding each token it matches, summed, and
        the token when it matches exactly one ("" otherwise); None: a prefix too short to look up."""
        tokens = self.matching(word, prefix)
        if tokens is None:
            return None
        docs = 0
        for token in tokens:
            n = self.doc_counts.get(token)
            if n is None:
                # A token's postings are in document order, a document's columns together.
                docs_of = (np.frombuffer(self.postings[token], dtype=np.int64) >> COUNT_BITS) // COLUMNS
                n = self.doc_counts[token] = 1 + int(np.count_nonzero(docs_of[1:] != docs_of[:-1]))
            docs += n
        only = tokens[0] if prefix and len(tokens) == 1 else ""
        return docs, only

    def ranks(
        self, word: str, prefix: bool, weightings: Sequence[tuple[float, ...] | None]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(rowids ascending, one column of ranks per weighting) of the documents the phrase matches."""
        return self.ranks_of([(word, prefix)], weightings)[0]

    def ranks_of(
        self, asked: Sequence[tuple[str, bool]], weightings: Sequence[tuple[float, ...] | None]
    ) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """`ranks` of several phrases (word, prefix) worked out together: every step is the same per
        (phrase, document), only the arrays are shared (None for a phrase that cannot be looked up)."""
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(asked)
        found = [self.matching(word, prefix) for word, prefix in asked]
        served = [k for k, tokens in enumerate(found) if tokens is not None]
        listed = [(place, token) for place, k in enumerate(served) for token in found[k] or ()]
        if not listed:
            for k in served:
                out[k] = np.zeros(0, dtype=np.int64), np.zeros((0, len(weightings)))
            return out
        n_docs, m = len(self.rowids), len(served)
        postings = np.concatenate([np.frombuffer(self.postings[t], dtype=np.int64) for _, t in listed])
        sizes = [len(self.postings[t]) for _, t in listed]
        place = np.repeat(np.array([p for p, _ in listed], dtype=np.int64), sizes)
        # Each posting's cell: (phrase, document, column), phrase after phrase.
        codes = (postings >> COUNT_BITS) + place * (n_docs * COLUMNS)
        counts = postings & ((1 << COUNT_BITS) - 1)
        per = np.bincount(codes, weights=counts, minlength=m * n_docs * COLUMNS).reshape(m * n_docs, COLUMNS)
        hit = np.flatnonzero(np.bincount(codes // COLUMNS, minlength=m * n_docs))  # (phrase, document)
        per, phrase_of, doc = per[hit], hit // n_docs, hit % n_docs
        hits = np.bincount(phrase_of, minlength=m).tolist()
        idfs = []
        for n_hit in hits:
            idf = math.log((self.n_row - n_hit + 0.5) / (n_hit + 0.5))
            idfs.append(idf if idf > 0.0 else 1e-6)
        idf_of = np.array(idfs)[phrase_of]
        avgdl = float(self.n_token) / float(self.n_row)
        rowids, lengths = self._arrays()
        # As bm25() writes it: k1 * (1 - b + b * D / avgdl), left to right.
        norm = K1 * ((1 - B) + (B * lengths[doc]) / avgdl)
        values = np.zeros((len(hit), len(weightings)))
        for k, weights in enumerate(weightings):
            freq = _frequency(per, weights)
            if freq is None:
                return [None] * len(asked)
            values[:, k] = -1.0 * (0.0 + idf_of * ((freq * (K1 + 1.0)) / (freq + norm)))
        ids = rowids[doc]
        start = 0
        for n, k in enumerate(served):
            end = start + hits[n]
            out[k] = ids[start:end].copy(), values[start:end].copy()
            start = end
        return out

    def _arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(rowids, lengths as floats) as arrays, made again when documents were added."""
        if self.arrays is None or len(self.arrays[0]) != len(self.rowids):
            self.arrays = (np.array(self.rowids, dtype=np.int64), np.array(self.lengths, dtype=np.float64))
        return self.arrays


def _dyadic(w: float) -> bool:
    """Whether `w` is a multiple of 1/1024 below 2**13: a document's instances (below 2**30) times
    such weights sum, in any order, to multiples of 1/1024 below 2**43, exactly representable."""
    return abs(w) < 2**13 and w * 1024 == round(w * 1024)


def _frequency(per: np.ndarray, weights: tuple[float, ...] | None) -> np.ndarray | None:
    """Each document's weighted frequency: its instances' column weights added one at a time, in
    column order, from zero (None when that takes more than `MAX_ADDITIONS` additions)."""
    ws, exact, leading = _weights(weights)
    freq = per[:, :exact] @ leading if exact else np.zeros(len(per))
    for col in range(exact, COLUMNS):
        n = per[:, col]
        todo = np.flatnonzero(n)
        if not len(todo):
            continue
        freq = _add_times(freq, todo, n[todo].astype(np.int64), ws[col])
        if freq is None:
            return None
    return freq


_WEIGHTS: dict[tuple[float, ...] | None, tuple[list[float], int, np.ndarray]] = {}


def _weights(weights: tuple[float, ...] | None) -> tuple[list[float], int, np.ndarray]:
    """(each column's weight, how many leading columns are `_dyadic`, their weights as an array)."""
    found = _WEIGHTS.get(weights)
    if found is None:
        if len(_WEIGHTS) > 64:
            _WEIGHTS.clear()
        ws = [weights[c] if weights is not None and c < len(weights) else 1.0 for c in range(COLUMNS)]
        # The leading columns whose weights are `_dyadic`: every partial sum of them is exact, so
        # their sum is the same in any order.
        exact = 0
        while exact < COLUMNS and _dyadic(ws[exact]):
            exact += 1
        found = _WEIGHTS[weights] = (ws, exact, np.array(ws[:exact]))
    return found


_RUNNING: dict[float, np.ndarray] = {}  # weight -> 0, w, w + w, ...: its running sum from zero
# A weight's running sum is made at most this long (a document's instances of a word in a column,
# past it: the index is asked), and all of them together hold at most `MAX_RUNNING_ALL` numbers.
MAX_RUNNING = 500_000
MAX_RUNNING_ALL = 4_000_000


def _running(w: float, times: int) -> np.ndarray:
    """The running sum of `w` added one at a time from zero, at least `times` additions long."""
    kept = _RUNNING.get(w)
    if kept is None or len(kept) <= times:
        length = min(max(2 * times, 1024), MAX_RUNNING) + 1
        _RUNNING.pop(w, None)
        if sum(map(len, _RUNNING.values())) + length > MAX_RUNNING_ALL:
            _RUNNING.clear()
        kept = _RUNNING[w] = np.cumsum(np.concatenate(([0.0], np.full(length - 1, w))))
    return kept


def _add_times(freq: np.ndarray, rows: np.ndarray, times: np.ndarray, w: float) -> np.ndarray | None:
    """`freq` with `w` added `times[i]` times, one addition after another, to `freq[rows[i]]`."""
    if int(times.max()) > MAX_RUNNING:
        return None
    out = freq.copy()
    start = freq[rows]
    zero = start == 0.0
    if zero.any():  # mostly: no instance in the columns before
        out[rows[zero]] = _running(w, int(times.max()))[times[zero]]
    if zero.all():
        return out
    rows, times, start = rows[~zero], times[~zero], start[~zero]
    width = int(times.max())
    if width * len(rows) > MAX_ADDITIONS:
        return None
    # One row per document: its sum so far, then the weight as many times as it has instances
    # there, then zeros (adding zero changes no sum); the running sum along the row adds them
    # one at a time, as bm25() does.
    steps = np.where(np.arange(width)[None, :] < times[:, None], w, 0.0)
    out[rows] = np.cumsum(np.concatenate([start[:, None], steps], axis=1), axis=1)[:, -1]
    return out


class _Kept:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.mirror: Mirror | None = None
        self.version: tuple[Any, ...] | None = None  # the version `mirror` (or its absence) is for
        self.marks: dict[str, int] = {}  # per store, the erasure mark last seen
        self.too_costly: dict[str, int] = {}  # per store, the tokens read when `TooCostly` was found

    def erasure_seen(self, db: str, mark: int) -> None:
        """A read of `db` found its erasure mark at `mark`: a copy read before an erasure there goes."""
        with self.lock:
            self.mark_seen(db, mark)
            if self.mirror is not None and self.mirror.base[0] == db and self.mirror.mark != mark:
                self.mirror, self.version = None, None

    def mark_seen(self, db: str, mark: int) -> None:
        """(Under the lock.) The tokenizer's runs may hold any store's text: any erasure drops them."""
        if self.marks.get(db, mark) != mark:
            _TOKENIZER.forget()
        self.marks[db] = mark

    def erased(self, db: str) -> None:
        """This process has just erased something in `db`: its copy goes, and the tokenizer's runs."""
        with self.lock:
            _TOKENIZER.forget()
            if self.mirror is not None and self.mirror.base[0] == db:
                self.mirror, self.version = None, None


_KEPT = _Kept()
TEXTS.erasure_checks.append(_KEPT.erasure_seen)
TEXTS.erasure_drops.append(_KEPT.erased)


def index_documents(conn: sqlite3.Connection, after: int, upto: int) -> list[Any]:
    """The index's documents with rowids in (after, upto], by rowid: (id, each of its columns, the
    blob of its token counts per column)."""
    columns = ", ".join(f"c.c{col}" for col in range(COLUMNS))
    return conn.execute(
        f"SELECT c.id, {columns}, d.sz FROM episodes_fts_content c"
        " JOIN episodes_fts_docsize d ON d.id = c.id WHERE c.id > ? AND c.id <= ? ORDER BY c.id",
        [after, upto],
    ).fetchall()


def document_tokens(row: Any, sizes: list[int]) -> list[tuple[Counter[str], int]]:
    """Each column's tokens of an index document (`index_documents`) as FTS5 made them, with their
    count, each count checked against the index's own (`sizes`, decoded): Unsure on a difference."""
    columns = []
    for col in range(COLUMNS):
        found, n = counted(row[1 + col])
        if n != (sizes[col] if col < len(sizes) else -1):
            raise Unsure(f"rowid {row[0]}: column {col} has {n} tokens here")
        columns.append((found, n))
    return columns


def defined_here(conn: sqlite3.Connection) -> bool:
    """Whether the store's episode index is defined as the one this copy reads (`DEFINITION`)."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'episodes_fts'").fetchone()
    return row is not None and row[0] == DEFINITION


def mirror(conn: sqlite3.Connection, version: tuple[Any, ...]) -> Mirror | None:
    """The copy of the index at `version` (fts_ranks.kept_version), read or brought up to date now;
    None when it cannot be the index's. Its arrays grow when episodes are added: read it through
    `ranks` and `documents`, which hold the lock that adding takes."""
    with _KEPT.lock:
        return _current(conn, version)


def ranks(
    conn: sqlite3.Connection,
    version: tuple[Any, ...],
    phrases: Sequence[str],
    weightings: Sequence[tuple[float, ...] | None],
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """`Mirror.ranks_of` the phrases (`"word"` or `"word"*`) at `version`; None: ask the index."""
    with _KEPT.lock:
        copy = _current(conn, version)
        if copy is None:
            return [None] * len(phrases)
        return copy.ranks_of([(p.strip('"*'), p.endswith("*")) for p in phrases], weightings)


def documents(
    conn: sqlite3.Connection, version: tuple[Any, ...], term: str, prefix: bool
) -> tuple[int, str] | None:
    """`Mirror.documents` of a term at `version`; None: ask the index."""
    with _KEPT.lock:
        copy = _current(conn, version)
        return None if copy is None else copy.documents(term, prefix)


def _current(conn: sqlite3.Connection, version: tuple[Any, ...]) -> Mirror | None:
    if _KEPT.version == version:
        return _KEPT.mirror
    db, cookie, newest, count = version
    kept, base = _KEPT.mirror, (db, cookie, count)
    if kept is not None and older_version(base, newest or 0, kept.base, kept.newest):
        # A reader still on a snapshot before the copy's: the index answers it, and the copy
        # stays for the readers on the newer one (dropping it would read everything again).
        return None
    _KEPT.mirror, _KEPT.version = None, version
    try:
        if kept is not None and kept.base == base and (newest or 0) >= kept.newest:
            kept.add(conn, kept.newest, newest or 0)  # episodes only added: the new ones read
        else:
            kept = _read(conn, base, newest or 0)
    except TooCostly as e:
        _KEPT.too_costly[db] = e.tokens
        kept = None
    except Unsure:
        kept = None
    _KEPT.mirror = kept
    return kept


def older_version(base: tuple[Any, ...], newest: int, kept_base: tuple[Any, ...], kept_newest: int) -> bool:
    """Whether a version (database, schema cookie, deletions and updates counted; newest episode)
    of the same store and schema comes before a kept one's: fewer deletions and updates counted, or
    as many and fewer episodes added (what is kept here and by runtime.archive_stats)."""
    if base[:2] != kept_base[:2]:
        return False
    try:
        count, kept_count = int(base[2]), int(kept_base[2])
    except (TypeError, ValueError):
        return False
    return count < kept_count or (count == kept_count and newest < kept_newest)


def _read(conn: sqlite3.Connection, base: tuple[Any, ...], newest: int) -> Mirror | None:
    if not defined_here(conn):
        return None
    block = conn.execute("SELECT block FROM episodes_fts_data WHERE id = 1").fetchone()
    tokens = sum(varints(block[0])[1:]) if block is not None else 0
    if block is None or tokens > MAX_TOKENS or tokens >= _KEPT.too_costly.get(base[0], tokens + 1):
        return None
    copy = Mirror(base, erasure_mark(conn))
    _KEPT.mark_seen(base[0], copy.mark)
    copy.add(conn, 0, newest)
    return copy


def clear() -> None:
    """Drop the copy and the tokenizer's runs (tests)."""
    with _KEPT.lock:
        _KEPT.mirror, _KEPT.version = None, None
        _KEPT.marks.clear()
        _TOKENIZER.forget()
