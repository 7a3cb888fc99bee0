"""Dense vectors of the remembered turns on PostgreSQL: pgvector instead of the in-memory matrix.

The same passages (`tiermem.runtime.passages`), embedding text and embedder
as `tiermem.runtime.vectors`; only where the vectors live and who finds the
nearest differ. `PgVectorIndex.index_pending` writes one row per passage into
`quote_vectors` (schema in `pg_hotstore`: pgvector's `vector` column, the
episode's agent and owner beside it, so the agent policy covers it), inside
the projection's transaction. Triggers on `episodes` delete the vectors with
their episode or when its quotes change; the next projection re-embeds.

`nearest` is one query ordered by pgvector's cosine distance (`<=>`). As
in memory on SQLite, it is exact up to `EXACT_LIMIT` vectors (a scan of the
table, the same cosines and order as the numpy index) and approximate above:
when a projection by the tables' owner finds more vectors than that, it builds
an HNSW index (built once in bulk: maintaining one from the first row would
cost several milliseconds per passage at projection, more than it saves on a
small table), and searches then use it. The column is declared without a
dimension (the schema does not know the model), so the index is on the cast
to the model's dimension and the approximate search orders by the same cast.
HNSW returns at most `hnsw.ef_search` rows, so that is raised to several
times the candidates asked for. A connection of an agent's role sees (and
finds) only its agent's vectors: row-level security applies to the search as
to every other read; which of them the principal may see is decided
afterwards in SQL on the candidate episodes, as on SQLite.

The model that made the vectors is recorded in `meta` as on SQLite. A switch
is carried out by the tables' owner (the projector): it deletes every vector,
drops the HNSW index (it is built on the old model's dimension) and embeds
every passage again in the projection's transaction; an agent's role cannot
see every row, so it writes no vector under the new model until then, and
its searches find no dense candidates rather than compare models.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import cast

import numpy as np
import orjson
from numpy.typing import NDArray
from tiermem.runtime.passages import episode_passages
from tiermem.runtime.pg_hotstore import PgConnection, get_meta, has_vector, set_meta
from tiermem.runtime.vectors import (
    EMBED_BATCH,
    EXACT_LIMIT,
    LEGACY_MODEL,
    MODEL_KEY,
    VectorIndex,
    embedding_text,
)

from tiermem.embeddings import Embedder
from tiermem.errors import ConfigError
from tiermem.ids import parse_ts

EF_SEARCH_MAX = 1000  # pgvector's upper bound for hnsw.ef_search
EF_PER_CANDIDATE = 4  # HNSW's search breadth per candidate asked for: recall over speed


class VectorExtensionMissingError(ConfigError):
    """Dense retrieval on a PostgreSQL server without the pgvector extension."""


def vector_text(vec: NDArray[np.float32]) -> str:
    """A vector as pgvector's text input, `[x1,x2,...]` (float32 values, shortest exact form)."""
    return "[" + ",".join(repr(float(x)) for x in np.asarray(vec, dtype=np.float32)) + "]"


def _pg(conn: sqlite3.Connection | PgConnection) -> PgConnection:
    # Callers share `episode_search`'s sqlite3-typed signatures; the object is a PgConnection.
    return cast(PgConnection, conn)


class PgVectorIndex(VectorIndex):
    """`VectorIndex` whose vectors live in PostgreSQL and are searched by pgvector (module doc)."""

    def __init__(self, embedder: Embedder) -> None:
        super().__init__(embedder)
        self._checked: set[int] = set()  # connections whose extension and HNSW index were checked

    def _hnsw(self) -> str:
        return f"quote_vectors_hnsw_{int(self.embedder.dim)}"

    def _prepare(self, conn: PgConnection) -> None:
        """Fail clearly without pgvector (once per connection)."""
        if id(conn) in self._checked:
            return
        if not has_vector(conn):
            raise VectorExtensionMissingError(
                "retrieval.mode hybrid/dense on PostgreSQL needs the pgvector extension ('vector')"
            )
        self._checked.add(id(conn))

    @staticmethod
    def _owner(conn: PgConnection) -> bool:
        """Whether this connection's role owns the tables (the projector's, not an agent's)."""
        owner = conn.execute(
            "SELECT pg_has_role(current_user, tableowner, 'MEMBER') FROM pg_tables"
            " WHERE schemaname = current_schema() AND tablename = 'quote_vectors'"
        ).fetchone()
        return owner is not None and bool(owner[0])

    def stored_model(self, conn: sqlite3.Connection | PgConnection) -> str | None:
        pg = _pg(conn)
        recorded = get_meta(pg, MODEL_KEY)
        if recorded is None and pg.execute("SELECT 1 FROM quote_vectors LIMIT 1").fetchone():
            return LEGACY_MODEL
        return recorded

    def _switch(self, conn: PgConnection) -> bool | None:
        """Make this model the store's: None when it already is, True when it was made so here
        (every passage to embed again), False when this role cannot (the owner will)."""
        stored = self.stored_model(conn)
        if stored == self.embedder.identity:
            return None
        if not self._owner(conn):
            # Only the owner decides the store's model: an agent's role sees only its own
            # vectors (row security), so it could take an older store's for an empty one.
            return False
        if stored is None:  # nothing stored yet, nothing to replace
            set_meta(conn, MODEL_KEY, self.embedder.identity)
            return None
        # TRUNCATE, not DELETE: an index built later in this transaction would still read
        # deleted rows of the old dimension (other transactions may see them) and fail.
        conn.execute("TRUNCATE quote_vectors")
        names = conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
            " AND tablename = 'quote_vectors' AND indexname LIKE 'quote_vectors_hnsw_%'"
        ).fetchall()
        for (name,) in names:
            conn.execute(f'DROP INDEX IF EXISTS "{name}"')
        set_meta(conn, MODEL_KEY, self.embedder.identity)
        return True

    def _grow(self, conn: PgConnection) -> None:
        """Past `EXACT_LIMIT` vectors, the tables' owner builds the HNSW index (once)."""
        if conn.execute("SELECT to_regclass(?) IS NOT NULL", (self._hnsw(),)).fetchone()[0]:
            return
        if not self._owner(conn):
            return  # an agent's role cannot create indexes; the projector's next batch does
        rows = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM quote_vectors LIMIT {EXACT_LIMIT + 1}) AS v"
        )
        if int(rows.fetchone()[0]) > EXACT_LIMIT:
            d = int(self.embedder.dim)
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {self._hnsw()} ON quote_vectors"
                f" USING hnsw ((vec::vector({d})) vector_cosine_ops)"
            )

    # ------------------------------------------------------------ projection
    def index_pending(
        self, conn: sqlite3.Connection | PgConnection, episode_ids: Sequence[str] | None = None
    ) -> int:
        """Embed the passages of episodes that have no vectors yet; returns how many (as on SQLite)."""
        pg = _pg(conn)
        self._prepare(pg)
        switched = self._switch(pg)
        if switched is False:
            return 0
        if switched:
            episode_ids = None
        sql = (
            "SELECT e.episode_id, e.key_quotes, e.start_ts, e.agent_id, e.owner FROM episodes e"
            " WHERE NOT EXISTS (SELECT 1 FROM quote_vectors v WHERE v.episode_id = e.episode_id)"
        )
        if episode_ids is None:
            rows = pg.execute(sql).fetchall()
        else:
            rows = pg.execute(f"{sql} AND e.episode_id = ANY(?)", (list(episode_ids),)).fetchall()
        pending: list[tuple[str, int, str | None, str | None, str]] = []
        for episode_id, raw, start_ts, agent_id, owner in rows:
            when = parse_ts(start_ts)
            for p in episode_passages(orjson.loads(raw or "[]")):
                text = embedding_text(p.text, p.speaker, when)
                pending.append((episode_id, p.idx, agent_id, owner, text))
        for s in range(0, len(pending), EMBED_BATCH):
            batch = pending[s : s + EMBED_BATCH]
            vecs = self.embedder.embed([t for *_, t in batch])
            pg.executemany(
                "INSERT INTO quote_vectors (episode_id, idx, agent_id, owner, vec) VALUES (?, ?, ?, ?, ?::vector)"
                " ON CONFLICT (episode_id, idx) DO UPDATE SET agent_id = excluded.agent_id,"
                " owner = excluded.owner, vec = excluded.vec",
                [(e, i, a, o, vector_text(v)) for (e, i, a, o, _), v in zip(batch, vecs, strict=True)],
            )
        if pending:
            self._grow(pg)
        return len(pending)

    # ------------------------------------------------------------ search
    def nearest(
        self, conn: sqlite3.Connection | PgConnection, query: str, limit: int
    ) -> dict[tuple[str, int], float]:
        """(episode_id, passage idx) -> cosine of the `limit` passages nearest to `query`."""
        if limit <= 0:
            return {}
        pg = _pg(conn)
        self._prepare(pg)
        if self.stored_model(pg) != self.embedder.identity:
            return {}
        d = int(self.embedder.dim)
        q = vector_text(self.embedder.embed([query])[0])
        if not pg.execute("SELECT to_regclass(?) IS NOT NULL", (self._hnsw(),)).fetchone()[0]:
            # Exact: the uncast column matches no index, so every vector's cosine is computed.
            rows = pg.execute(
                "SELECT episode_id, idx, 1 - (vec <=> ?::vector) AS cosine FROM quote_vectors"
                " ORDER BY cosine DESC, episode_id, idx LIMIT ?",
                (q, limit),
            ).fetchall()
            return {(str(e), int(i)): float(c) for e, i, c in rows}
        ef = min(max(EF_PER_CANDIDATE * limit, 40), EF_SEARCH_MAX)
        with pg.transaction():
            pg.execute("SELECT set_config('hnsw.ef_search', ?, true)", (str(ef),))
            rows = pg.execute(
                f"SELECT episode_id, idx, 1 - (vec::vector({d}) <=> ?::vector({d})) FROM quote_vectors"
                f" ORDER BY vec::vector({d}) <=> ?::vector({d}) LIMIT ?",
                (q, q, limit),
            ).fetchall()
        return {(str(e), int(i)): float(c) for e, i, c in rows}
