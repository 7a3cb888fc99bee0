"""The candidate episodes' small columns, kept per database until its episodes change.

Both searches of a recall read the columns they score with (name, summary,
dates, importance...) for the candidates the index chose, by rowid. On a
long conversation every question chooses nearly the same two hundred
episodes, and reading their rows again is a quarter of a millisecond of
every recall for the same answer. So the rows read are kept per database,
per column list and per rowid, while the episodes are unchanged: the same
version as the kept phrase ranks (runtime.fts_ranks: the newest episode
rowid, and the count of deletions and updates of the indexed columns kept
by triggers, read with SQLite's schema cookie and the store's id), on the
same stores (of at most `fts_ranks.MAX_DOCS` episodes where long episodes
have been met: on a large archive a question's candidates are mostly new
ones, and keeping them would only cost).

Only what a row says is kept, never who may see it: the rowids asked for
come from the candidate query, which checks each row's visibility for the
principal on every question. An episode row is written once (its indexed
columns may be re-indexed, which the count sees) and otherwise only deleted
(which the count sees too); inside a transaction nothing is kept (a
rollback does not take the count back), and a store without the counting
triggers is always asked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from tiermem.runtime import fts_ranks

MAX_ROWS = 100_000  # rows kept in all; past it, everything is dropped and read again

Row = tuple[Any, ...]


class _Kept:
    def __init__(self) -> None:
        self.version: tuple[Any, ...] | None = None
        self.by_cols: dict[str, dict[int, Row]] = {}
        self.rows = 0


_KEPT = _Kept()


def _read(conn: sqlite3.Connection, cols: str, rowids: Sequence[int]) -> dict[int, Row]:
    """`cols` of the episodes at `rowids` (those still there), by rowid."""
    marks = ",".join("?" * len(rowids))
    sql = f"SELECT e.rowid, {cols} FROM episodes e WHERE e.rowid IN ({marks})"
    return {r[0]: tuple(r)[1:] for r in conn.execute(sql, list(rowids))}


def rows_by_rowid(conn: sqlite3.Connection, cols: str, rowids: Sequence[int]) -> Mapping[int, Row]:
    """`cols` (on alias `e`) of the episodes at `rowids`, by rowid (a rowid no longer there is absent;
    the mapping may hold other kept rows besides, and is only read: it may be the kept one itself).

    The same rows as reading them; rows read since the episodes last
    changed are not read again.
    """
    if not rowids:
        return {}
    version = fts_ranks.kept_version(conn)
    if version is None:
        return _read(conn, cols, rowids)
    if _KEPT.version != version or _KEPT.rows > MAX_ROWS:
        _KEPT.version, _KEPT.by_cols, _KEPT.rows = version, {}, 0
    # This version's dict, taken before reading: another thread that starts a newer one meanwhile
    # must not get rows read here filed under its version.
    kept = _KEPT.by_cols.setdefault(cols, {})
    missing = [r for r in rowids if r not in kept]
    if missing:
        found = _read(conn, cols, missing)
        kept.update(found)
        _KEPT.rows += len(found)
        if len(found) < len(missing):  # gone since the candidate query: nothing to keep for them
            return {r: kept[r] for r in rowids if r in kept}
    return kept
