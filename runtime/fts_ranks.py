"""BM25 ranks of an OR of words, summed from each word's own ranks, kept until the episodes change.

FTS5's `bm25()` of a query is a sum over the query's phrases, in their
order, of each phrase's part (its IDF times its weighted frequency in the
document, saturated by the document's length), starting from zero and
negated at the end; a phrase a document lacks adds exactly zero. Each part
depends only on the phrase, the document and the table's statistics, so the
rank of `"a"* OR "b"*` is, bit for bit, the negated sum of the negated ranks
of `"a"*` and `"b"*` alone, added in that order (checked on every row in
tests/test_fts_ranks.py).

Computing a rank walks every position of every matched word in every matching
document: for a long conversation (two hundred episodes of ~7,000 words, a
common word hundreds of times in each) that is 1.5–5 ms per question, while
the words themselves recur from question to question. So each phrase's ranks
(both rankings the searches use) are worked out once, alone, and kept per
database until an episode is inserted, deleted or changed: the newest episode
rowid and a count of deletions and updates kept by triggers
(`meta.episodes_changed`) say so. A phrase met for the first time is ranked
from the kept copy of the index's counts (runtime.fts_mirror, bit for bit the
index's), or asked of the index where no copy can be kept. Who may see a
match is still checked on the rows, per question (`_hidden`). Only an OR of plain phrases is served this way (the
candidate tries that AND words or name a participant ask the index as before),
and only on stores of at most `MAX_DOCS` episodes where long episodes have
been met (runtime.episode_text indexes those): long conversations, not
archives of a hundred thousand episodes where most of a word's documents
belong to other readers, nor stores of short episodes that the index ranks
about as fast as the sum is made.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import orjson
from tiermem.runtime import fts_mirror
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import change_count, counts_changes, database_key

COUNTER = "episodes_changed"
TRIGGER = "episodes_changed_ad"  # one of the counting triggers: their presence says the count can be trusted
MAX_ROWS = 2_000_000  # (phrase, document) ranks kept in all; past it, everything is dropped
# Only stores of at most this many episodes (by newest rowid): a word's ranks are computed for every
# document holding it, which on a large archive of many readers is mostly documents this reader may
# not see (the query it replaces ranks only the visible ones), and new words are met on most questions.
MAX_DOCS = 5_000
_PHRASE = re.compile(r'^"[a-z0-9]+"\*?$')

_Ranks = tuple[np.ndarray, np.ndarray]  # (rowids ascending, ranks: one column per ranking)


class _Kept:
    def __init__(self) -> None:
        self.version: tuple[Any, ...] | None = None
        self.phrases: dict[tuple[str, str], _Ranks] = {}
        self.rows = 0


_KEPT = _Kept()


def phrases_of(match: str) -> list[str] | None:
    """The phrases of an OR of plain phrases (`"word"*` or `"word"`), in order; None for anything else."""
    phrases = match.split(" OR ")
    return phrases if all(_PHRASE.match(p) for p in phrases) else None


def kept_version(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
    """What kept episode data is filed under (None: nothing is kept for this store or here)."""
    if not counts_changes(conn, TRIGGER):
        return None
    db = database_key(conn)
    if db not in TEXTS.long_dbs:
        return None  # short documents: the index ranks them about as fast as the sum is made
    newest = conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0]
    if newest is not None and newest > MAX_DOCS:
        return None
    cookie, count = change_count(conn, COUNTER)
    return db, cookie, newest, count


def kept_counts(conn: sqlite3.Connection) -> Callable[[str, bool], tuple[int, str] | None]:
    """What fts5vocab says of a term (`Mirror.documents`), from the kept copy of the index when
    this store has one (None: ask the index); its version is read at the first term asked."""
    versions: list[tuple[Any, ...] | None] = []

    def counts(term: str, prefix: bool) -> tuple[int, str] | None:
        if not versions:
            versions.append(kept_version(conn))
        version = versions[0]
        return None if version is None else fts_mirror.documents(conn, version, term, prefix)

    return counts


def rank_sql(weights: tuple[float, ...] | None) -> str:
    """`bm25()` of the episode index with these column weights (None: plain `bm25()`)."""
    return f"bm25(episodes_fts, {', '.join(str(w) for w in weights)})" if weights else "bm25(episodes_fts)"


def ranked_rows(
    conn: sqlite3.Connection,
    where: str,
    params: list[Any],
    match: str,
    weightings: Sequence[tuple[float, ...] | None],
    from_copy: bool = True,
) -> list[tuple[Any, ...]] | None:
    """(rowid, rank per weighting) of every match the principal may see (`where` on `e`), or None
    when this query cannot be served from kept phrase ranks (the caller asks the index).

    `weightings` are the column weights of each ranking (None: plain `bm25()`); the ranks are kept
    under the SQL made of them (`rank_sql`), so the copy's ranks and the index's are filed alike. A
    phrase met for the first time is ranked from the kept copy of the index (runtime.fts_mirror),
    unless `from_copy` is false."""
    ranks = [rank_sql(w) for w in weightings]
    phrases = phrases_of(match)
    version = kept_version(conn) if phrases else None
    if phrases is None or version is None:
        return None
    if _KEPT.version != version or _KEPT.rows > MAX_ROWS:
        _KEPT.version, _KEPT.phrases, _KEPT.rows = version, {}, 0
    # This version's dict, taken before reading: another thread that starts a newer one meanwhile
    # must not get ranks read here filed under its version.
    kept = _KEPT.phrases
    key = "|".join(ranks)
    new = [p for p in dict.fromkeys(phrases) if (p, key) not in kept]
    if new and from_copy:
        # The phrases met for the first time, from the kept copy of the index, together.
        for phrase, found in zip(new, fts_mirror.ranks(conn, version, new, weightings), strict=True):
            if found is not None:
                kept[(phrase, key)] = found
                _KEPT.rows += len(found[0])
    parts = [_phrase_ranks(conn, kept, p, ranks) for p in phrases]
    rowids, at = np.unique(np.concatenate([p[0] for p in parts]), return_inverse=True)
    if not len(rowids):
        return []
    total = np.zeros((len(rowids), len(ranks)))
    start = 0
    for ids, values in parts:
        # Every phrase adds its part in order (nothing where a document lacks it: adding zero), as
        # bm25() sums them; `at` places each phrase's documents among all of them.
        total[at[start : start + len(ids)]] += -values
        start += len(ids)
    total = -1.0 * total
    ids = rowids.tolist()
    hidden = _hidden(conn, where, params, ids)
    return [(r, *v) for r, v in zip(ids, total.tolist(), strict=True) if r not in hidden]


def _phrase_ranks(
    conn: sqlite3.Connection, phrases: dict[tuple[str, str], _Ranks], phrase: str, ranks: list[str]
) -> _Ranks:
    key = (phrase, "|".join(ranks))
    kept = phrases.get(key)
    if kept is None:
        rows = conn.execute(
            f"SELECT rowid, {', '.join(ranks)} FROM episodes_fts WHERE episodes_fts MATCH ? ORDER BY rowid",
            [phrase],
        ).fetchall()
        ids = np.array([r[0] for r in rows], dtype=np.int64)
        values = np.array([tuple(r)[1:] for r in rows], dtype=np.float64).reshape(len(rows), len(ranks))
        kept = phrases[key] = (ids, values)
        _KEPT.rows += len(rows)
    return kept


def _hidden(conn: sqlite3.Connection, where: str, params: list[Any], rowids: list[int]) -> set[int]:
    """The rowids among `rowids` the principal may not see (`where` on alias `e`), or no longer there.

    Asked this way round because a reader's matches are mostly its own: the
    query returns the few it may not see, where returning every one it may
    cost twice the check itself. A row is seen exactly when the row is there
    and `where` holds for it (false or NULL: hidden), as a query for the
    visible ones would say. `where` is bracketed: an OR in it must not
    reach past the join's own condition.
    """
    sql = (
        "SELECT j.value FROM json_each(?) j LEFT JOIN episodes e ON e.rowid = j.value AND "
        f"({where}) WHERE e.rowid IS NULL"
    )
    return {r[0] for r in conn.execute(sql, [orjson.dumps(rowids).decode(), *params])}
