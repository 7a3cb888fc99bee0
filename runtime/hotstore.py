"""The hot store: a SQLite projection of the log that the runtime reads.

It holds only derived state (working memory, identity, facts, episodes,
relationships, retrievals, erasure tombstones) and can be deleted and rebuilt
from the log at any time (`tiermem rebuild`). SQLite rather than DuckDB
because many runtime processes read and write it at once: WAL mode lets
readers proceed while one writer commits, and a generous busy timeout turns
writer contention into short waits instead of errors.

Full-text search: `facts_fts` and `episodes_fts` are regular FTS5 tables
(they keep their own copy of the indexed text) whose `rowid` equals the
`rowid` of the row they index in `facts` / `episodes`; triggers keep them in
step, so every writer path (projector, direct apply, a test inserting rows)
indexes the same way. Join with `episodes_fts.rowid = episodes.rowid`.
`episodes_fts` indexes `name`, `summary`, `quotes` (the quote texts of
`key_quotes`, space-joined), `participants` (space-joined) and a token of
the episode's agent (runtime.episode_index says why and how).

`PRAGMA secure_delete=ON` overwrites freed pages with zeros, so erased
content does not linger in the file; after an erasure the FTS indexes are
merged (`optimize`) and the WAL is checkpointed and truncated for the same
reason (see `scrub_after_erasure`).
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tiermem.runtime import episode_index
from tiermem.runtime.visibility_sql import fact_clause as fact_clause
from tiermem.runtime.visibility_sql import item_clause as item_clause
from tiermem.runtime.visibility_sql import owned_by_clause as owned_by_clause
from tiermem.runtime.visibility_sql import owner_clause as owner_clause

from tiermem.settings import Settings
from tiermem.sqlite_wal import ensure_wal

# 2: an `owner` on every row a user's data can reach (see visibility); 3: a fact's `revision` and `original`, `folded_turns`, a turn's `topic`;
# 5: an episode's long columns (key quotes, source ids) stored last
SCHEMA_VERSION = 5
BUSY_TIMEOUT_MS = 30_000
# SQLite's own page cache per connection, in KiB (its default is 2 MB). A recall checks who may see
# each of up to ~1,500 matches by reading its episode row: from this cache that costs about a
# third of reading the page again through the OS (measured at 100k episodes: the candidate query
# 1.8-2.1 -> 1.2-1.5 ms at p50). Pages are taken only as they are read, so a small store stays small.
CACHE_KIB = 65_536

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

-- Working memory: every interaction plus transition/summary items, with its memory level.
-- Order is (ts, item_id): independent of the order in which rows were inserted.
CREATE TABLE IF NOT EXISTS wm_items (
    item_id TEXT PRIMARY KEY,
    event_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    ts TEXT NOT NULL,
    kind TEXT NOT NULL,              -- interaction | transition | summary
    level TEXT NOT NULL,             -- global | project | task
    user TEXT,
    session_id TEXT,
    project_id TEXT,
    task_id TEXT,
    user_message TEXT,
    agent_response TEXT,
    text TEXT,                       -- transition/summary message
    owner TEXT,                      -- the user(s) it belongs to (visibility.owner_key); NULL: agent-level
    topic TEXT                       -- detected from the turn's words (tiermem.topics); NULL: none
);
CREATE INDEX IF NOT EXISTS wm_agent_owner_level_order ON wm_items (agent_id, owner, level, ts, item_id);
CREATE INDEX IF NOT EXISTS wm_agent_session ON wm_items (agent_id, session_id, ts);
CREATE INDEX IF NOT EXISTS wm_agent_turns ON wm_items (agent_id, ts, item_id, kind, owner, event_id, user);
CREATE INDEX IF NOT EXISTS wm_owner ON wm_items (owner);

-- Turns an episode covers (its source events): from then on the episode answers for them.
CREATE TABLE IF NOT EXISTS folded_turns (
    event_id TEXT PRIMARY KEY,
    episode_id TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS folded_episode ON folded_turns (episode_id);

CREATE TABLE IF NOT EXISTS identity (
    agent_id TEXT PRIMARY KEY,
    content TEXT NOT NULL,
    source TEXT,
    ts TEXT NOT NULL,
    event_id TEXT NOT NULL
);

-- Facts: explicit KV facts (kind 'kv', from fact_set/fact_removed) and learned knowledge
-- (kind 'knowledge', from knowledge_decided). scope 'agent' = private to agent_id.
CREATE TABLE IF NOT EXISTS facts (
    fact_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    scope TEXT NOT NULL,
    agent_type TEXT,
    project_id TEXT,
    key TEXT,
    content TEXT NOT NULL,
    category TEXT,
    topic TEXT,
    participant TEXT,
    status TEXT NOT NULL,            -- active | inactive | archived | pending | removed
    source TEXT,                     -- user | agent | system | compressor | gap_fill | auto ...
    is_correction INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    event_id TEXT NOT NULL,          -- the event whose state this row shows
    revision INTEGER NOT NULL DEFAULT 0, -- that event's revision: (ts, revision, event_id) orders versions
    source_event_ids TEXT NOT NULL DEFAULT '[]',
    recall_count INTEGER NOT NULL DEFAULT 0,
    owner TEXT,                      -- the user(s) it was derived from; NULL: shared by its scope
    original TEXT                    -- the full text behind a summarised content (NULL: content is it)
);
CREATE INDEX IF NOT EXISTS facts_agent ON facts (agent_id, status);
CREATE INDEX IF NOT EXISTS facts_owner ON facts (owner);
CREATE INDEX IF NOT EXISTS facts_scope ON facts (scope, status);
CREATE INDEX IF NOT EXISTS facts_key ON facts (key);
CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5(key, content, topic);
CREATE TRIGGER IF NOT EXISTS facts_ai AFTER INSERT ON facts BEGIN
    INSERT INTO facts_fts (rowid, key, content, topic) VALUES (new.rowid, new.key, new.content, new.topic);
END;
CREATE TRIGGER IF NOT EXISTS facts_ad AFTER DELETE ON facts BEGIN
    DELETE FROM facts_fts WHERE rowid = old.rowid;
END;
CREATE TRIGGER IF NOT EXISTS facts_au AFTER UPDATE OF key, content, topic ON facts BEGIN
    DELETE FROM facts_fts WHERE rowid = old.rowid;
    INSERT INTO facts_fts (rowid, key, content, topic) VALUES (new.rowid, new.key, new.content, new.topic);
END;

-- The episodic archive (L2). Agreed with the compressor engineer; do not change lightly.
-- The long columns last: a row's columns are stored in this order, and reading one after a
-- value that spills onto overflow pages walks those pages (the search reads the short ones per match).
CREATE TABLE IF NOT EXISTS episodes (
    episode_id TEXT PRIMARY KEY,
    agent_id TEXT,
    name TEXT,
    summary TEXT,
    participants TEXT,               -- JSON list of names
    start_ts TEXT,
    end_ts TEXT,
    importance INTEGER,
    important INTEGER,
    emotional_context TEXT,
    kind TEXT,
    project_id TEXT,
    recall_count INTEGER DEFAULT 0,
    owner TEXT,                      -- participants and the users of its source turns
    key_quotes TEXT,                 -- JSON [{text, event_id}]
    source_event_ids TEXT            -- JSON list
);
CREATE INDEX IF NOT EXISTS episodes_agent ON episodes (agent_id, end_ts);
CREATE INDEX IF NOT EXISTS episodes_owner ON episodes (owner);
-- episodes_fts and its triggers: runtime.episode_index (`make`, and `ensure_episode_index` below).

-- Notes derived from one turn (absolute dates, who did what), shown and scored with that turn.
CREATE TABLE IF NOT EXISTS notes (
    note_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    source_event_id TEXT NOT NULL,
    speaker TEXT NOT NULL,           -- the side of the turn it was derived from
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    ts TEXT NOT NULL,
    owner TEXT                       -- the users of its source turn
);
CREATE INDEX IF NOT EXISTS notes_source ON notes (source_event_id);
CREATE INDEX IF NOT EXISTS notes_owner ON notes (owner);
-- Counts episodes deleted or re-indexed (inserts raise the newest rowid), so a searcher keeping
-- BM25 ranks per word sees any change of the index's statistics (runtime.fts_ranks); updates of
-- the other columns are counted in the same place by `episodes_changed_ar` (ADDED_INDEXES).
CREATE TRIGGER IF NOT EXISTS episodes_changed_ad AFTER DELETE ON episodes BEGIN
    INSERT INTO meta (key, value) VALUES ('episodes_changed', '1')
        ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;
END;
CREATE TRIGGER IF NOT EXISTS episodes_changed_au AFTER UPDATE OF name, summary, key_quotes, participants ON episodes BEGIN
    INSERT INTO meta (key, value) VALUES ('episodes_changed', '1')
        ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;
END;
-- Counts every change of a note, so a searcher keeping notes in memory sees it (runtime.note_cache).
CREATE TRIGGER IF NOT EXISTS notes_changed_ai AFTER INSERT ON notes BEGIN
    INSERT INTO meta (key, value) VALUES ('notes_changed', '1')
        ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;
END;
CREATE TRIGGER IF NOT EXISTS notes_changed_ad AFTER DELETE ON notes BEGIN
    INSERT INTO meta (key, value) VALUES ('notes_changed', '1')
        ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;
END;
CREATE TRIGGER IF NOT EXISTS notes_changed_au AFTER UPDATE ON notes BEGIN
    INSERT INTO meta (key, value) VALUES ('notes_changed', '1')
        ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;
END;

-- Dense vectors of the episodes' passages (runtime.vectors): derived from `episodes` like the FTS
-- index, filled at projection when retrieval uses embeddings, deleted with their episode.
CREATE TABLE IF NOT EXISTS quote_vectors (
    episode_id TEXT NOT NULL,
    idx INTEGER NOT NULL,            -- position among the episode's passages (runtime.passages)
    vec BLOB NOT NULL,               -- float32 unit vector
    PRIMARY KEY (episode_id, idx)
);
CREATE TRIGGER IF NOT EXISTS episodes_vec_ad AFTER DELETE ON episodes BEGIN
    DELETE FROM quote_vectors WHERE episode_id = old.episode_id;
END;
CREATE TRIGGER IF NOT EXISTS episodes_vec_au AFTER UPDATE OF key_quotes ON episodes BEGIN
    DELETE FROM quote_vectors WHERE episode_id = old.episode_id;
END;
-- Counts deleted vectors, so a searcher holding them in memory sees a deletion without a count(*).
CREATE TRIGGER IF NOT EXISTS quote_vectors_ad AFTER DELETE ON quote_vectors BEGIN
    INSERT INTO meta (key, value) VALUES ('vectors_deleted', '1')
        ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;
END;

CREATE TABLE IF NOT EXISTS relationships (
    agent_id TEXT NOT NULL,
    participant TEXT NOT NULL,
    summary TEXT NOT NULL,
    rapport REAL,
    trust REAL,
    last_spoke_ts TEXT,
    interactions INTEGER,
    ts TEXT NOT NULL,
    event_id TEXT NOT NULL,
    owner TEXT,                      -- = participant
    PRIMARY KEY (agent_id, participant)
);

CREATE TABLE IF NOT EXISTS retrievals (
    event_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    ts TEXT NOT NULL,
    tool TEXT NOT NULL,
    query TEXT,
    participant TEXT,
    item_ids TEXT NOT NULL,          -- JSON list
    scores TEXT,                     -- JSON
    tokens INTEGER,
    reason TEXT,
    session_id TEXT,
    owner TEXT                       -- = participant (the user the memory was delivered for)
);
CREATE INDEX IF NOT EXISTS retrievals_agent ON retrievals (agent_id, ts);

-- Knowledge proposals, kept only for what a decision needs: origin (source trust) and correction flag.
CREATE TABLE IF NOT EXISTS proposals (
    proposal_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    origin TEXT,
    is_correction INTEGER NOT NULL DEFAULT 0,
    participant TEXT,
    ts TEXT NOT NULL,
    owner TEXT
);

CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    ended_ts TEXT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (agent_id, session_id)
);

-- Erasure tombstones: what was erased, so that the same content is never re-added.
CREATE TABLE IF NOT EXISTS erasures (
    event_id TEXT PRIMARY KEY,
    target_kind TEXT NOT NULL,
    target TEXT NOT NULL,
    ts TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS erased_ids (event_id TEXT PRIMARY KEY) WITHOUT ROWID;
"""

# Tables whose content defines the projection (FTS tables and meta are derived from them).
DIGEST_TABLES: dict[str, str] = {
    "wm_items": "item_id",
    "identity": "agent_id",
    "facts": "fact_id",
    "episodes": "episode_id",
    "notes": "note_id",
    "relationships": "agent_id, participant",
    "retrievals": "event_id",
    "sessions": "agent_id, session_id",
    "proposals": "proposal_id",
    "erasures": "event_id",
    "erased_ids": "event_id",
}


# Every column of `episodes` but `recall_count`: an update of any of them is counted in
# `meta.episodes_changed` (the trigger `episodes_changed_ar` below).
EPISODE_KEPT_COLUMNS = (
    "episode_id",
    "agent_id",
    "name",
    "summary",
    "participants",
    "start_ts",
    "end_ts",
    "importance",
    "important",
    "emotional_context",
    "kind",
    "project_id",
    "owner",
    "key_quotes",
    "source_event_ids",
)


def _counting_trigger(name: str, event: str, counter: str) -> str:
    """A trigger that raises `meta.<counter>` by one in the transaction of each `event` (e.g.
    "AFTER DELETE ON notes"), so that a reader keeping what it read sees any commit move it."""
    return (
        f"CREATE TRIGGER IF NOT EXISTS {name} {event} BEGIN"
        f" INSERT INTO meta (key, value) VALUES ('{counter}', '1')"
        " ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1; END"
    )


# Indexes added within a schema version: built on the next open of an existing store,
# instead of a version change, which would drop the store and replay the whole log.
ADDED_INDEXES = (
    # An agent's newest turns whoever they belong to (the search over turns no episode covers yet).
    "CREATE INDEX IF NOT EXISTS wm_agent_turns ON wm_items (agent_id, ts, item_id, kind, owner, event_id, user)",
    _counting_trigger("quote_vectors_ad", "AFTER DELETE ON quote_vectors", "vectors_deleted"),
    _counting_trigger("episodes_changed_ad", "AFTER DELETE ON episodes", "episodes_changed"),
    _counting_trigger(
        "episodes_changed_au",
        "AFTER UPDATE OF name, summary, key_quotes, participants ON episodes",
        "episodes_changed",
    ),
    # Updates of any other column of an episode, counted too: a reader keeping episode rows
    # (runtime.fts_rows) sees a changed date or importance. Not the recall count, which every
    # recall moves (and no reader keeps).
    _counting_trigger(
        "episodes_changed_ar",
        f"AFTER UPDATE OF {', '.join(EPISODE_KEPT_COLUMNS)} ON episodes",
        "episodes_changed",
    ),
    *(
        _counting_trigger(f"notes_changed_{name}", f"AFTER {what} ON notes", "notes_changed")
        for name, what in (("ai", "INSERT"), ("ad", "DELETE"), ("au", "UPDATE"))
    ),
    # Deletes and updates of turns and folds (inserts move the newest rowid): runtime.unfolded_rows.
    *(
        _counting_trigger(f"turns_changed_{name}", f"AFTER {what} ON {table}", "turns_changed")
        for name, what, table in (
            ("wd", "DELETE", "wm_items"),
            ("wu", "UPDATE", "wm_items"),
            ("fd", "DELETE", "folded_turns"),
            ("fu", "UPDATE", "folded_turns"),
        )
    ),
    # Any change of an item without an owner (what an agent-level read sees): runtime.level_cache.
    *(
        _counting_trigger(f"levels_changed_{name}", f"AFTER {what} ON wm_items WHEN {when}", "levels_changed")
        for name, what, when in (
            ("wi", "INSERT", "NEW.owner IS NULL"),
            ("wd", "DELETE", "OLD.owner IS NULL"),
            ("wu", "UPDATE", "OLD.owner IS NULL OR NEW.owner IS NULL"),
        )
    ),
)


# Who may see each episode (its agent and owner), copied into narrow rows under the same rowid:
# the search checks every match it walks (up to ~1,500 per question, most of them other readers'
# on a shared archive), and these rows fit in the page cache where the wide episode rows do not.
# The triggers keep it equal to the episodes' (rowid, agent_id, owner) in the transaction of every
# change; the last one named is how a reader knows the copy is kept. Every store gets the table,
# filled, and its triggers from `_ensure_episode_access` (a new one empty, an older one at its next open).
EPISODE_ACCESS_TABLE = (
    "CREATE TABLE IF NOT EXISTS episode_access (rowid INTEGER PRIMARY KEY, agent_id TEXT, owner TEXT)"
)
EPISODE_ACCESS_TRIGGER = "episode_access_au"
EPISODE_ACCESS = (
    "CREATE TRIGGER IF NOT EXISTS episode_access_ai AFTER INSERT ON episodes BEGIN"
    " INSERT OR REPLACE INTO episode_access (rowid, agent_id, owner) VALUES (new.rowid, new.agent_id, new.owner);"
    " END",
    "CREATE TRIGGER IF NOT EXISTS episode_access_ad AFTER DELETE ON episodes BEGIN"
    " DELETE FROM episode_access WHERE rowid = old.rowid; END",
    f"CREATE TRIGGER IF NOT EXISTS {EPISODE_ACCESS_TRIGGER} AFTER UPDATE OF agent_id, owner ON episodes BEGIN"
    " DELETE FROM episode_access WHERE rowid = old.rowid;"
    " INSERT OR REPLACE INTO episode_access (rowid, agent_id, owner) VALUES (new.rowid, new.agent_id, new.owner);"
    " END",
)


# How many episodes the store holds, kept in `meta.episodes_count` by triggers in the transaction of
# every insert and delete: counting them walks the whole table (0.3 s at 1M episodes), which every
# process's first search of a store paid (runtime.archive_stats). The last one named is how a reader
# knows the count is kept. (A REPLACE's implicit delete fires no trigger, here as for the index's
# and `episode_access`'s: episodes are written `ON CONFLICT DO NOTHING`, runtime.sqlite_apply.)
EPISODE_COUNT_TRIGGER = "episodes_count_ad"
EPISODE_COUNT = (
    "CREATE TRIGGER IF NOT EXISTS episodes_count_ai AFTER INSERT ON episodes BEGIN"
    " INSERT INTO meta (key, value) VALUES ('episodes_count', '1')"
    " ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1; END",
    f"CREATE TRIGGER IF NOT EXISTS {EPISODE_COUNT_TRIGGER} AFTER DELETE ON episodes BEGIN"
    " UPDATE meta SET value = CAST(value AS INTEGER) - 1 WHERE key = 'episodes_count'; END",
)


def _ensure_episode_count(conn: sqlite3.Connection) -> None:
    """Give a store made before `meta.episodes_count` its triggers and its count (`_ensure_kept`); a
    read-only store is left as it is, its episodes counted by the readers that need them
    (`episode_count`)."""
    _ensure_kept(
        conn,
        EPISODE_COUNT_TRIGGER,
        (
            *EPISODE_COUNT,
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('episodes_count', (SELECT count(*) FROM episodes))",
        ),
    )


def episode_count(conn: sqlite3.Connection, newest: int | None = None) -> int:
    """The store's episodes (with rowids up to `newest`, the newest one read by the caller's version):
    the kept count where the store keeps one and no episode was added past `newest`, else counted."""
    if _has_trigger(conn, EPISODE_COUNT_TRIGGER):
        kept, top = conn.execute(
            "SELECT (SELECT value FROM meta WHERE key = 'episodes_count'), (SELECT max(rowid) FROM episodes)"
        ).fetchone()
        if kept is not None and (newest is None or (top or 0) == newest):
            return int(kept)
    if newest is None:
        return int(conn.execute("SELECT count(*) FROM episodes").fetchone()[0])
    return int(conn.execute("SELECT count(*) FROM episodes WHERE rowid <= ?", [newest]).fetchone()[0])


def _ensure_episode_access(conn: sqlite3.Connection) -> None:
    """Give a store made before `episode_access` the table, its triggers and its rows (`_ensure_kept`).
    A store opened read-only is left as it is: its searches check the episode rows themselves
    (`keeps_episode_access`)."""
    _ensure_kept(
        conn,
        EPISODE_ACCESS_TRIGGER,
        (
            EPISODE_ACCESS_TABLE,
            "DELETE FROM episode_access",  # rows left without their triggers may be stale
            "INSERT INTO episode_access (rowid, agent_id, owner) SELECT rowid, agent_id, owner FROM episodes",
            *EPISODE_ACCESS,
        ),
    )


def _ensure_kept(conn: sqlite3.Connection, trigger: str, statements: Sequence[str]) -> None:
    """Run `statements` (what a store made before `trigger` lacks: a copy or count kept by triggers,
    filled, and its triggers) unless the store has `trigger`.

    In one write transaction, asked again inside it: two processes opening the
    same older store both find it missing, and the second finds it done, and no
    writer's change can fall between what is filled and its triggers. A store
    that cannot be written here (opened read-only) is left as it is.
    """
    if _has_trigger(conn, trigger):
        return
    try:
        with write_transaction(conn):
            if _has_trigger(conn, trigger):
                return
            for statement in statements:
                conn.execute(statement)
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_READONLY:
            raise


def _has_trigger(conn: sqlite3.Connection, name: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?", [name]).fetchone()
        is not None
    )


# Making the episode index again holds the write lock throughout (1.6 s at 100k episodes, 20 s at
# 1M): an opener that finds the lock taken waits no longer than this and leaves the store as it is
# (its searches do without the token; the next open asks again), so openers do not queue behind it.
INDEX_LOCK_WAIT_MS = 200


def ensure_episode_index(conn: sqlite3.Connection) -> bool:
    """Make the episode index again where the store's is not runtime.episode_index's; True if this
    call did.

    In one write transaction, the definition asked again inside it, for the
    reasons of `_ensure_episode_access`. A store opened read-only, or whose
    write lock another connection holds for longer than `INDEX_LOCK_WAIT_MS`
    (maybe making it), keeps the index it has. Writers wait for the whole
    rebuild, within their own busy timeout.
    """
    if episode_index.defined(conn):
        return False
    waits = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
    conn.execute(f"PRAGMA busy_timeout={INDEX_LOCK_WAIT_MS}")
    try:
        with write_transaction(conn):
            if episode_index.defined(conn):
                return False
            episode_index.make(conn)
        with contextlib.suppress(sqlite3.OperationalError):
            # The old index's pages went through the WAL (half a gigabyte at 1M episodes): folded
            # into the file and the WAL cut, unless a reader holds it.
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return True
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_BUSY):
            raise
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout={waits}")


def _schema_facts(conn: sqlite3.Connection) -> tuple[bool, bool]:
    """(whether the store keeps `episode_access`, whether its episode index holds agent tokens),
    asked again whenever the schema cookie moves (a trigger dropped or an index made again by
    another connection moves it)."""
    cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
    known: tuple[int, tuple[bool, bool]] | None = getattr(conn, "schema_known", None)
    if known is not None and known[0] == cookie:
        return known[1]
    facts = (
        _has_trigger(conn, EPISODE_ACCESS_TRIGGER),
        episode_index.defined(conn),
    )
    if isinstance(conn, HotConnection):
        conn.schema_known = (cookie, facts)
    return facts


def keeps_episode_access(conn: sqlite3.Connection) -> bool:
    """Whether this store keeps `episode_access` (its triggers are there)."""
    return _schema_facts(conn)[0]


def indexes_agents(conn: sqlite3.Connection) -> bool:
    """Whether this store's episode index holds each episode's agent token (runtime.episode_index)."""
    return _schema_facts(conn)[1]


class HotConnection(sqlite3.Connection):
    """A hot-store connection; carries per-connection caches (erasure targets)."""

    erasure_targets: Any = None
    # The episode search's candidate matches, valid while the store is unchanged (`episode_search`).
    candidate_memo: Any = None
    # Agents' current levels, valid while the store's agent-level items are unchanged (`level_cache`).
    level_memo: Any = None
    # Whether the store has each change-counting trigger asked about (`counts_changes`).
    counting_triggers: dict[str, bool] | None = None
    # (schema cookie, `_schema_facts`): what the store's schema says, while the cookie holds.
    schema_known: tuple[int, tuple[bool, bool]] | None = None
    database_file: str | None = (
        None  # `database_key`, once asked (a connection's main database never changes)
    )


def counts_changes(conn: sqlite3.Connection, trigger: str) -> bool:
    """Whether a per-process cache may trust this connection's change counter kept by `trigger`.

    Not inside a transaction (a rollback does not take the count back), and not
    on a store without the trigger (one opened by an older writer never counts).
    """
    if not isinstance(conn, HotConnection) or conn.in_transaction:
        return False
    known = conn.counting_triggers
    if known is None:
        known = conn.counting_triggers = {}
    if trigger not in known:
        known[trigger] = _has_trigger(conn, trigger)
    return known[trigger]


def change_count(conn: sqlite3.Connection, counter: str) -> tuple[int, str]:
    """(SQLite's schema cookie, `meta.<counter>`): what a cache kept under a change counter checks."""
    cookie = conn.execute("PRAGMA schema_version").fetchone()[0]
    row = conn.execute("SELECT value FROM meta WHERE key = ?", [counter]).fetchone()
    return int(cookie), str(row[0]) if row else "0"


def erasure_mark(conn: Any) -> int:
    """How far the store's erasures have gone (they are only ever added): a per-process cache of
    texts read before a larger mark drops them, so that erased words do not stay in memory even
    where no search would serve them any more."""
    if isinstance(conn, sqlite3.Connection):
        row = conn.execute("SELECT max(rowid) FROM erasures").fetchone()
    elif getattr(conn, "episode_index", None) is not None:  # another backend (PostgreSQL)
        row = conn.execute("SELECT count(*) FROM erasures").fetchone()
    else:  # no store behind it (a stand-in that serves episodes only): nothing was erased
        return 0
    return int(row[0] or 0)


def database_key(conn: Any) -> str:
    """Which store a connection reads, for the per-process caches keyed by it (several may be open).

    A backend other than SQLite names itself through its episode index.
    """
    index = getattr(conn, "episode_index", None)
    if index is not None:
        return str(index.version(conn)[0])
    known = getattr(conn, "database_file", None)
    if known is not None:
        return str(known)
    key = str(conn.execute("PRAGMA database_list").fetchone()[2])
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    except sqlite3.OperationalError:  # no store here yet
        row = None
    if row is not None:
        key = f"{key}#{row[0]}"
    if isinstance(conn, HotConnection):
        conn.database_file = key
    return key


def connect(path: Path | str, *, create: bool = True) -> sqlite3.Connection:
    """Open the hot store with WAL, a busy timeout and secure delete; create the schema."""
    path = Path(path)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
        factory=HotConnection,
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA secure_delete=ON")
    conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
    # The hot store is rebuildable from the log, so NORMAL (no fsync per commit in WAL) is enough.
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=OFF")
    # Asked after the file is read and switched with waits: a worker opening the store while
    # another commits was answered "database is locked" by a switch it did not need.
    ensure_wal(conn)
    if create:
        _ensure_schema(conn)
    return conn


# Which store this file holds: a store rebuilt at the same path (same schema, same counters)
# must not meet the per-process caches of the one it replaced.
_NEW_STORE_ID = "INSERT OR REPLACE INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))))"


def _ensure_schema(conn: sqlite3.Connection) -> None:
    row = conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
    stale = False
    if row is not None:
        version = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if version is not None and int(version[0]) == SCHEMA_VERSION:
            for statement in ADDED_INDEXES:
                conn.execute(statement)  # a no-op once built
            if conn.execute("SELECT 1 FROM meta WHERE key = 'store_id'").fetchone() is None:
                conn.execute(_NEW_STORE_ID)  # a store made before stores had one
            _ensure_episode_access(conn)
            _ensure_episode_count(conn)
            ensure_episode_index(conn)
            return
        stale = version is not None
    with write_transaction(conn):
        if stale:
            # A store written by another schema version: it holds only derived state, so it is
            # dropped (with the projector's position in `meta`) and the next projection replays the log.
            _drop_all(conn)
        for statement in _split_statements(SCHEMA):
            conn.execute(statement)
        episode_index.make(conn)
        for statement in ADDED_INDEXES:
            conn.execute(statement)  # what a new store needs beyond SCHEMA (a no-op for what it holds)
        conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        conn.execute(_NEW_STORE_ID)
    _ensure_episode_access(conn)
    _ensure_episode_count(conn)


def _drop_all(conn: sqlite3.Connection) -> None:
    for kind in ("trigger", "index", "table"):
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type=? AND name NOT LIKE 'sqlite_%'", (kind,)
            )
        ]
        for name in names:
            if (
                kind == "table"
                and not conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)
                ).fetchone()
            ):
                continue  # a shadow table of an FTS table dropped just before
            conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')


def _split_statements(script: str) -> Iterator[str]:
    """Split the schema into statements (sqlite3.complete_statement handles trigger bodies)."""
    buf = ""
    for line in script.splitlines(keepends=True):
        if line.strip().startswith("--") and not buf.strip():
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                yield buf.strip()
            buf = ""


def open_hot_store(settings: Settings) -> sqlite3.Connection:
    return connect(settings.hot_db)


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT: take the write lock up front so two writers never deadlock."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def get_meta(conn: sqlite3.Connection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))


def table_digest(conn: sqlite3.Connection, table: str) -> str:
    """Order-independent hash of one table's rows (without SQLite's rowid)."""
    cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
    hashes = []
    for row in conn.execute(f"SELECT {', '.join(cols)} FROM {table}"):
        hashes.append(hashlib.blake2b(repr(tuple(row)).encode(), digest_size=16).digest())
    hashes.sort()
    h = hashlib.blake2b(digest_size=16)
    for item in hashes:
        h.update(item)
    return h.hexdigest()


def store_digest(conn: sqlite3.Connection) -> str:
    """Hash over every content table, independent of row order and insertion history."""
    h = hashlib.blake2b(digest_size=20)
    for table in DIGEST_TABLES:
        h.update(table.encode() + b"=" + table_digest(conn, table).encode() + b";")
    return h.hexdigest()


def table_counts(conn: sqlite3.Connection) -> dict[str, int]:
    return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in DIGEST_TABLES}


def scrub_after_erasure(conn: sqlite3.Connection) -> bool:
    """Make erased text unrecoverable from the file; True when every step ran.

    FTS segments are merged (a deleted row's terms otherwise linger in older
    segments), the WAL is checkpointed into the database and truncated,
    VACUUM rewrites the database without its free pages, and the WAL it
    wrote is truncated again. `secure_delete` already zeroes pages as rows are
    deleted; VACUUM also drops the free-list and any page a crash left behind.
    A reader holding a snapshot can block the checkpoint or VACUUM: then they
    are skipped (False), and the next erasure or `tiermem seal` runs them.
    """
    conn.execute("INSERT INTO facts_fts (facts_fts) VALUES ('optimize')")
    conn.execute("INSERT INTO episodes_fts (episodes_fts) VALUES ('optimize')")
    complete = True
    for statement in ("PRAGMA wal_checkpoint(TRUNCATE)", "VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)"):
        try:
            row = conn.execute(statement).fetchone()
        except sqlite3.OperationalError:
            complete = False
            continue
        if statement.startswith("PRAGMA") and row is not None and row[0]:
            complete = False  # busy: some frames could not be checkpointed
    return complete


# The visibility rules in this backend's SQL (`item_clause`, `fact_clause`, ...) are
# runtime.visibility_sql's, imported above for the readers that take them from here.
