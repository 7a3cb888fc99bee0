"""The candidate episodes' small columns, kept for one database at a time until its episodes change.

Both searches of a recall read the columns they score with (name, summary,
dates, importance...) for the candidates the index chose, by rowid. On a
long conversation every question chooses nearly the same two hundred
episodes, and reading their rows again is a quarter of a millisecond of
every recall for the same answer. So the rows read are kept, per column list
and per rowid, while the episodes kept are unchanged: under the version of
the kept phrase ranks (runtime.fts_ranks: the store, and the count of
deletions and updates kept by triggers, read with SQLite's schema cookie)
but for its newest episode rowid (an episode added changes no row kept, and
its own row is read when first asked for), and the store's erasure mark, on
the same stores (of at most `fts_ranks.MAX_DOCS` episodes where long
episodes have been met: on a large archive a question's candidates are
mostly new ones, and keeping them would only cost). As with the phrase
ranks, one database is kept at a time: a process reads one store (reading
another drops the first's rows).

Only what a row says is kept, never who may see it: the rowids asked for
come from the candidate query, which checks each row's visibility for the
principal on every question. An episode's columns are counted on every
update but of its recall count (`episodes_changed_ar`, which no column kept
here is), and deletions too; inside a transaction nothing is kept (a
rollback does not take the count back), and a store without the counting
triggers is always asked. An erasure drops every kept row at the first read
after it, whichever search makes it (the prepared texts' check tells this
module, `EpisodeTexts.erasure_checks`), so no erased text stays in the process.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from tiermem.runtime import fts_ranks
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import counts_changes, erasure_mark

MAX_ROWS = 100_000  # rows kept in all; past it, everything is dropped and read again
# Counts updates of every episode column but the recall count: without it a changed date or
# importance would not move the version (a store opened before it existed gets it on its next open).
TRIGGER = "episodes_changed_ar"

Row = tuple[Any, ...]


class _Kept:
    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        # (database, schema cookie, change count, erasure mark) of the rows kept
        self.version: tuple[Any, ...] | None = None
        self.by_cols: dict[str, dict[int, Row]] = {}
        self.rows = 0

    def erasure_seen(self, db: str, mark: int) -> None:
        """A read of `db` found its erasure mark at `mark`: rows read before an erasure there go."""
        if self.version is not None and self.version[0] == db and self.version[-1] != mark:
            self.clear()

    def erased(self, db: str) -> None:
        """This process has just erased something in `db`: the rows read of it go."""
        if self.version is not None and self.version[0] == db:
            self.clear()


_KEPT = _Kept()
TEXTS.erasure_checks.append(_KEPT.erasure_seen)
TEXTS.erasure_drops.append(_KEPT.erased)


def _read(conn: sqlite3.Connection, cols: str, rowids: Sequence[int]) -> dict[int, Row]:
    """`cols` of the episodes at `rowids` (those still there), by rowid."""
    marks = ",".join("?" * len(rowids))
    sql = f"SELECT e.rowid, {cols} FROM episodes e WHERE e.rowid IN ({marks})"
    return {r[0]: tuple(r)[1:] for r in conn.execute(sql, list(rowids))}


def _version(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
    """What rows read now are kept under (None: none are kept for this store or here)."""
    # The erasure mark first: rows read after it are filed under it, never under a later one.
    mark = erasure_mark(conn) if counts_changes(conn, TRIGGER) else None
    ranks = fts_ranks.kept_version(conn) if mark is not None else None
    # Not the newest rowid: an episode added changes none of the rows kept (rowids are not
    # reused while the count holds), and a new one's row is read when first asked for.
    return None if ranks is None else (ranks[0], ranks[1], ranks[3], mark)


def rows_by_rowid(conn: sqlite3.Connection, cols: str, rowids: Sequence[int]) -> Mapping[int, Row]:
    """`cols` (on alias `e`) of the episodes at `rowids`, by rowid (a rowid no longer there is absent;
    the mapping may hold other kept rows besides, and is read-only: it may show the kept ones).

    The same rows as reading them; rows read since the episodes last
    changed are not read again.
    """
    version = _version(conn)
    if _KEPT.version != version or _KEPT.rows > MAX_ROWS:
        _KEPT.clear()  # also when nothing is kept here: no rows stay from before
        _KEPT.version = version
    if not rowids:
        return {}
    if version is None:
        return _read(conn, cols, rowids)
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
    return MappingProxyType(kept)
