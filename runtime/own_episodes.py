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
Bounded: an agent with more tokens than `MAX_AGENT_TOKENS` is searched
through the index, and the copies together hold at most `MAX_KEPT_TOKENS`
(the least recently searched go first).
"""

from __future__ import annotations

import math
import sqlite3
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
# ...or with more tokens: reading and counting them takes about 1 us a token.
MAX_AGENT_TOKENS = 400_000
# All the copies of a process together (a posting takes about 40 bytes): the least recently
# searched agent's copy goes first.
MAX_KEPT_TOKENS = 4_000_000
TEXT_COLUMNS = 4  # name, summary, quotes, participants: the agent column holds its one token
K1, B = 1.2, 0.75  # bm25()'s constants
MIN_IDF = 1e-6  # as the index's bm25(): a term in most documents still counts a little
_ASCII_LOWER = str.maketrans({c: c + 32 for c in range(ord("A"), ord("Z") + 1)})


def sqlite_lower(text: str) -> str:
    """SQLite's `lower()`: ASCII letters only (the searches' participant filter compares with it)."""
    return text.translate(_ASCII_LOWER)


class TooLarge(Exception):
    """The agent's episodes hold more tokens than a copy may: the index is asked."""


class OwnEpisodes:
    """One agent's documents: per token, its documents with the token's count in each text column.

    `postings[token]` is flat: document number, then the count in each of `TEXT_COLUMNS`
    columns, document after document in the order they were added (small ints, 8 bytes each)."""

    def __init__(self, agent_id: str, base: tuple[Any, ...] | None, newest: int, mark: int) -> None:
        self.agent_id = agent_id
        self.base, self.newest, self.mark = base, newest, mark
        self.rowids: list[int] = []
        self.owners: list[str | None] = []
        self.participants: list[frozenset[str]] = []  # each lowered as SQLite lowers
        self.lengths: list[int] = []  # tokens in every column (the agent's one included)
        self.postings: dict[str, list[int]] = {}
        self.tokens = 0
        self._sorted: list[str] | None = None

    def add(self, rows: Sequence[Any]) -> None:
        """Documents read by `_documents`, in rowid order after those already here."""
        for row in rows:
            rowid, texts, sizes, owner, participants = row[0], row[1:6], row[6], row[7], row[8]
            columns = fts_mirror.document_tokens((rowid, *texts), fts_mirror.varints(sizes))
            doc = len(self.rowids)
            self.rowids.append(int(rowid))
            self.owners.append(owner)
            self.participants.append(_participants(participants))
            self.lengths.append(sum(n for _, n in columns))
            for col, (found, n) in enumerate(columns[:TEXT_COLUMNS]):
                self.tokens += n
                for token, count in found.items():
                    posting = self.postings.get(token)
                    if posting is None:
                        posting = self.postings[token] = [doc, 0, 0, 0, 0]
                        self._sorted = None
                    elif posting[-1 - TEXT_COLUMNS] != doc:
                        posting.extend((doc, 0, 0, 0, 0))
                    posting[-TEXT_COLUMNS + col] = count
            if self.tokens > MAX_AGENT_TOKENS:
                raise TooLarge(f"{self.agent_id}: more than {MAX_AGENT_TOKENS} tokens")

    def matching(self, term: str) -> list[str]:
        """The tokens `term` matches as the searches' MATCH writes it: a prefix from `PREFIX_MIN` characters."""
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

    def frequencies(self, term: str, weights: Sequence[float]) -> dict[int, float]:
        """Per document holding `term`: its instances, each weighted by its column's weight (in
        column order, from zero, as the index sums them)."""
        out: dict[int, float] = {}
        step = 1 + TEXT_COLUMNS
        for token in self.matching(term):
            posting = self.postings[token]
            for at in range(0, len(posting), step):
                doc = posting[at]
                f = out.get(doc, 0.0)
                for col in range(TEXT_COLUMNS):
                    count = posting[at + 1 + col]
                    if count:
                        f += weights[col] * count
                out[doc] = f
        return out

    def counts(self, terms: Sequence[str]) -> dict[str, int]:
        """The agent's episodes holding each term."""
        out = {}
        for t in terms:
            docs: set[int] = set()
            for token in self.matching(t):
                docs.update(self.postings[token][:: 1 + TEXT_COLUMNS])
            out[t] = len(docs)
        return out

    def candidates(
        self,
        who: Principal,
        terms: Sequence[str],
        weights: Sequence[float],
        participant: str | None,
        limit: int,
    ) -> list[tuple[int, float]]:
        """The best `limit` of the agent's episodes `who` may see holding any term (and, given one,
        naming `participant`), as (rowid, rank): BM25 over this archive, negative as the index's
        (lower is better), ties to the older episode."""
        n_docs = len(self.rowids)
        if not n_docs:
            return []
        avg = sum(self.lengths) / n_docs
        asked = sqlite_lower(participant) if participant else None
        scores: dict[int, float] = {}
        allowed: dict[int, bool] = {}
        for term in terms:
            found = self.frequencies(term, weights)
            if not found:
                continue
            hits = len(found)
            idf = max(math.log((n_docs - hits + 0.5) / (hits + 0.5)), MIN_IDF)
            for doc, f in found.items():
                ok = allowed.get(doc)
                if ok is None:
                    ok = allowed[doc] = can_read_item(who, self.agent_id, self.owners[doc]) and (
                        asked is None or asked in self.participants[doc]
                    )
                if not ok:
                    continue
                norm = K1 * (1 - B + B * self.lengths[doc] / avg)
                scores[doc] = scores.get(doc, 0.0) - idf * (f * (K1 + 1)) / (f + norm)
        ranked = sorted(scores.items(), key=lambda s: (s[1], self.rowids[s[0]]))
        return [(self.rowids[doc], rank) for doc, rank in ranked[:limit]]


def _participants(raw: str | None) -> frozenset[str]:
    try:
        names = orjson.loads(raw or "[]")
    except orjson.JSONDecodeError:
        return frozenset()
    if not isinstance(names, list):
        return frozenset()
    return frozenset(sqlite_lower(n) for n in names if isinstance(n, str))


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
        self.tokens = 0
        self.marks: dict[str, int] = {}  # per store, the erasure mark last seen
        self.too_large: dict[tuple[str, str], int] = {}  # (store, agent) -> its episodes then

    def drop_store(self, db: str) -> None:
        """(Under the lock.)"""
        for key in [k for k in self.copies if k[0] == db]:
            self.tokens -= self.copies.pop(key).tokens

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

    def file(self, key: tuple[str, str], copy: OwnEpisodes) -> None:
        """(Under the lock.) Keep `copy` in place of what was kept for the agent, within the bounds."""
        old = self.copies.pop(key, None)
        if old is not None:
            self.tokens -= old.tokens
        if copy.tokens > MAX_KEPT_TOKENS:
            return
        while self.copies and self.tokens + copy.tokens > MAX_KEPT_TOKENS:
            self.tokens -= self.copies.popitem(last=False)[1].tokens
        self.copies[key] = copy
        self.tokens += copy.tokens


_KEPT = _Kept()
TEXTS.erasure_checks.append(_KEPT.erasure_seen)
TEXTS.erasure_drops.append(_KEPT.erased)


def own_episodes(conn: sqlite3.Connection, agent_id: str, episodes: int) -> OwnEpisodes | None:
    """The copy of the agent's documents as the store is now (`episodes`: how many it holds, as
    `archive_stats.sizes` says); None when it would be larger than a copy may be (the index is
    asked). Read it under `lock()`: a kept copy grows in place when the agent's episodes are added."""
    if episodes > MAX_EPISODES:
        return None
    db = database_key(conn)
    key, mark, state = (db, agent_id), erasure_mark(conn), archive_stats.state(conn)
    _KEPT.erasure_seen(db, mark)
    with _KEPT.lock:
        if _KEPT.too_large.get(key, episodes + 1) <= episodes:
            return None
        kept = _KEPT.copies.get(key)
        if kept is not None and state is not None and (kept.base, kept.newest) == state:
            _KEPT.copies.move_to_end(key)
            return kept
    if state is None:
        return _read(conn, key, None, None, mark, episodes)  # not kept: read for this search only
    base, newest = state
    if kept is not None and kept.base and fts_mirror.older_version(base, newest, kept.base, kept.newest):
        return _read(conn, key, None, None, mark, episodes)  # a reader on an older snapshot
    if kept is not None and kept.base == base and kept.mark == mark:
        rows = _documents(conn, agent_id, kept.newest, newest)  # episodes only added: the agent's new ones
        with _KEPT.lock:
            if _KEPT.copies.get(key) is kept and kept.newest < newest and archive_stats.state(conn) == state:
                before = kept.tokens
                try:
                    kept.add(rows)
                except TooLarge:
                    del _KEPT.copies[key]
                    _KEPT.tokens -= before
                    _KEPT.too_large[key] = episodes
                    return None
                except fts_mirror.Unsure:
                    del _KEPT.copies[key]
                    _KEPT.tokens -= before
                    return None
                _KEPT.tokens += kept.tokens - before
                kept.newest = newest
                _KEPT.copies.move_to_end(key)
                return kept
    copy = _read(conn, key, base, newest, mark, episodes)
    if copy is not None:
        with _KEPT.lock:
            if archive_stats.state(conn) == state and _KEPT.marks.get(db, mark) == mark:
                _KEPT.file(key, copy)
    return copy


def _read(
    conn: sqlite3.Connection,
    key: tuple[str, str],
    base: tuple[Any, ...] | None,
    newest: int | None,
    mark: int,
    episodes: int,
) -> OwnEpisodes | None:
    """The agent's documents up to `newest` (None: all the statement sees); None when too large or
    not tokenized as here (the index is asked)."""
    copy = OwnEpisodes(key[1], base, newest or 0, mark)
    try:
        copy.add(_documents(conn, key[1], 0, newest))
    except TooLarge:
        with _KEPT.lock:
            _KEPT.too_large[key] = episodes
        return None
    except fts_mirror.Unsure:
        return None
    return copy


def lock() -> threading.RLock:
    """Held while a copy is read: it grows in place when the agent's episodes are added."""
    return _KEPT.lock


def clear() -> None:
    """Drop every copy (tests)."""
    with _KEPT.lock:
        _KEPT.copies.clear()
        _KEPT.tokens = 0
        _KEPT.marks.clear()
        _KEPT.too_large.clear()
