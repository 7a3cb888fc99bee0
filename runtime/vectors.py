"""Dense vectors of the remembered turns, kept in the hot store and searched in numpy.

A remembered turn is one quote of an episode (or one passage of a long
quote, see `tiermem.runtime.passages`). Its vector is computed when the
episode is projected, never when it is searched: `VectorIndex.index_pending`
embeds every quote of the projected episodes that has no vector yet, in
batches, inside the projection's own transaction. Only the query is embedded
at search time.

Storage: `quote_vectors` (episode_id, idx, vec; schema in `hotstore`) with
`vec` the float32 bytes of a unit vector. A trigger on `episodes` deletes an episode's vectors with the
episode, so an erasure (or a rebuild that drops the store) takes them along;
an update of the quotes deletes them too and the next projection re-embeds.
The table is derived from `episodes` like the FTS index is, so it is not part
of the store digest.

Which model made the vectors: `meta.vector_model` holds the embedder's
identity (its name, and for a distilled model the build it came from).
Vectors of two models are never mixed or compared: a projection by an index
whose model differs deletes every vector and embeds every passage again in
its own transaction, and until then a search by the new model finds no dense
candidates (hybrid answers from BM25 alone) rather than comparing its query
with another model's vectors. A store with vectors but no record predates the
record, when all-MiniLM-L6-v2 was the only model.

Search: the vectors of the whole store are held in memory as one matrix,
reloaded when the table changed: its newest rowid grows with every insert (a
re-embedded passage gets a new rowid) and a trigger counts deletions in
`meta.vectors_deleted`, so the check is two index lookups, not a count of
100k rows. Up to `EXACT_LIMIT` rows the query is one matrix-vector product;
above it, a sign-bit prefilter (each vector's signs packed into 64-bit words,
one row of the word matrix per word, Hamming distance by popcount) keeps the
`PREFILTER` nearest rows and only those get the exact cosine. The products run
in numpy's own loops (einsum), not the BLAS: on a shared machine a threaded
BLAS call waits for a descheduled partner, and measured here that made a
2,000-row rerank 15x slower. What a principal may see is decided afterwards in
SQL on the candidate episodes (`episode_search`), as for lexical candidates.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from numpy.typing import NDArray
from tiermem.runtime.hotstore import database_key, get_meta, set_meta
from tiermem.runtime.passages import episode_passages

from tiermem.dates import human_date
from tiermem.embeddings import Embedder, load_embedder
from tiermem.ids import parse_ts

EXACT_LIMIT = 20_000  # above this many vectors, the sign-bit prefilter runs first
PREFILTER = 2_000  # rows kept by the prefilter for the exact cosine
EMBED_BATCH = 256  # quotes embedded per call during projection
MODEL_KEY = "vector_model"  # meta key: the identity of the embedder that made the stored vectors
LEGACY_MODEL = "all-minilm-l6-v2"  # what made vectors stored before the identity was recorded


def embedding_text(text: str, speaker: str, when: datetime) -> str:
    """What is embedded for a turn: `[8 May 2023] Speaker: text`.

    The date and speaker are part of the text because the question often
    names them ("What did Caroline do in May?"); measured on LoCoMo dev, the
    dated form ranks better than the bare utterance.
    """
    who = f"{speaker}: " if speaker else ""
    return f"[{human_date(when)}] {who}{text}"


def to_blob(vec: NDArray[np.float32]) -> bytes:
    return np.asarray(vec, dtype="<f4").tobytes()


def from_blobs(blobs: Sequence[bytes], dim: int) -> NDArray[np.float32]:
    if not blobs:
        return np.zeros((0, dim), dtype=np.float32)
    return np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim).astype(np.float32)


def sign_bits(vectors: NDArray[np.float32]) -> NDArray[np.uint64]:
    """Each row's signs packed into 64-bit words (384 dimensions -> 6 words)."""
    bits = np.packbits(vectors > 0, axis=1)
    pad = (-bits.shape[1]) % 8
    if pad:
        bits = np.pad(bits, ((0, 0), (0, pad)))
    return np.ascontiguousarray(bits).view(np.uint64)


def hamming(words: NDArray[np.uint64], query: NDArray[np.uint64]) -> NDArray[np.uint16]:
    """Hamming distance of every row to `query`, with `words` the (words, rows) transpose of
    `sign_bits`: one pass per word over a contiguous row, counts summed in place."""
    n = words.shape[1]
    out = np.zeros(n, dtype=np.uint16)
    x = np.empty(n, dtype=np.uint64)
    ones = np.empty(n, dtype=np.uint8)
    for w in range(words.shape[0]):
        np.bitwise_xor(words[w], query[w], out=x)
        np.bitwise_count(x, out=ones)
        out += ones
    return out


def closest(distance: NDArray[np.uint16], keep: int) -> NDArray[np.intp]:
    """Rows whose distance is at most the `keep`-th smallest (ties at that bound kept, so a few
    more than `keep`). Distances are small integers: their histogram finds the bound in one pass,
    where a partial sort of 100k rows took five times as long."""
    bound = int(np.searchsorted(np.cumsum(np.bincount(distance)), keep))
    return np.flatnonzero(distance <= bound)


@dataclass
class _Matrix:
    version: tuple[int, str, str] = (-1, "", "")
    keys: list[tuple[str, int]] = field(default_factory=list)
    vectors: NDArray[np.float32] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    # (words, rows): each word of every row's sign bits in one contiguous array
    signs: NDArray[np.uint64] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint64))


class VectorIndex:
    """Embeds projected quotes and finds the nearest ones to a query (see the module doc)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._matrix: dict[str, _Matrix] = {}

    @classmethod
    def load(cls, model: str, cache_dir: Path | None = None) -> VectorIndex:
        return cls(load_embedder(model, cache_dir))

    def stored_model(self, conn: sqlite3.Connection) -> str | None:
        """Identity of the model that made the stored vectors (None: no vectors, no record)."""
        recorded = get_meta(conn, MODEL_KEY)
        if recorded is None and conn.execute("SELECT 1 FROM quote_vectors LIMIT 1").fetchone():
            return LEGACY_MODEL
        return recorded

    def _claim(self, conn: sqlite3.Connection) -> bool:
        """Record this index's model as the store's; True when another model's vectors were dropped."""
        stored = self.stored_model(conn)
        if stored == self.embedder.identity:
            return False
        conn.execute("DELETE FROM quote_vectors")
        set_meta(conn, MODEL_KEY, self.embedder.identity)
        return stored is not None

    # ------------------------------------------------------------ projection
    def index_pending(self, conn: sqlite3.Connection, episode_ids: Sequence[str] | None = None) -> int:
        """Embed the passages of episodes that have no vectors yet; returns how many.

        `episode_ids` limits the look to the episodes just projected (a runtime
        applying its own writes); without it every episode is checked (a
        projector batch, which also fills a store that was lexical before).
        Vectors another model made are replaced, all of them (see the module doc).
        """
        if self._claim(conn):
            episode_ids = None
        sql = (
            "SELECT e.episode_id, e.key_quotes, e.start_ts FROM episodes e"
            " WHERE NOT EXISTS (SELECT 1 FROM quote_vectors v WHERE v.episode_id = e.episode_id)"
        )
        if episode_ids is None:
            rows = conn.execute(sql).fetchall()
        else:
            rows = []
            for s in range(0, len(episode_ids), 400):
                ids = list(episode_ids[s : s + 400])
                marks = ",".join("?" * len(ids))
                rows += conn.execute(f"{sql} AND e.episode_id IN ({marks})", ids).fetchall()
        pending: list[tuple[str, int, str]] = []
        for episode_id, raw, start_ts in rows:
            when = parse_ts(start_ts)
            for p in episode_passages(orjson.loads(raw or "[]")):
                pending.append((episode_id, p.idx, embedding_text(p.text, p.speaker, when)))
        for s in range(0, len(pending), EMBED_BATCH):
            batch = pending[s : s + EMBED_BATCH]
            vecs = self.embedder.embed([t for _, _, t in batch])
            conn.executemany(
                "INSERT OR REPLACE INTO quote_vectors (episode_id, idx, vec) VALUES (?, ?, ?)",
                [(e, i, to_blob(v)) for (e, i, _), v in zip(batch, vecs, strict=True)],
            )
        return len(pending)

    # ------------------------------------------------------------ search
    def _load(self, conn: sqlite3.Connection) -> _Matrix:
        db = database_key(conn)
        newest, deleted = conn.execute(
            "SELECT (SELECT coalesce(max(rowid), 0) FROM quote_vectors),"
            " (SELECT value FROM meta WHERE key = 'vectors_deleted')"
        ).fetchone()
        model = self.stored_model(conn) or ""
        version = (int(newest), str(deleted or ""), model)
        m = self._matrix.get(db)
        if m is not None and m.version == version:
            return m
        keys: list[tuple[str, int]] = []
        blobs: list[bytes] = []
        if model == self.embedder.identity:
            for episode_id, idx, vec in conn.execute("SELECT episode_id, idx, vec FROM quote_vectors"):
                keys.append((str(episode_id), int(idx)))
                blobs.append(bytes(vec))
        vectors = from_blobs(blobs, self.embedder.dim)
        m = _Matrix(version, keys, vectors, np.ascontiguousarray(sign_bits(vectors).T))
        self._matrix[db] = m
        return m

    def nearest(self, conn: sqlite3.Connection, query: str, limit: int) -> dict[tuple[str, int], float]:
        """(episode_id, passage idx) -> cosine of the `limit` passages nearest to `query`."""
        m = self._load(conn)
        if not m.keys or limit <= 0:
            return {}
        q = self.embedder.embed([query])[0]
        rows: NDArray[Any]
        if len(m.keys) > EXACT_LIMIT:
            rows = closest(hamming(m.signs, sign_bits(q[None, :])[0]), PREFILTER)
            sims = np.einsum("ij,j->i", m.vectors[rows], q)
        else:
            rows = np.arange(len(m.keys))
            sims = np.einsum("ij,j->i", m.vectors, q)
        k = min(limit, len(rows))
        top = np.argpartition(-sims, k - 1)[:k]
        return {m.keys[int(rows[i])]: float(sims[i]) for i in top}
