"""The server hot store: `HotStore` on PostgreSQL, selected by `hot_url = "postgresql://..."`.

Many runtime processes on several machines share one database. The schema,
connection and row-level security are `tiermem.runtime.pg_hotstore`'s; the
projection handlers (`sqlite_apply`) and the reads of working memory
(`levels`), facts (`scopes`), episodes (`episode_search`) and unfolded turns
(`unfolded`) are the same code as the SQLite backend's, written in the SQL
both engines accept. Only full-text search is this module's own: Postgres
`tsvector` GIN indexes replace FTS5 (`FactIndex`, `EpisodeIndex`), and the
scoring above them is shared, so the two backends rank alike (agreement
measured in bench/RESULTS.md).

The projector runs once per store, not once per process: `projector_lease`
is a session-level advisory lock in the database, held while a pass runs and
released by the server if the holder's connection dies (the lease's expiry).

With embeddings (retrieval.mode hybrid or dense), passages are embedded at
projection into pgvector (`tiermem.runtime.pg_vectors`) and quote searches
fuse them with the lexical side through the same `quote_search.DenseSearch`
as on SQLite; lexical mode (the default) writes and reads no vectors.
"""

from __future__ import annotations

import dataclasses
import math
import re
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from tiermem.runtime import pg_hotstore, sqlite_apply
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import database_key, item_clause
from tiermem.runtime.pg_hotstore import PgConnection
from tiermem.runtime.pg_vectors import PgVectorIndex
from tiermem.runtime.query_expansion import expansion_for
from tiermem.runtime.quote_search import DenseSearch
from tiermem.runtime.rerank import reranker_for
from tiermem.runtime.sqlite_store import dense_search
from tiermem.runtime.store import ProjectionInfo
from tiermem.runtime.store_reads import SharedReads
from tiermem.runtime.visibility import Principal

from tiermem.registry import EVENT_TYPES
from tiermem.settings import Settings

LEASE_KEY = "tiermem.projector"
DF_CAP = 20_000  # documents counted per term at most: above that a term weighs next to nothing anyway
EPISODE_DOC = "tm_episode_doc(e.name, e.summary, e.key_quotes, e.participants)"
FACT_DOC = "tm_fact_doc(f.key, f.content, f.topic)"
_MATCH_TERM = re.compile(r'"([^"]+)"')


def _weights(column_weights: Sequence[float] | None) -> str:
    """FTS5's column weights as ts_rank's array, in its order {D, C, B, A}, scaled to at most 1.

    `tm_episode_doc` labels name A, quotes B, summary C, participants D. FTS5's fifth column (the
    agent's token, weighed 0: runtime.episode_index) has no counterpart here.
    """
    if not column_weights:
        return "'{1, 1, 1, 1}'"
    name, summary, quotes, participants = column_weights[:4]
    top = max(name, summary, quotes, participants)
    return "'{" + ", ".join(str(w / top) for w in (participants, summary, quotes, name)) + "}'"


def _tsterm(term: str) -> str:
    """One query term as tsquery text: a stem of 4+ characters matches as a prefix (as in FTS5)."""
    clean = re.sub(r"[^\w]", "", term)
    return f"'{clean}':*" if len(clean) >= 4 else f"'{clean}'"


def _tsquery(match: str) -> str:
    """`scopes.fts_query`'s FTS5 OR-query of quoted words as tsquery text (the same words, OR-ed)."""
    terms = [re.sub(r"[^\w]", "", t) for t in _MATCH_TERM.findall(match)]
    return " | ".join(f"'{t}'" for t in terms if t)


class EpisodeIndex:
    """Episode full text on Postgres: what `episode_search` asks of FTS5, answered from GIN."""

    def frequencies(self, conn: PgConnection, terms: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in terms:
            # Bounded: above DF_CAP documents a term weighs next to nothing and is never a candidate
            # term, and counting every match of a common word would cost more than the search.
            row = conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM episodes e WHERE {EPISODE_DOC} @@ to_tsquery('simple', ?)"
                f" LIMIT {DF_CAP}) AS d",
                (_tsterm(t),),
            ).fetchone()
            out[t] = int(row[0])
        return out

    def version(self, conn: PgConnection) -> tuple[str, int]:
        info = conn.raw.info
        who = conn.execute("SELECT current_user").fetchone()[0]
        newest = conn.execute("SELECT last_value FROM episodes_seq_seq").fetchone()[0]
        return f"pg:{info.host}:{info.port}/{info.dbname}/{who}", int(newest or 0)

    def documents(self, conn: PgConnection) -> int:
        """Episodes in the archive (BM25's N): the planner's estimate on a large table, else counted."""
        estimate = float(
            conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'episodes'::regclass").fetchone()[0]
        )
        if estimate >= 50_000:
            return int(estimate)
        return max(int(conn.execute("SELECT count(*) FROM episodes").fetchone()[0]), 1)

    def agent_frequency(self, conn: PgConnection, agent_id: str, term: str) -> int:
        row = conn.execute(
            f"SELECT count(*) FROM episodes e WHERE e.agent_id = ? AND {EPISODE_DOC} @@ to_tsquery('simple', ?)",
            (agent_id, _tsterm(term)),
        ).fetchone()
        return int(row[0])

    def candidates(
        self,
        conn: PgConnection,
        who: Principal,
        cols: str,
        column_weights: Sequence[float] | None,
        terms: list[str],
        frequencies: dict[str, int],
        participant: str | None,
        limit: int,
        fallback: int,
    ) -> list[Any]:
        from tiermem.runtime.fts_terms import candidate_matches

        where, params = item_clause(who, "e")
        if participant:
            where += (
                " AND EXISTS (SELECT 1 FROM jsonb_array_elements_text(coalesce(e.participants, '[]')::jsonb)"
                " AS p(value) WHERE lower(p.value) = lower(?))"
            )
            params.append(participant)
        if terms:
            # Each term's ts_rank weighted by its IDF over the archive, as BM25 weighs terms
            # (ts_rank alone lets a common word count as much as a rare one); negated, as
            # FTS5's bm25: smaller is better.
            docs = self.documents(conn)
            present = [t for t in terms if frequencies.get(t)]
            idf = {
                t: max(math.log((docs - frequencies[t] + 0.5) / (frequencies[t] + 0.5)), 1e-6)
                for t in present
            }
            weights = _weights(column_weights)
            rank = " + ".join(
                f"{idf[t]!r} * ts_rank({weights}, {EPISODE_DOC}, to_tsquery('simple', ?), 1)" for t in present
            )
            statement = (
                f"SELECT {cols}, -({rank or '0'}) AS rank FROM episodes e, to_tsquery('simple', ?) AS q"
                f" WHERE {EPISODE_DOC} @@ q AND {where} ORDER BY rank, e.episode_id LIMIT {int(limit)}"
            )
            per_term = [_tsterm(t) for t in present]
            for match in candidate_matches(frequencies, _tsterm):
                tsquery = match.replace(" OR ", " | ").replace(" AND ", " & ")
                found = conn.execute(statement, (*per_term, tsquery, *params)).fetchall()
                if found:
                    return list(found)
        statement = (
            f"SELECT {cols}, 0.0 AS rank FROM episodes e WHERE {where}"
            " ORDER BY importance DESC, end_ts DESC LIMIT ?"
        )
        return list(conn.execute(statement, (*params, fallback)).fetchall())


K1, B = 1.2, 0.75  # FTS5's bm25 constants
_TOKEN = re.compile(r"[^\W_]+")


def _tokens(text: str | None) -> list[str]:
    """Words as FTS5's default tokenizer sees them: runs of letters and digits, lower-cased."""
    return _TOKEN.findall((text or "").lower())


class FactStats:
    """Document count and average length of the fact index (BM25's N and avgdl), per connection.

    Exact on a small table; from the planner's row estimate and a sample on a
    large one, refreshed when the estimate moves by a tenth.
    """

    def __init__(self) -> None:
        self.rows = -1.0
        self.values = (1, 1.0)

    def get(self, conn: PgConnection) -> tuple[int, float]:
        estimate = float(
            conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'facts'::regclass").fetchone()[0]
        )
        if estimate >= 50_000 and self.rows > 0 and abs(estimate - self.rows) < 0.1 * self.rows:
            return self.values
        sample = "TABLESAMPLE SYSTEM (5)" if estimate >= 50_000 else ""
        n, total = conn.execute(
            "SELECT count(*), coalesce(sum(regexp_count("
            "coalesce(key, '') || ' ' || content || ' ' || coalesce(topic, ''), '[[:alnum:]]+')), 0)"
            f" FROM facts {sample}"
        ).fetchone()
        docs = int(estimate) if sample else int(n)
        self.rows = estimate
        self.values = (max(docs, 1), max(float(total) / max(int(n), 1), 1.0))
        return self.values


def fact_rows(
    conn: PgConnection, cols: str, match: str, where: str, params: list[Any], limit: int
) -> list[dict[str, Any]]:
    """The facts matching an FTS5-style OR query, ranked by FTS5's own BM25 (`bm`: smaller is better).

    The index finds the matching rows; each term's document frequency comes
    from the index too (a bounded count), and BM25 is computed here over the
    candidates' words exactly as FTS5 computes it, so both backends order
    facts alike. Candidates are taken in order of an IDF-weighted `ts_rank`,
    twice as many as the search asks for.
    """
    terms = [t for t in (re.sub(r"[^\w]", "", x).lower() for x in _MATCH_TERM.findall(match)) if t]
    if not terms:
        return []
    stats: FactStats = getattr(conn, "fact_stats", None) or FactStats()
    conn.fact_stats = stats
    docs, avgdl = stats.get(conn)
    idf: dict[str, float] = {}
    for t in terms:
        df = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM facts f WHERE {FACT_DOC} @@ to_tsquery('simple', ?)"
            f" LIMIT {DF_CAP}) AS d",
            (f"'{t}'",),
        ).fetchone()[0]
        value = math.log((docs - df + 0.5) / (df + 0.5))
        idf[t] = value if value > 0 else 1e-6
    rank = " + ".join(f"{idf[t]!r} * ts_rank({FACT_DOC}, to_tsquery('simple', ?), 1)" for t in terms)
    statement = (
        f"SELECT {cols}, {rank} AS pre FROM facts f, to_tsquery('simple', ?) AS q"
        f" WHERE {FACT_DOC} @@ q AND f.status = 'active' AND {where} ORDER BY pre DESC, f.fact_id LIMIT ?"
    )
    rows = conn.execute(
        statement, (*(f"'{t}'" for t in terms), _tsquery(match), *params, limit * 2)
    ).fetchall()
    out = []
    for r in rows:
        row = dict(r)
        words = _tokens(row["key"]) + _tokens(row["content"]) + _tokens(row["topic"])
        norm = K1 * (1 - B + B * len(words) / avgdl)
        score = 0.0
        for t in terms:
            tf = words.count(t)
            if tf:
                score += idf[t] * tf * (K1 + 1) / (tf + norm)
        row["bm"] = -score
        out.append(row)
    out.sort(key=lambda row: (row["bm"], row["fact_id"]))
    return out[:limit]  # as many as FTS5 would hand over, the best by the same BM25


def pg_dense_search(settings: Settings) -> DenseSearch | None:
    """The settings' dense side with its vectors in pgvector (None: lexical only).

    The embedder is the one the SQLite store would load (shared per process);
    the weights and candidate counts are the same, so both backends fuse alike.
    """
    dense = dense_search(settings)
    if dense is None:
        return None
    return dataclasses.replace(dense, index=PgVectorIndex(dense.index.embedder))


def _episode_ids(events: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for e in events:
        spec = EVENT_TYPES.get(str(e.get("type")))
        if spec is not None and spec.projection == "episode":
            out.append(str(e["event_id"]))
    return out


def _sql(conn: PgConnection) -> sqlite3.Connection:
    # The shared handlers and reads are typed for sqlite3; they use only execute/executemany
    # and rows read by index or name, which PgConnection provides with the same meaning.
    return cast(sqlite3.Connection, conn)


class PostgresHotStore(SharedReads):
    """`HotStore` on PostgreSQL (see the module doc). `conn` is for tests and benchmarks."""

    def __init__(self, conn: PgConnection, *, create: bool = True, dense: DenseSearch | None = None) -> None:
        self.conn = conn
        # With embeddings: passages' vectors written at projection and searched beside full text.
        self.dense = dense
        conn.episode_index = EpisodeIndex()
        conn.fact_index = fact_rows
        if create:
            pg_hotstore.ensure_schema(conn)

    @classmethod
    def open(cls, settings: Settings) -> PostgresHotStore:
        store = cls.connect(str(settings.hot_url), dense=pg_dense_search(settings))
        store.rerank = reranker_for(settings)
        store.expand = expansion_for(settings)
        return store

    @classmethod
    def connect(cls, url: str, *, create: bool = True, dense: DenseSearch | None = None) -> PostgresHotStore:
        return cls(pg_hotstore.connect(url), create=create, dense=dense)

    @staticmethod
    def remove(settings: Settings) -> None:
        conn = pg_hotstore.connect(str(settings.hot_url))
        try:
            with conn.transaction():
                pg_hotstore.drop_all(conn)
        finally:
            conn.close()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PostgresHotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ projection
    def apply_now(self, events: Iterable[Mapping[str, Any]]) -> ProjectionInfo:
        batch = list(events)
        with self.conn.transaction():
            info = sqlite_apply.apply_events(_sql(self.conn), batch)
            episodes = _episode_ids(batch) if self.dense is not None else []
            if self.dense is not None and episodes:
                # The episodes just applied only: the projector's batches fill any others.
                self.dense.index.index_pending(_sql(self.conn), episodes)
        if info.erasures:
            self.scrub()
        return info

    def apply_batch(
        self, events: Iterable[Mapping[str, Any]], meta: Mapping[str, str], info: ProjectionInfo
    ) -> None:
        with self.conn.transaction():
            sqlite_apply.apply_events(_sql(self.conn), events, info)
            if self.dense is not None:
                self.dense.index.index_pending(_sql(self.conn))
            for key, value in meta.items():
                pg_hotstore.set_meta(self.conn, key, value)

    @contextmanager
    def projector_lease(self, wait: bool = True) -> Iterator[bool]:
        """Hold the store's projector lease (True) or, with `wait=False`, say another holds it (False)."""
        if wait:
            self.conn.execute("SELECT pg_advisory_lock(hashtext(?))", (LEASE_KEY,))
            held = True
        else:
            held = bool(
                self.conn.execute("SELECT pg_try_advisory_lock(hashtext(?))", (LEASE_KEY,)).fetchone()[0]
            )
        try:
            yield held
        finally:
            if held and not self.conn.raw.closed:
                self.conn.execute("SELECT pg_advisory_unlock(hashtext(?))", (LEASE_KEY,))

    def get_meta(self, key: str) -> str | None:
        return pg_hotstore.get_meta(self.conn, key)

    def scrub(self) -> bool:
        self.erased()  # run after every projection that erased something, as on SQLite
        return pg_hotstore.scrub_after_erasure(self.conn)

    def erased(self) -> None:
        TEXTS.erasure_done(database_key(self.conn))  # keyed by the store's own name (its episode index)

    def digest(self) -> str:
        return pg_hotstore.store_digest(self.conn)

    def counts(self) -> dict[str, int]:
        return pg_hotstore.table_counts(self.conn)

    def files(self) -> list[Path]:
        return []

    # ------------------------------------------------------------ reads (runtime.store_reads)
    @property
    def _reads(self) -> sqlite3.Connection:
        return _sql(self.conn)
