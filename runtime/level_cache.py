"""An agent's current level, kept per connection until an agent-level item may have changed.

A turn that names no level takes the agent's current one: the level of the
newest item the principal reads (`levels.current_level`, three index look-ups).
The server reads it before every batch of turns, for a principal without a
user (the agent's own items, those without an owner), and almost always gets
the same answer: the turns it records belong to users, so they never move it.
But the answer can change at any moment by a commit of another connection — a
CLI finishing a task, another worker, the projector applying another process's
events — or of this one, and a turn must take the level as it is when its batch
is built, exactly as if it were read then.

So the answer is kept per connection and per agent, under a mark read on that
connection before every use: a counter that triggers on `wm_items` raise in the
same transaction as any insert, update or delete of an item without an owner
(`meta.levels_changed`, see runtime.hotstore), with SQLite's schema cookie (a
store dropped and made again starts its count again). A commit by anyone that
could move an agent's level therefore moves the mark, which the next read sees
in one statement; the turns of users commit without moving it. The mark is read
before the level, so a change committed in between only makes the next read
look again. Inside a transaction nothing is kept (a rollback does not take the
count back), a principal with a user is always asked (its items are owned), and
so is a store without the triggers (one opened only by an older writer, or
PostgreSQL).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from tiermem.runtime.hotstore import HotConnection, counts_changes
from tiermem.runtime.levels import current_level
from tiermem.runtime.visibility import Principal

COUNTER = "levels_changed"
# Every counting trigger (runtime.hotstore): their presence says the count can be trusted.
TRIGGERS = ("levels_changed_wi", "levels_changed_wd", "levels_changed_wu")
# One statement, so one read transaction: the counter, the schema cookie and the counting triggers
# of the same snapshot. The triggers are counted on every read, not only when the connection first
# met them: a store whose triggers were dropped under a live connection (a rebuild in place) must
# stop being kept at once, not after the cookie's single change.
_MARK = (
    f"SELECT (SELECT value FROM meta WHERE key = '{COUNTER}'), schema_version,"
    " (SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN"
    f" ({', '.join(repr(t) for t in TRIGGERS)})) FROM pragma_schema_version"
)
MAX_AGENTS = 4096  # agents whose level one connection keeps (past it, all are read again)


def _mark(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
    """The connection's level mark now, or None when nothing may be kept on it."""
    if not all(counts_changes(conn, trigger) for trigger in TRIGGERS):
        return None
    mark = tuple(conn.execute(_MARK).fetchone())
    return mark if mark[2] == len(TRIGGERS) else None


def agent_level(conn: sqlite3.Connection, who: Principal) -> str:
    """`levels.current_level(conn, who)`, answered from what this connection kept when no
    item without an owner changed since (see the module)."""
    if who.user is not None:
        return current_level(conn, who)
    mark = _mark(conn)
    if mark is None:
        return current_level(conn, who)
    assert isinstance(conn, HotConnection)  # `counts_changes` trusts no other connection
    kept = conn.level_memo
    if kept is None or kept[0] != mark or len(kept[1]) >= MAX_AGENTS:
        kept = conn.level_memo = (mark, {})
    level = kept[1].get(who.agent_id)
    if level is None:
        # Read after the mark: a change committed meanwhile moved the count past it.
        level = kept[1][who.agent_id] = current_level(conn, who)
    return level
