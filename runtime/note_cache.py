"""The derived notes of candidate episodes' turns, kept per episode until a note changes.

A quote search scores every turn its candidate episodes cite together with
the notes derived from that turn (runtime.notes). Asking the store for them
on every question means looking up every cited turn: for a long conversation
(two hundred candidate episodes citing two thousand turns) about a
millisecond and a half of every recall, almost always for the same answer.

So the notes of each episode's turns are kept, per database and per
visibility (the clause the principal reads notes under: another principal
never gets another's), and only the episodes not met yet are looked up. What
is kept is dropped as soon as any note may have changed: triggers on the
notes table count every insert, update and delete (`meta.notes_changed`,
see runtime.hotstore), and the count is read with SQLite's schema cookie on
every search, with the store's id (`database_key`: a store rebuilt at the same
path starts its count again, under a new id). An
erased note is therefore never served. Inside a transaction nothing is kept
(a rollback does not take the count back), and a store without the triggers
(opened by an older writer, or PostgreSQL) is always asked.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from tiermem.runtime.hotstore import change_count, counts_changes, database_key, item_clause
from tiermem.runtime.notes import Note, notes_for
from tiermem.runtime.visibility import Principal

MAX_EPISODES = 50_000  # episodes whose notes are kept (past it, everything is dropped and read again)
NOTES_COUNTER = "notes_changed"
TRIGGER = "notes_changed_ai"  # one of the counting triggers: their presence says the count can be trusted

Notes = dict[tuple[str, str], list[Note]]


class _Kept:
    def __init__(self) -> None:
        self.version: tuple[Any, ...] | None = None
        self.by_episode: dict[tuple[str, str, tuple[Any, ...]], Notes] = {}


_KEPT = _Kept()
_NONE: Notes = {}  # what an episode without notes keeps (shared, only read)


def _version(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
    """(database, schema cookie, notes counter), or None when the count cannot be trusted here."""
    if not counts_changes(conn, TRIGGER):
        return None
    return database_key(conn), *change_count(conn, NOTES_COUNTER)


def episode_notes(
    conn: sqlite3.Connection, who: Principal, episode_ids: Sequence[str], cited: Sequence[frozenset[str]]
) -> Notes:
    """`notes_for` of every turn the episodes cite (`cited[k]`: the turns of `episode_ids[k]`).

    The same answer as asking for the union of `cited`; episodes met since
    the notes last changed are not looked up again.
    """
    version = _version(conn)
    if version is None:
        return notes_for(conn, who, set().union(*cited))
    if _KEPT.version != version or len(_KEPT.by_episode) > MAX_EPISODES:
        _KEPT.version, _KEPT.by_episode = version, {}
    where, params = item_clause(who, "n")
    seen_by = (where, *params)
    kept = _KEPT.by_episode
    missing = [k for k, e in enumerate(episode_ids) if (version[0], e, seen_by) not in kept]
    if missing:
        found = notes_for(conn, who, set().union(*(cited[k] for k in missing)))
        by_turn: dict[str, list[tuple[tuple[str, str], list[Note]]]] = {}
        for key, notes in found.items():
            by_turn.setdefault(key[0], []).append((key, notes))
        for k in missing:
            found_k = {key: notes for event_id in cited[k] for key, notes in by_turn.get(event_id, ())}
            kept[(version[0], episode_ids[k], seen_by)] = found_k or _NONE  # most episodes: one shared {}
    out: Notes = {}
    for e in episode_ids:
        out.update(kept[(version[0], e, seen_by)])
    return out
