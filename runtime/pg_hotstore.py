"""The hot store on PostgreSQL: schema, connection, row-level security, digest and scrub.

The tables and columns are the SQLite hot store's (`tiermem.runtime.hotstore`),
so the projection handlers (`tiermem.runtime.sqlite_apply`) and most reads
run unchanged on both: they are written in the SQL the two engines share,
with `?` placeholders, which `PgConnection.execute` turns into psycopg's.
What differs lives here and in `tiermem.runtime.pg_store`:

* Text columns use the "C" collation, so ordering (timestamps, ids, owner
  keys framed by the unit separator) is byte order, as in SQLite.
* Full-text search uses expression GIN indexes over `to_tsvector('simple',
  ...)` (lower-cased words, no stemming, like FTS5's default tokenizer);
  the episode document weights name, summary, quotes and participants as the
  SQLite ranking does (`tm_episode_doc`).
* `instr` exists as a SQL function, so the visibility fragments of
  `hotstore` (owner keys matched by substring) are the same text here.
* Row-level security: every table holding an agent's rows has a policy that
  lets a role read and write only the rows of the agents mapped to it in
  `tm_agent_roles`, plus the facts without an owner in a shared scope
  (system, agent type, project, override: the query narrows those further to
  the scopes the reader belongs to). The role that owns the tables (the
  projector's, the operator's) is not subject to the policies.
* `quote_vectors` holds the dense vectors of the episodes' passages when
  retrieval uses embeddings (pgvector's `vector` type; `tiermem.runtime.pg_vectors`
  writes and searches it): one row per passage with its episode's agent and
  owner, under the same agent policy, deleted by a trigger with its episode
  or when the episode's quotes change, as in SQLite.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import sql as pgsql

SCHEMA_VERSION = "pg-5"
T = 'TEXT COLLATE "C"'

# (table, columns): the same tables and columns as the SQLite schema.
TABLES: list[tuple[str, str]] = [
    ("meta", f"key {T} PRIMARY KEY, value {T} NOT NULL"),
    (
        "wm_items",
        f"item_id {T} PRIMARY KEY, event_id {T} NOT NULL, agent_id {T} NOT NULL, ts {T} NOT NULL,"
        f' kind {T} NOT NULL, level {T} NOT NULL, "user" {T}, session_id {T}, project_id {T}, task_id {T},'
        f" user_message {T}, agent_response {T}, text {T}, owner {T}, topic {T}",
    ),
    ("folded_turns", f"event_id {T} PRIMARY KEY, episode_id {T} NOT NULL"),
    (
        "identity",
        f"agent_id {T} PRIMARY KEY, content {T} NOT NULL, source {T}, ts {T} NOT NULL, event_id {T} NOT NULL",
    ),
    (
        "facts",
        f"fact_id {T} PRIMARY KEY, agent_id {T} NOT NULL, kind {T} NOT NULL, scope {T} NOT NULL,"
        f" agent_type {T}, project_id {T}, key {T}, content {T} NOT NULL, category {T}, topic {T},"
        f" participant {T}, status {T} NOT NULL, source {T}, is_correction INTEGER NOT NULL DEFAULT 0,"
        f" created_at {T} NOT NULL, updated_at {T} NOT NULL, event_id {T} NOT NULL,"
        f" revision INTEGER NOT NULL DEFAULT 0, source_event_ids {T} NOT NULL DEFAULT '[]',"
        f" recall_count INTEGER NOT NULL DEFAULT 0, owner {T}, original {T}",
    ),
    (
        "episodes",
        f"episode_id {T} PRIMARY KEY, agent_id {T}, name {T}, summary {T}, key_quotes {T}, participants {T},"
        f" start_ts {T}, end_ts {T}, importance INTEGER, important INTEGER, emotional_context {T}, kind {T},"
        f" project_id {T}, source_event_ids {T}, recall_count INTEGER DEFAULT 0, owner {T},"
        " seq BIGSERIAL",  # insertion order: says cheaply whether an agent's archive grew
    ),
    (
        "relationships",
        f"agent_id {T} NOT NULL, participant {T} NOT NULL, summary {T} NOT NULL, rapport DOUBLE PRECISION,"
        f" trust DOUBLE PRECISION, last_spoke_ts {T}, interactions INTEGER, ts {T} NOT NULL,"
        f" event_id {T} NOT NULL, owner {T}, PRIMARY KEY (agent_id, participant)",
    ),
    (
        "retrievals",
        f"event_id {T} PRIMARY KEY, agent_id {T} NOT NULL, ts {T} NOT NULL, tool {T} NOT NULL, query {T},"
        f" participant {T}, item_ids {T} NOT NULL, scores {T}, tokens INTEGER, reason {T}, session_id {T},"
        f" owner {T}",
    ),
    (
        "proposals",
        f"proposal_id {T} PRIMARY KEY, agent_id {T} NOT NULL, origin {T},"
        f" is_correction INTEGER NOT NULL DEFAULT 0, participant {T}, ts {T} NOT NULL, owner {T}",
    ),
    (
        "sessions",
        f"session_id {T} NOT NULL, agent_id {T} NOT NULL, ended_ts {T} NOT NULL, event_id {T} NOT NULL,"
        " PRIMARY KEY (agent_id, session_id)",
    ),
    (
        "notes",
        f"note_id {T} PRIMARY KEY, agent_id {T} NOT NULL, source_event_id {T} NOT NULL, speaker {T} NOT NULL,"
        f" kind {T} NOT NULL, text {T} NOT NULL, ts {T} NOT NULL, owner {T}",
    ),
    ("erasures", f"event_id {T} PRIMARY KEY, target_kind {T} NOT NULL, target {T} NOT NULL, ts {T} NOT NULL"),
    ("erased_ids", f"event_id {T} PRIMARY KEY"),
    ("tm_agent_roles", f"role_name {T} NOT NULL, agent_id {T} NOT NULL, PRIMARY KEY (role_name, agent_id)"),
    (
        # Derived from `episodes` like the full-text index: not content, not in the digest.
        "quote_vectors",
        f"episode_id {T} NOT NULL, idx INTEGER NOT NULL, agent_id {T}, owner {T}, vec {{VECTOR}} NOT NULL,"
        " PRIMARY KEY (episode_id, idx)",
    ),
]

FUNCTIONS = """
CREATE OR REPLACE FUNCTION instr(haystack TEXT, needle TEXT) RETURNS INTEGER
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT strpos(haystack, needle) $$;
CREATE OR REPLACE FUNCTION tm_json_texts(doc TEXT, field TEXT) RETURNS TEXT
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(CASE WHEN field IS NULL THEN e #>> '{}' ELSE e ->> field END, ' '), '')
    FROM jsonb_array_elements(CASE WHEN jsonb_typeof(coalesce(doc, '[]')::jsonb) = 'array'
                                   THEN coalesce(doc, '[]')::jsonb ELSE '[]'::jsonb END) e $$;
CREATE OR REPLACE FUNCTION tm_fact_doc(k TEXT, content TEXT, topic TEXT) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('simple'::regconfig, coalesce(k, '') || ' ' || coalesce(content, '') || ' ' || coalesce(topic, '')) $$;
CREATE OR REPLACE FUNCTION tm_episode_doc(name TEXT, summary TEXT, quotes TEXT, participants TEXT)
    RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT setweight(to_tsvector('simple'::regconfig, coalesce(name, '')), 'A')
        || setweight(to_tsvector('simple'::regconfig, coalesce(summary, '')), 'C')
        || setweight(to_tsvector('simple'::regconfig, tm_json_texts(quotes, 'text')), 'B')
        || setweight(to_tsvector('simple'::regconfig, tm_json_texts(participants, NULL)), 'D') $$;
CREATE OR REPLACE FUNCTION tm_drop_quote_vectors() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN DELETE FROM quote_vectors WHERE episode_id = OLD.episode_id; RETURN NULL; END $$;
CREATE OR REPLACE TRIGGER episodes_vec_ad AFTER DELETE ON episodes
    FOR EACH ROW EXECUTE FUNCTION tm_drop_quote_vectors();
CREATE OR REPLACE TRIGGER episodes_vec_au AFTER UPDATE OF key_quotes, start_ts, agent_id, owner ON episodes
    FOR EACH ROW WHEN ((OLD.key_quotes, OLD.start_ts, OLD.agent_id, OLD.owner)
                       IS DISTINCT FROM (NEW.key_quotes, NEW.start_ts, NEW.agent_id, NEW.owner))
    EXECUTE FUNCTION tm_drop_quote_vectors();
"""

INDEXES = """
CREATE INDEX IF NOT EXISTS wm_agent_owner_level_order ON wm_items (agent_id, owner, level, ts, item_id);
CREATE INDEX IF NOT EXISTS wm_agent_session ON wm_items (agent_id, session_id, ts);
CREATE INDEX IF NOT EXISTS wm_owner ON wm_items (owner);
CREATE INDEX IF NOT EXISTS folded_episode ON folded_turns (episode_id);
CREATE INDEX IF NOT EXISTS facts_agent ON facts (agent_id, status);
CREATE INDEX IF NOT EXISTS facts_owner ON facts (owner);
CREATE INDEX IF NOT EXISTS facts_scope ON facts (scope, status);
CREATE INDEX IF NOT EXISTS facts_key ON facts (key);
CREATE INDEX IF NOT EXISTS facts_fts ON facts USING gin (tm_fact_doc(key, content, topic));
CREATE INDEX IF NOT EXISTS episodes_agent ON episodes (agent_id, end_ts);
CREATE INDEX IF NOT EXISTS episodes_owner ON episodes (owner);
CREATE INDEX IF NOT EXISTS episodes_fts ON episodes
    USING gin (tm_episode_doc(name, summary, key_quotes, participants));
CREATE INDEX IF NOT EXISTS retrievals_agent ON retrievals (agent_id, ts);
CREATE INDEX IF NOT EXISTS notes_source ON notes (source_event_id);
CREATE INDEX IF NOT EXISTS notes_owner ON notes (owner);
CREATE INDEX IF NOT EXISTS quote_vectors_agent ON quote_vectors (agent_id);
"""

# Tables whose rows belong to one agent: each gets the agent policy.
ROLE_MAP = "tm_agent_roles"
READ_ONLY_FOR_AGENTS = ("meta", ROLE_MAP)
AGENT_TABLES = (
    "wm_items",
    "identity",
    "episodes",
    "relationships",
    "retrievals",
    "proposals",
    "sessions",
    "notes",
    "quote_vectors",
)
SHARED_SCOPES = "('system', 'agent_type', 'project', 'override')"
MINE = "agent_id IN (SELECT r.agent_id FROM tm_agent_roles r WHERE r.role_name = current_user)"

# Content tables (as in the SQLite store); `seq` is insertion order, not content.
DIGEST_TABLES = (
    "wm_items",
    "identity",
    "facts",
    "episodes",
    "relationships",
    "retrievals",
    "sessions",
    "proposals",
    "notes",
    "erasures",
    "erased_ids",
)
NOT_CONTENT = {"seq"}


class PgRow(tuple[Any, ...]):
    """A row read by index or by column name, like `sqlite3.Row` (and `dict(row)` works)."""

    _names: tuple[str, ...] = ()

    def keys(self) -> tuple[str, ...]:
        return self._names

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return tuple.__getitem__(self, self._names.index(key))
        return tuple.__getitem__(self, key)


def _row_factory(cursor: Any) -> Any:
    names = tuple(d.name for d in cursor.description or ())
    cls = type("Row", (PgRow,), {"_names": names})

    def make(values: Sequence[Any]) -> PgRow:
        return cls(values)

    return make


@lru_cache(maxsize=512)
def translate(statement: str) -> str:
    """`?` placeholders (outside quoted strings) to psycopg's `%s`; a literal `%` doubled."""
    out = []
    quote = ""
    for ch in statement:
        if quote:
            out.append("%%" if ch == "%" else ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


class PgConnection:
    """A psycopg connection with the `execute(sql, params)` surface the shared SQL is written for.

    Autocommit outside `transaction()`: each read sees the newest committed state.
    """

    dialect = "postgres"

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw
        self.erasure_targets: Any = None  # the handlers' cache of erasure tombstones
        self.episode_index: Any = None
        self.fact_index: Any = None
        self.fact_stats: Any = None

    def execute(self, statement: str, params: Sequence[Any] = ()) -> Any:
        cur = self.raw.cursor(row_factory=_row_factory)
        cur.execute(translate(statement), tuple(params))
        return cur

    def executemany(self, statement: str, seq: Any) -> Any:
        cur = self.raw.cursor()
        rows = [tuple(r) for r in seq]
        if rows:
            cur.executemany(translate(statement), rows)
        return cur

    @contextmanager
    def transaction(self) -> Iterator[PgConnection]:
        with self.raw.transaction():
            yield self

    def close(self) -> None:
        self.raw.close()


def connect(url: str) -> PgConnection:
    return PgConnection(psycopg.connect(url, autocommit=True))


def has_vector(conn: PgConnection) -> bool:
    row = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
    return row is not None


def ensure_schema(conn: PgConnection) -> None:
    """Create the schema once (idempotent); a store of another schema version is dropped first."""
    with conn.transaction():
        # One creator at a time: several processes opening a new store at once.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('tiermem.schema'))")
        exists = conn.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]
        if exists:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is not None and row[0] == SCHEMA_VERSION:
                return
            drop_all(conn)
        vector = "BYTEA"
        avail = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
        if avail is not None:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            vector = "vector"
        for table, cols in TABLES:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols.replace('{VECTOR}', vector)})")
        for statement in _statements(FUNCTIONS) + _statements(INDEXES):
            conn.execute(statement)
        _enable_row_security(conn)
        _grant_mapped_roles(conn)
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (SCHEMA_VERSION,),
        )


def _statements(script: str) -> list[str]:
    # Statements end with ';' at a line end; function bodies are dollar-quoted single statements.
    parts = re.split(r";\s*\n", script)
    return [p.strip() for p in parts if p.strip()]


def _enable_row_security(conn: PgConnection) -> None:
    for table in AGENT_TABLES:
        conn.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        conn.execute(f"CREATE POLICY {table}_agent ON {table} USING ({MINE}) WITH CHECK ({MINE})")
    conn.execute("ALTER TABLE facts ENABLE ROW LEVEL SECURITY")
    conn.execute(
        f"CREATE POLICY facts_read ON facts FOR SELECT USING ({MINE}"
        f" OR (owner IS NULL AND scope IN {SHARED_SCOPES}))"
    )
    for action in ("INSERT", "UPDATE", "DELETE"):
        check = f"WITH CHECK ({MINE})" if action != "DELETE" else ""
        using = f"USING ({MINE})" if action != "INSERT" else ""
        conn.execute(f"CREATE POLICY facts_{action.lower()} ON facts FOR {action} {using} {check}")
    conn.execute("ALTER TABLE tm_agent_roles ENABLE ROW LEVEL SECURITY")
    # The role map survives a rebuild (see `drop_all`), and its policy with it.
    conn.execute("DROP POLICY IF EXISTS tm_agent_roles_own ON tm_agent_roles")
    conn.execute("CREATE POLICY tm_agent_roles_own ON tm_agent_roles USING (role_name = current_user)")


def grant_agent(conn: PgConnection, role: str, agent_ids: Sequence[str]) -> None:
    """Let database role `role` (which must exist) read and write the rows of `agent_ids` only."""
    with conn.transaction():
        _grant_tables(conn, role)
        conn.executemany(
            "INSERT INTO tm_agent_roles (role_name, agent_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
            [(role, a) for a in agent_ids],
        )


def _grant_tables(conn: PgConnection, role: str) -> None:
    r = pgsql.Identifier(role)
    for table, _ in TABLES:
        if table in READ_ONLY_FOR_AGENTS:
            # The store's own settings (schema, vector model, projection position) and the
            # role map are the owner's: an agent's role reads them, and an older grant's
            # writing rights are taken back.
            conn.raw.execute(pgsql.SQL(f"REVOKE INSERT, UPDATE, DELETE ON {table} FROM {{}}").format(r))
            conn.raw.execute(pgsql.SQL(f"GRANT SELECT ON {table} TO {{}}").format(r))
        else:
            conn.raw.execute(pgsql.SQL(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {{}}").format(r))
    conn.raw.execute(pgsql.SQL("GRANT USAGE, SELECT ON SEQUENCE episodes_seq_seq TO {}").format(r))


def _grant_mapped_roles(conn: PgConnection) -> None:
    # Tables created anew carry no rights: the roles already mapped to agents get theirs
    # back, so a rebuild from the log does not lock every agent's connection out.
    # A mapped role dropped from the server since is skipped (its rows stay unreadable).
    rows = conn.execute(
        f"SELECT DISTINCT m.role_name FROM {ROLE_MAP} m JOIN pg_roles r ON r.rolname = m.role_name"
        " ORDER BY m.role_name"
    ).fetchall()
    for (role,) in rows:
        _grant_tables(conn, str(role))


def drop_all(conn: PgConnection, *, keep_role_map: bool = True) -> None:
    """Drop the store's tables. The map of roles to agents is configuration, not derived
    from the log, so a rebuild keeps it unless told otherwise."""
    for table, _ in TABLES:
        if table != ROLE_MAP or not keep_role_map:
            conn.execute(f"DROP TABLE IF EXISTS {table} CASCADE")


def get_meta(conn: PgConnection, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else str(row[0])


def set_meta(conn: PgConnection, key: str, value: str) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def _columns(conn: PgConnection, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = ? ORDER BY ordinal_position",
        (table,),
    ).fetchall()
    return [r[0] for r in rows if r[0] not in NOT_CONTENT]


def store_digest(conn: PgConnection) -> str:
    """Order-independent hash over every content table (rows hashed one by one, then sorted)."""
    h = hashlib.blake2b(digest_size=20)
    for table in DIGEST_TABLES:
        cols = ", ".join(f'"{c}"' for c in _columns(conn, table))
        hashes = sorted(
            hashlib.blake2b(repr(tuple(row)).encode(), digest_size=16).digest()
            for row in conn.execute(f"SELECT {cols} FROM {table}")
        )
        t = hashlib.blake2b(digest_size=16)
        for item in hashes:
            t.update(item)
        h.update(table.encode() + b"=" + t.hexdigest().encode() + b";")
    return h.hexdigest()


def table_counts(conn: PgConnection) -> dict[str, int]:
    return {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in DIGEST_TABLES}


def scrub_after_erasure(conn: PgConnection) -> bool:
    """Rewrite the tables an erasure deletes from, so no dead tuple keeps erased text.

    `VACUUM FULL` writes each table and its indexes to new files and removes
    the old ones; a `CHECKPOINT` then lets the server recycle WAL that held the
    deleted rows. Either may be refused (not the tables' owner, no checkpoint
    right): then False, and the owner's next scrub runs them.
    """
    owner = conn.execute(
        "SELECT pg_has_role(current_user, tableowner, 'MEMBER') FROM pg_tables"
        " WHERE schemaname = current_schema() AND tablename = 'meta'"
    ).fetchone()
    if owner is None or not owner[0]:
        return False  # an agent's connection: VACUUM would skip the tables with a warning only
    complete = True
    for table in (*DIGEST_TABLES, "folded_turns", "quote_vectors"):
        try:
            conn.execute(f"VACUUM FULL {table}")
        except psycopg.Error:
            complete = False
    try:
        conn.execute("CHECKPOINT")
    except psycopg.Error:
        complete = False
    return complete
