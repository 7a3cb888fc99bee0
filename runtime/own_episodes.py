"""One agent's own episodes as the episode index tokenized them, kept per process, so that the
agent's searches never walk another agent's documents.

In a store many agents write, an agent's share of the episode index is
small, and every question asked of the index walks the whole index's
lists of the question's words: its documents' counts (fts5vocab), the
candidate tries (the agent's token ANDed in still reads the pages of the
other agents' postings it skips), BM25's counts of each phrase. The cost of
one agent's recall then grows with the log, everyone's (measured: p99 ×5
from one agent to 10,000 agents of 100 episodes, bench_recall_agents.py).

So an agent holding a small share of the archive (`episode_search`
decides: at most `AGENT_SHARE` of it, at most `MAX_EPISODES` episodes) is
searched here, over a copy of its own documents only:

* each document's tokens per text column (name, summary, quotes,
  participants), read from the index's own content table and checked
  against the index's token counts (`fts_mirror.document_tokens`: FTS5's
  tokenizer, not an imitation of it), with its owner and participants;
* a term counts as in the searches' MATCH: four characters or more match
  every token they begin, shorter ones the whole token;
* the candidates of a question are the agent's episodes the principal may see
  (`can_read_item`, the one visibility check) holding any of its terms,
  ranked by BM25 with this archive's statistics (its documents, the
  documents holding each term, its average length), the index's formula
  and column weights. What is rare in one agent's life is what its
  question is about, whatever the other agents wrote; and no other agent's
  text weighs in the order of what this one sees.

The copy is filed under the store's version as runtime.archive_stats keeps
it (the store, its schema cookie, the count of deletions and updates, the
newest rowid): episodes only added are read for this agent alone (its
index range past the newest rowid it has); any other change reads its
episodes again. Inside a transaction, on a store without the counting
triggers, or for a reader on an older snapshot, a copy is read for the one
search and not kept. An erasure drops every copy of the store at once.
Bounded: an agent with more tokens than `MAX_AGENT_TOKENS`, or whose
distinct tokens hold more than `MAX_AGENT_CHARS`, is searched through the
index, and the copies together hold at most `MAX_KEPT_BYTES` (the least
recently searched go first). A document the copy could not match as the
index does (a column that is not text, participants that are not a list of
names) leaves the agent to the index. Either is remembered until the
store's episodes are deleted or updated (added ones cannot undo it).
"""

from __future__ import annotations

import math
import sqlite3
import sys
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import orjson
from tiermem.runtime import archive_stats, fts_mirror
from tiermem.runtime.episode_text import PREFIX_MIN, TEXTS
from tiermem.runtime.hotstore import database_key, erasure_mark
from tiermem.runtime.visibility import Principal, can_read_item

# An agent with more episodes than this is searched through the index (its share of it is large).
MAX_EPISODES = 1000
# ...or with more tokens: a copy is read on the request path, once per process (and again after a
# deletion or update in the store): measured 6-9 ms for 100 short episodes (3,800 tokens), 21 ms
# for 23,600 tokens, 40-45 ms for 47,200 (a LoCoMo conversation holds up to 21k).
MAX_AGENT_TOKENS = 50_000
# ...or whose distinct tokens hold more characters than this (a few long ones can outweigh many).
MAX_AGENT_CHARS = 2_000_000
# All the copies of a process together, in bytes as `OwnEpisodes.size` estimates them (70 bytes a
# token on the bench's text, 200 on text of distinct identifiers): the least recently searched
# agent's copy goes first.
MAX_KEPT_BYTES = 100_000_000
TOKEN_BYTES = 170  # a distinct token besides its string: its dict entry, postings list, sorted slot
POSTING_BYTES = 48  # a document in a token's postings: five list slots, and the list's slack
DOC_BYTES = 260  # a document's rowid, owner, participants and length entries
TEXT_COLUMNS = 4  # name, summary, quotes, participants: the agent column holds its one token
K1, B = 1.2, 0.75  # bm25()'s constants
MIN_IDF = 1e-6  # as the index's bm25(): a term in most documents still counts a little
_ASCII_LOWER = str.maketrans({c: c + 32 for c in range(ord("A"), ord("Z") + 1)})


def sqlite_lower(text: str) -> str:
    """SQLite's `lower()`: ASCII letters only (the searches' participant filter compares with it)."""
    return text.translate(_ASCII_LOWER)


class TooLarge(Exception):
    """The agent's episodes hold more tokens than a copy may: the index is asked."""


class Document:
    """One episode as a copy files it, read and tokenized before anything is filed (so that a
    failure leaves the copy as it was): Unsure where a copy could not match as the index does."""

    __slots__ = ("columns", "length", "owner", "participants", "rowid")

    def __init__(self, row: Any) -> None:
        rowid, texts, sizes, owner, participants = row[0], row[1:6], row[6], row[7], row[8]
        if not all(t is None or isinstance(t, str) for t in texts) or not isinstance(sizes, bytes):
            raise fts_mirror.Unsure(f"rowid {rowid}: a column that is not text")
        columns = fts_mirror.document_tokens((rowid, *texts), fts_mirror.varints(sizes))
        self.rowid = int(rowid)
        self.owner: str | None = owner
        self.participants = _participants(rowid, participants)
        self.length = sum(n for _, n in columns)  # every column's, the agent's token included
        self.columns = columns[:TEXT_COLUMNS]

    @property
    def tokens(self) -> int:
        return sum(n for _, n in self.columns)


def _participants(rowid: int, raw: str | None) -> frozenset[str]:
    """The participants as the searches' filter compares them (each `json_each` value, lowered as
    SQLite lowers): a list of names, or one name; anything else is Unsure (the index is asked)."""
    try:
        names = orjson.loads(raw) if raw else []
    except orjson.JSONDecodeError as e:
        raise fts_mirror.Unsure(f"rowid {rowid}: participants that are not JSON") from e
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise fts_mirror.Unsure(f"rowid {rowid}: participants that are not a list of names")
    return frozenset(sqlite_lower(n) for n in names)


def documents(rows: Sequence[Any], tokens: int = 0, chars: int = 0) -> list[Document]:
    """The rows read by `_documents`, tokenized; TooLarge past `MAX_AGENT_TOKENS` or
    `MAX_AGENT_CHARS` (with `tokens` and `chars` already kept)."""
    out = []
    for row in rows:
        doc = Document(row)
        tokens += doc.tokens
        chars += sum(len(t) for found, _ in doc.columns for t in found)
        if tokens > MAX_AGENT_TOKENS or chars > MAX_AGENT_CHARS:
            raise TooLarge(f"more than {MAX_AGENT_TOKENS} tokens or {MAX_AGENT_CHARS} characters")
        out.append(doc)
    return out


class OwnEpisodes:
    """One agent's documents: per token, its documents with the token's count in each text column.

    `postings[token]` is flat: document number, then the count in each of `TEXT_COLUMNS`
    columns, document after document in the order they were added (small ints, 8 bytes each)."""

    def __init__(self, agent_id: str, base: tuple[Any, ...] | None, newest: int, mark: int) -> None:
        self.agent_id = agent_id
        self.base, self.newest, self.mark = base, newest, mark
        self.rowids: list[int] = []
        self.owners: list[str | None] = []
        self.participants: list[frozenset[str]] = []
        self.lengths: list[int] = []
        self.postings: dict[str, list[int]] = {}
        self.tokens = 0
        self.chars = 0  # the distinct tokens' characters, as `documents` counts them
        self.size = 0  # bytes held, estimated (`TOKEN_BYTES`, `POSTING_BYTES`, `DOC_BYTES`)
        self._sorted: list[str] | None = None

    def add(self, docs: Sequence[Document]) -> None:
        """Documents after those already here, in rowid order."""
        step = 1 + TEXT_COLUMNS
        for d in docs:
            doc = len(self.rowids)
            self.rowids.append(d.rowid)
            self.owners.append(d.owner)
            self.participants.append(d.participants)
            self.lengths.append(d.length)
            self.size += DOC_BYTES + sys.getsizeof(d.owner) + sum(map(sys.getsizeof, d.participants))
            for col, (found, n) in enumerate(d.columns):
                self.tokens += n
                for token, count in found.items():
                    self.chars += len(token)
                    posting = self.postings.get(token)
                    if posting is None:
                        posting = self.postings[token] = [doc, 0, 0, 0, 0]
                        self._sorted = None
                        self.size += TOKEN_BYTES + sys.getsizeof(token) + POSTING_BYTES
                    elif posting[-step] != doc:
                        posting.extend((doc, 0, 0, 0, 0))
                        self.size += POSTING_BYTES
                    posting[-TEXT_COLUMNS + col] = count

    def matching(self, term: str) -> list[str]:
        """The tokens `term` matches as the searches' MATCH writes it: a prefix from `PREFIX_MIN` characters."""
        if len(term) > fts_mirror.MAX_TOKEN and term.isascii():
            term = term[: fts_mirror.MAX_TOKEN]  # as the index cuts a query's token
        if len(term) < PREFIX_MIN:
            return [term] if term in self.postings else []
        if self._sorted is None:
            self._sorted = sorted(self.postings)
        words = self._sorted
        at = bisect_left(words, term)
        out = []
        while at < len(words) and words[at].startswith(term):
            out.append(words[at])
            at += 1
        return out

    def instances(self, term: str) -> dict[int, list[int]]:
        """Per document holding `term`: its instances in each text column (of every token it matches)."""
        out: dict[int, list[int]] = {}
        step = 1 + TEXT_COLUMNS
        for token in self.matching(term):
            posting = self.postings[token]
            for at in range(0, len(posting), step):
                counts = out.get(posting[at])
                if counts is None:
                    out[posting[at]] = posting[at + 1 : at + step]
                else:
                    for col in range(TEXT_COLUMNS):
                        counts[col] += posting[at + 1 + col]
        return out

    def counts(self, terms: Sequence[str]) -> dict[str, int]:
        """The agent's episodes holding each term."""
        return {t: len(self.instances(t)) for t in terms}

    def candidates(
        self,
        who: Principal,
        terms: Sequence[str],
        weights: Sequence[float],
        participant: str | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        """The best `limit` of the agent's episodes `who` may see holding any term (and, given one,
        naming `participant`), as (rowid, rank): the index's bm25() with these column weights over
        the agent's own episodes, in its order of operations (negative, lower is better; ties to
        the older episode)."""
        n_docs = len(self.rowids)
        if not n_docs:
            return []
        avg = sum(self.lengths) / n_docs
        asked = sqlite_lower(participant) if participant else None
        scores: dict[int, float] = {}
        allowed: dict[int, bool] = {}
        for term in terms:
            found = self.instances(term)
            if not found:
                continue
            idf = math.log((0.5 + n_docs - len(found)) / (0.5 + len(found)))
            if idf <= 0.0:
                idf = MIN_IDF
            for doc, per_column in found.items():
                ok = allowed.get(doc)
                if ok is None:
                    ok = allowed[doc] = can_read_item(who, self.agent_id, self.owners[doc]) and (
                        asked is None or asked in self.participants[doc]
                    )
                if not ok:
                    continue
                f = 0.0
                for col, count in enumerate(per_column):
                    for _ in range(count):  # the index adds a column's weight once per instance
                        f += weights[col]
                norm = K1 * (1 - B + B * self.lengths[doc] / avg)
                scores[doc] = scores.get(doc, 0.0) - idf * ((f * (K1 + 1.0)) / (f + norm))
        ranked = sorted(scores.items(), key=lambda s: (s[1], self.rowids[s[0]]))
        return [(self.rowids[doc], rank) for doc, rank in ranked[:limit]]


_COLUMNS = ", ".join(f"c.c{col}" for col in range(fts_mirror.COLUMNS))


def _documents(conn: sqlite3.Connection, agent_id: str, after: int, upto: int | None) -> list[Any]:
    """The agent's documents of the index with rowids in (after, upto], by rowid: (rowid, each
    column, the blob of its token counts, owner, participants). Its index range only."""
    bound = "" if upto is None else " AND e.rowid <= ?"
    return conn.execute(
        f"SELECT e.rowid, {_COLUMNS}, d.sz, e.owner, e.participants FROM episodes e"
        " JOIN episodes_fts_content c ON c.id = e.rowid JOIN episodes_fts_docsize d ON d.id = e.rowid"
        f" WHERE e.agent_id = ? AND e.rowid > ?{bound} ORDER BY e.rowid",
        [agent_id, after, *([] if upto is None else [upto])],
    ).fetchall()


class _Kept:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.copies: OrderedDict[tuple[str, str], OwnEpisodes] = OrderedDict()
        self.size = 0  # the copies' bytes, as each estimates them
        self.marks: dict[str, int] = {}  # per store, the erasure mark last seen
        # (store, agent) -> the store's version (without its newest rowid) when the agent's
        # episodes were found too large or not what a copy can match: left to the index until
        # episodes are deleted or updated.
        self.left: dict[tuple[str, str], tuple[Any, ...]] = {}

    def drop_store(self, db: str) -> None:
        """(Under the lock.)"""
        for key in [k for k in self.copies if k[0] == db]:
            self.forget(key)

    def erasure_seen(self, db: str, mark: int) -> None:
        """A read of `db` found its erasure mark at `mark`: copies read before an erasure there go."""
        with self.lock:
            if self.marks.get(db, mark) != mark:
                self.drop_store(db)
            self.marks[db] = mark

    def erased(self, db: str) -> None:
        """This process has just erased something in `db`: its copies go."""
        with self.lock:
            self.drop_store(db)

    def forget(self, key: tuple[str, str]) -> None:
        """(Under the lock.)"""
        old = self.copies.pop(key, None)
        if old is not None:
            self.size -= old.size

    def file(self, key: tuple[str, str], copy: OwnEpisodes) -> None:
        """(Under the lock.) Keep `copy` in place of what was kept for the agent, within the bounds."""
        self.forget(key)
        self.copies[key] = copy
        self.size += copy.size
        self.left.pop(key, None)
        self._fit(key)

    def extend(self, key: tuple[str, str], copy: OwnEpisodes, docs: list[Document], newest: int) -> None:
        """(Under the lock.) The agent's new documents added to its kept copy; should adding them
        fail part way, the copy goes (part added, part not, it would hold some twice)."""
        before = copy.size
        try:
            copy.add(docs)
        except BaseException:
            self.copies.pop(key, None)
            self.size -= before
            raise
        copy.newest = newest
        self.size += copy.size - before
        self.copies.move_to_end(key)
        self._fit(key)

    def _fit(self, key: tuple[str, str]) -> None:
        """(Under the lock.) Within `MAX_KEPT_BYTES`: the least recently searched copies go first,
        `key` (just filed or grown) last."""
        while self.size > MAX_KEPT_BYTES and len(self.copies) > 1:
            self.forget(next(k for k in self.copies if k != key))
        if self.size > MAX_KEPT_BYTES:
            self.forget(key)

    def leave(self, key: tuple[str, str], base: tuple[Any, ...] | None) -> None:
        """(Under the lock.) The agent's episodes are left to the index at this version."""
        self.forget(key)
        if base is not None:
            self.left[key] = base


_KEPT = _Kept()
TEXTS.erasure_checks.append(_KEPT.erasure_seen)
TEXTS.erasure_drops.append(_KEPT.erased)


def own_episodes(conn: sqlite3.Connection, agent_id: str, episodes: int) -> OwnEpisodes | None:
    """The copy of the agent's documents as the store is now (`episodes`: how many it holds, as
    `archive_stats.sizes` says); None when it would be larger than a copy may be, or its documents
    are not what a copy can match as the index does (the index is asked). Read it under `lock()`:
    a kept copy grows in place when the agent's episodes are added."""
    db = database_key(conn)
    key = (db, agent_id)
    if episodes > MAX_EPISODES:
        with _KEPT.lock:
            _KEPT.forget(key)  # grown past what a copy holds: its old copy is of no use
        return None
    mark, state = erasure_mark(conn), archive_stats.state(conn)
    if state is None:
        # Inside a transaction (whose snapshot may be older than the store's) or on a store without
        # the counting triggers: read for this search only, nothing kept or dropped.
        return _unkept(conn, agent_id, mark)
    base, newest = state
    _KEPT.erasure_seen(db, mark)
    with _KEPT.lock:
        if _KEPT.left.get(key) == base:
            return None  # too large, or not for a copy, at this version: episodes added cannot undo it
        kept = _KEPT.copies.get(key)
        if kept is not None and (kept.base, kept.newest) == state:
            _KEPT.copies.move_to_end(key)
            return kept
        after = kept.newest if kept is not None else 0
        held = (kept.tokens, kept.chars) if kept is not None else (0, 0)
    if kept is not None and kept.base and fts_mirror.older_version(base, newest, kept.base, kept.newest):
        return _unkept(conn, agent_id, mark)  # a snapshot older than the copy's: this search only
    if kept is not None and kept.base == base and kept.mark == mark and after < newest:
        done, found = _extended(conn, key, kept, after, held, state)
        if done:
            return found
    return _filed(conn, key, state, mark)


def _extended(
    conn: sqlite3.Connection,
    key: tuple[str, str],
    kept: OwnEpisodes,
    after: int,
    held: tuple[int, int],
    state: tuple[tuple[Any, ...], int],
) -> tuple[bool, OwnEpisodes | None]:
    """The kept copy with the agent's episodes added past `after` (read without the lock), or
    (False, None): something else moved meanwhile, all of it is read again."""
    try:
        new = documents(_documents(conn, key[1], after, state[1]), *held)
    except (TooLarge, fts_mirror.Unsure):
        with _KEPT.lock:
            if _KEPT.copies.get(key) is kept and kept.newest == after:
                _KEPT.leave(key, state[0])
        return True, None
    with _KEPT.lock:
        if _KEPT.copies.get(key) is kept and (kept.base, kept.newest) == state:
            return True, kept  # another search added them meanwhile
        if _KEPT.copies.get(key) is kept and kept.newest == after and archive_stats.state(conn) == state:
            _KEPT.extend(key, kept, new, state[1])
            return True, kept
    return False, None


def _filed(
    conn: sqlite3.Connection, key: tuple[str, str], state: tuple[tuple[Any, ...], int], mark: int
) -> OwnEpisodes | None:
    """All of the agent's documents read, and kept if the store is still at `state`."""
    try:
        copy = _read(conn, key[1], state[0], state[1], mark)
    except (TooLarge, fts_mirror.Unsure):
        with _KEPT.lock:
            if archive_stats.state(conn) == state:
                _KEPT.leave(key, state[0])
        return None
    with _KEPT.lock:
        if archive_stats.state(conn) == state and _KEPT.marks.get(key[0], mark) == mark:
            _KEPT.file(key, copy)
    return copy


def _unkept(conn: sqlite3.Connection, agent_id: str, mark: int) -> OwnEpisodes | None:
    """A copy for one search, of what the connection sees (None: not for a copy)."""
    try:
        return _read(conn, agent_id, None, None, mark)
    except (TooLarge, fts_mirror.Unsure):
        return None


def _read(
    conn: sqlite3.Connection, agent_id: str, base: tuple[Any, ...] | None, newest: int | None, mark: int
) -> OwnEpisodes:
    """The agent's documents up to `newest` (None: all the statement sees); TooLarge or
    fts_mirror.Unsure where a copy may not hold them."""
    copy = OwnEpisodes(agent_id, base, newest or 0, mark)
    copy.add(documents(_documents(conn, agent_id, 0, newest)))
    return copy


def lock() -> threading.RLock:
    """Held while a copy is read: a kept copy grows in place when the agent's episodes are added."""
    return _KEPT.lock


def clear() -> None:
    """Drop every copy (tests)."""
    with _KEPT.lock:
        _KEPT.copies.clear()
        _KEPT.size = 0
        _KEPT.marks.clear()
        _KEPT.left.clear()
