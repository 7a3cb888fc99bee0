"""The embedded hot store: `HotStore` on SQLite (WAL, FTS5), one file per data root.

Everything SQLite-specific lives behind this class: the schema and
connection (`hotstore`), the projection handlers (`sqlite_apply`), the
visibility rules in SQLite's SQL (`hotstore.owner_clause` / `item_clause` /
`fact_clause`), and the queries of working memory (`levels`), facts
(`scopes`) and episodes (`episode_search`). The runtime and the projector
call the methods of `tiermem.runtime.store.HotStore` only.

`conn` is the underlying connection, for tests and benchmarks that look
inside this backend; nothing in the runtime uses it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from pathlib import Path
from typing import Any

from tiermem.runtime import hotstore, sqlite_apply
from tiermem.runtime.query_expansion import expansion_for
from tiermem.runtime.quote_search import DenseSearch
from tiermem.runtime.rerank import reranker_for
from tiermem.runtime.store import ProjectionInfo
from tiermem.runtime.store_reads import SharedReads
from tiermem.runtime.vectors import VectorIndex

from tiermem.registry import EVENT_TYPES
from tiermem.settings import Settings


def dense_search(settings: Settings) -> DenseSearch | None:
    """The dense side of retrieval the settings ask for (None: lexical only).

    The model is loaded once per process and shared by every store opened
    with it (loading takes a fraction of a second but holds ~100 MB).
    """
    r = settings.retrieval
    if r.mode == "lexical":
        return None
    return DenseSearch(_index(r.embedding_model, r.model_cache), r.mode, r.fusion_weight, r.candidates)


@lru_cache(maxsize=2)
def _index(model: str, cache: str) -> VectorIndex:
    return VectorIndex.load(model, Path(cache) if cache else None)


def _projects_as(event: Mapping[str, Any], kind: str) -> bool:
    spec = EVENT_TYPES.get(str(event.get("type")))
    return spec is not None and spec.projection == kind


class SQLiteHotStore(SharedReads):
    """`HotStore` on one SQLite database (see the module doc)."""

    def __init__(
        self, conn: sqlite3.Connection, path: Path | None = None, dense: DenseSearch | None = None
    ) -> None:
        self.conn = conn
        self.path = path
        # With embeddings (retrieval.mode dense or hybrid): vectors are computed as episodes are
        # projected and searched beside FTS; without, the store is lexical only.
        self.dense = dense

    @classmethod
    def open(cls, settings: Settings) -> SQLiteHotStore:
        store = cls(hotstore.open_hot_store(settings), settings.hot_db, dense_search(settings))
        store.rerank = reranker_for(settings)
        store.expand = expansion_for(settings)
        return store

    @classmethod
    def connect(cls, path: Path | str) -> SQLiteHotStore:
        return cls(hotstore.connect(path), Path(path))

    @staticmethod
    def remove(settings: Settings) -> None:
        db = settings.hot_db
        for suffix in ("", "-wal", "-shm"):
            db.with_name(db.name + suffix).unlink(missing_ok=True)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> SQLiteHotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ projection
    def apply_now(self, events: Iterable[Mapping[str, Any]]) -> ProjectionInfo:
        if self.dense is None:
            return sqlite_apply.apply_now(self.conn, events)
        batch = list(events)
        info = sqlite_apply.apply_now(self.conn, batch)
        episodes = [str(e["event_id"]) for e in batch if _projects_as(e, "episode")]
        if episodes:
            with hotstore.write_transaction(self.conn):
                self.dense.index.index_pending(self.conn, episodes)
        return info

    def apply_batch(
        self, events: Iterable[Mapping[str, Any]], meta: Mapping[str, str], info: ProjectionInfo
    ) -> None:
        with hotstore.write_transaction(self.conn):
            sqlite_apply.apply_events(self.conn, events, info)
            if self.dense is not None:
                self.dense.index.index_pending(self.conn)
            for key, value in meta.items():
                hotstore.set_meta(self.conn, key, value)

    def get_meta(self, key: str) -> str | None:
        return hotstore.get_meta(self.conn, key)

    def projector_lease(self, wait: bool = True) -> AbstractContextManager[bool]:
        # One file on one machine: the projector's file lock already makes it the only writer.
        return nullcontext(True)

    def scrub(self) -> bool:
        self.erased()  # run after every projection that erased something
        return hotstore.scrub_after_erasure(self.conn)

    def erased(self) -> None:
        sqlite_apply.erased(self.conn)

    def digest(self) -> str:
        return hotstore.store_digest(self.conn)

    def counts(self) -> dict[str, int]:
        return hotstore.table_counts(self.conn)

    def files(self) -> list[Path]:
        if self.path is None:
            return []
        return [
            p for p in (self.path.with_name(self.path.name + s) for s in ("", "-wal", "-shm")) if p.exists()
        ]

    # ------------------------------------------------------------ reads (runtime.store_reads)
    @property
    def _reads(self) -> sqlite3.Connection:
        return self.conn
