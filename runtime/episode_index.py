"""The episode archive's full-text index: its definition, what fills it, and its agent token.

`episodes_fts` holds one document per episode, under the episode's rowid, in
five columns: `name`, `summary`, `quotes` (the texts of `key_quotes`,
space-joined), `participants` (space-joined) and `agent`, one token naming
the episode's agent (`agent_token`). Triggers on `episodes` keep it in step
in the transaction of every insert, delete and change (runtime.hotstore
creates them from `TRIGGERS`), so every writer indexes the same way.

Why the agent's token: a store is shared by many agents, and a search only
ever returns the reading agent's own episodes. The words of a question are
common across the whole archive, so a candidate try walked every agent's
documents holding its words to find the few of this agent: with 1,000 agents
of 100 episodes each, one agent's recall took 14.7 ms at p99 where it takes
2.9 ms alone, and 105 ms among 10,000 agents. A try ANDed with the agent's
token (`agent_phrase`) lets the index skip from one of this agent's
documents to the next (the token's documents are in rowid order, like every
word's), so the walk follows the agent's own archive, not the store's.

The token is `TOKEN_MARK` then the agent id's UTF-8 bytes in lower-case hex:
one token (letters and digits) under FTS5's default tokenizer, another for
every other agent id (hex is one-to-one; FTS5 cuts a token past 32,768
bytes, so ids longer than 16,383 bytes may share one, and an empty id has
the mark alone: the search checks each match's agent on its row all the
same, the token only narrows), and never matched by a query word
of the searches, which are ASCII letters and digits (no ASCII prefix covers
a token that starts with a Greek letter). The agent's phrase is filtered to
its column, so a text elsewhere that spells some agent's token matches
nothing.

Ranks: `bm25()` sums a part per phrase of the query. The searches weigh the
agent column 0 in both rankings, so the agent's phrase adds exactly 0.0 to
every rank, and a try ranks the same, bit for bit, with or without it. The
column does add a token to every document's length and to the table's
average, so ranks differ slightly from a store indexed without it.

A store indexed before the column (or otherwise) is indexed again from its
episodes, at once, in one write transaction at its next open
(runtime.hotstore: `ensure_episode_index`); one opened read-only, or met while another
connection holds the write lock, keeps its index, and its searches do
without the token (`defined` says which is which).
"""

from __future__ import annotations

import sqlite3

# What sqlite_master holds for the index (SQLite stores the statement without IF NOT EXISTS).
DEFINITION = "CREATE VIRTUAL TABLE episodes_fts USING fts5(name, summary, quotes, participants, agent)"
COLUMNS = 5  # name, summary, quotes, participants, agent
TOKEN_MARK = "α"
TRIGGER_NAMES = ("episodes_ai", "episodes_ad", "episodes_au")


def agent_token(agent_id: str) -> str:
    """The one token the index holds, in the agent column, for each episode of `agent_id`."""
    return TOKEN_MARK + agent_id.encode().hex()


def agent_phrase(agent_id: str) -> str:
    """An FTS5 MATCH phrase for the agent's episodes: its token, in the agent column only."""
    return f'agent : "{agent_token(agent_id)}"'


def _document(row: str) -> str:
    """The index's columns for the episode row named `row` (`new` in a trigger), after its rowid.

    SQLite's `hex()` of a text is its UTF-8 bytes (the store's encoding), as `agent_token`'s."""
    return (
        f"{row}.rowid, {row}.name, {row}.summary,"
        f" (SELECT group_concat(json_extract(value, '$.text'), ' ')"
        f" FROM json_each(coalesce({row}.key_quotes, '[]'))),"
        f" (SELECT group_concat(value, ' ') FROM json_each(coalesce({row}.participants, '[]'))),"
        f" '{TOKEN_MARK}' || lower(hex({row}.agent_id))"
    )


_INTO = "INSERT INTO episodes_fts (rowid, name, summary, quotes, participants, agent)"
# Every episode, indexed as the insert trigger indexes one.
FILL = f"{_INTO} SELECT {_document('e')} FROM episodes e"
TRIGGERS = (
    f"CREATE TRIGGER IF NOT EXISTS episodes_ai AFTER INSERT ON episodes BEGIN"
    f" {_INTO} VALUES ({_document('new')}); END",
    "CREATE TRIGGER IF NOT EXISTS episodes_ad AFTER DELETE ON episodes BEGIN"
    " DELETE FROM episodes_fts WHERE rowid = old.rowid; END",
    # The agent too: an episode moved to another agent is found with that agent's token.
    "CREATE TRIGGER IF NOT EXISTS episodes_au"
    " AFTER UPDATE OF agent_id, name, summary, key_quotes, participants ON episodes BEGIN"
    " DELETE FROM episodes_fts WHERE rowid = old.rowid;"
    f" {_INTO} VALUES ({_document('new')}); END",
)


def defined(conn: sqlite3.Connection) -> bool:
    """Whether the store's episode index is the one defined here (with the agent column)."""
    row = conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'episodes_fts'"
    ).fetchone()
    return row is not None and row[0] == DEFINITION


def make(conn: sqlite3.Connection) -> None:
    """(Inside a write transaction.) The index, its triggers and a document per episode, in place of
    whatever index and triggers were there."""
    for name in TRIGGER_NAMES:
        conn.execute(f"DROP TRIGGER IF EXISTS {name}")
    conn.execute("DROP TABLE IF EXISTS episodes_fts")
    conn.execute(DEFINITION)
    conn.execute(FILL)
    for statement in TRIGGERS:
        conn.execute(statement)
