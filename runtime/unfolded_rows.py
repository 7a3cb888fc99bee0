"""The newest turns no episode covers yet, per reader, kept until a turn or a fold changes.

The search over unfolded turns (runtime.unfolded) starts from the agent's
newest unfolded turns the reader may see: a walk of the agent's time index
that checks each turn against `folded_turns`, 0.4-0.9 ms of SQL on a long
conversation, for the same rows question after question. The per-connection
memo of the episode search cannot serve it: every recall records its own
`retrieval` event, which moves the connection's change counters, while the
rows of this scan depend only on `wm_items` and `folded_turns`.

So the rows are kept per database and per reader (the visibility clause and
its parameters, which name the agent, and the participant asked for), and
dropped as soon as either table may have changed. What says so, read on every
search:

- the newest rowid of each table: neither is ever updated in place and a new
  row takes the next rowid, so an insert moves it;
- `meta.turns_changed`, counted by triggers on every delete (an erasure) and
  update of either table: a delete can take the newest rowid back, and the
  count only grows, so no two states share a version;
- SQLite's schema cookie (a rebuilt store, and VACUUM, which may renumber
  rowids, both move it) and the store's id (`database_key`).

Inserts are not counted by a trigger, so recording a turn costs what it did.
An erased turn is therefore never served from here. Inside a transaction
nothing is kept (a rollback does not take the count back), and a store without
the triggers (opened by an older writer, or PostgreSQL) is always asked.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from tiermem.runtime.hotstore import counts_changes, database_key

COUNTER = "turns_changed"
TRIGGER = "turns_changed_wd"  # one of the counting triggers: their presence says the count can be trusted
MAX_READERS = 256  # (reader, participant) scans kept; past it, everything is dropped

Rows = list[tuple[Any, ...]]


class _Kept:
    def __init__(self) -> None:
        self.version: tuple[Any, ...] | None = None
        self.rows: dict[tuple[Any, ...], Rows] = {}


_KEPT = _Kept()


def _version(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
    """(database, schema cookie, count, newest turn, newest fold), or None when it cannot be trusted."""
    if not counts_changes(conn, TRIGGER):
        return None
    cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
    state = conn.execute(
        "SELECT (SELECT value FROM meta WHERE key = ?), (SELECT max(rowid) FROM wm_items),"
        " (SELECT max(rowid) FROM folded_turns)",
        [COUNTER],
    ).fetchone()
    return database_key(conn), int(cookie), *state


def newest_unfolded(conn: sqlite3.Connection, where: str, params: list[Any], limit: int) -> Rows:
    """(event_id, ts, user, item_id) of the newest `limit` turns matching `where` (on alias `w`) that
    no episode covers, newest first: the scan's rows, from what is kept when nothing changed since."""
    version = _version(conn)
    key = (where, *params, limit)
    kept: dict[tuple[Any, ...], Rows] | None = None
    if version is not None:
        if _KEPT.version != version or len(_KEPT.rows) >= MAX_READERS:
            _KEPT.version, _KEPT.rows = version, {}
        # This version's dict, taken before reading: another thread that starts a newer one meanwhile
        # must not get rows read here filed under its version.
        kept = _KEPT.rows
        found = kept.get(key)
        if found is not None:
            return found
    cursor = conn.execute(
        "SELECT w.event_id, w.ts, w.user, w.item_id FROM wm_items w"
        f" WHERE w.kind = 'interaction' AND {where}"
        " AND NOT EXISTS (SELECT 1 FROM folded_turns t WHERE t.event_id = w.event_id)"
        " ORDER BY w.ts DESC, w.item_id DESC LIMIT ?",
        (*params, limit),
    )
    # Plain tuples: the collector stops visiting a tuple of strings, not a kept sqlite3.Row.
    rows = [tuple(r) for r in cursor]
    if kept is not None:
        kept[key] = rows
    return rows
