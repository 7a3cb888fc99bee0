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
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from tiermem.runtime import episode_search, hotstore, levels, scopes, sqlite_apply, unfolded
from tiermem.runtime.episode_search import DenseSearch
from tiermem.runtime.levels import WorkingItem
from tiermem.runtime.scopes import ScoredFact
from tiermem.runtime.store import ProjectionInfo, Row
from tiermem.runtime.vectors import VectorIndex
from tiermem.runtime.visibility import Principal

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
    return DenseSearch(_index(r.embedding_model), r.mode, r.dense_weight, r.candidates)


@lru_cache(maxsize=2)
def _index(model: str) -> VectorIndex:
    return VectorIndex.load(model)


def _projects_as(event: Mapping[str, Any], kind: str) -> bool:
    spec = EVENT_TYPES.get(str(event.get("type")))
    return spec is not None and spec.projection == kind


def _row(row: sqlite3.Row | None) -> Row | None:
    return None if row is None else dict(row)


class SQLiteHotStore:
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
        return cls(hotstore.open_hot_store(settings), settings.hot_db, dense_search(settings))

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
        return hotstore.scrub_after_erasure(self.conn)

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

    # ------------------------------------------------------------ reads
    def identity(self, agent_id: str) -> str:
        row = self.conn.execute("SELECT content FROM identity WHERE agent_id=?", (agent_id,)).fetchone()
        return "" if row is None else str(row[0])

    def recent(self, who: Principal, level: str, limit: int) -> list[WorkingItem]:
        return levels.recent_items(self.conn, who, level, limit)

    def history(self, who: Principal) -> list[WorkingItem]:
        return levels.all_items(self.conn, who)

    def current_level(self, who: Principal) -> str:
        return levels.current_level(self.conn, who)

    def relationship(self, who: Principal) -> Row | None:
        if who.user is None:
            return None
        where, params = hotstore.item_clause(who, "r")
        row = self.conn.execute(
            "SELECT r.participant, r.summary, r.rapport, r.trust, r.last_spoke_ts, r.interactions"
            f" FROM relationships r WHERE r.participant = ? AND {where}",
            (who.user, *params),
        ).fetchone()
        return _row(row)

    def scope_rules(self, who: Principal, limit: int = 20) -> list[Row]:
        where, params = hotstore.fact_clause(who, "f")
        rows = self.conn.execute(
            "SELECT f.* FROM facts f WHERE f.status='active'"
            f" AND (f.scope='override' OR f.category='rule') AND {where}"
            " ORDER BY f.scope='override' DESC, f.updated_at DESC, f.fact_id LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [dict(r) for r in rows]

    def list_facts(
        self,
        who: Principal,
        *,
        kinds: tuple[str, ...] | None = None,
        topic: str | None = None,
        participant_first: str | None = None,
        limit: int = 100,
    ) -> list[Row]:
        rows = scopes.list_facts(
            self.conn, who, kinds=kinds, topic=topic, participant_first=participant_first, limit=limit
        )
        return [dict(r) for r in rows]

    def search_facts(
        self,
        who: Principal,
        query: str,
        *,
        topic: str | None = None,
        limit: int = 10,
        kinds: tuple[str, ...] | None = None,
        weights: Mapping[str, float] | None = None,
        now: datetime,
    ) -> list[ScoredFact]:
        return scopes.search_facts(
            self.conn, who, query, topic=topic, limit=limit, kinds=kinds, weights=weights, now=now
        )

    def kv_lookup(self, who: Principal, key: str) -> Row | None:
        return _row(scopes.kv_lookup(self.conn, who, key))

    def visible_fact(self, who: Principal, fact_id: str) -> Row | None:
        where, params = hotstore.fact_clause(who, "f")
        row = self.conn.execute(
            f"SELECT f.* FROM facts f WHERE f.fact_id = ? AND f.status = 'active' AND {where}",
            (fact_id, *params),
        ).fetchone()
        return _row(row)

    def search_episodes(
        self, who: Principal, query: str, participant: str | None = None, limit: int = 3
    ) -> list[Row]:
        return episode_search.search_episodes(self.conn, who, query, participant, limit)

    def recall_lines(
        self, who: Principal, query: str, participant: str | None = None, budget: int | None = None
    ) -> list[tuple[str, tuple[str, ...]]]:
        return episode_search.recall_lines(self.conn, who, query, participant, budget, self.dense)

    def search_turns(
        self,
        who: Principal,
        query: str,
        participant: str | None = None,
        limit: int = 5,
        exclude: frozenset[str] = frozenset(),
    ) -> list[Row]:
        return unfolded.search_unfolded(self.conn, who, query, participant, limit, exclude)
