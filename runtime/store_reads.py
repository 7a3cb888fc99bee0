"""The hot store's reads, one copy for every backend.

The reads are SQL both SQLite and PostgreSQL accept (the visibility clauses of
`hotstore`, the shared `levels`, `scopes`, `episode_search` and `unfolded`
queries); a backend differs only in the connection it hands them, so each
backend class inherits `SharedReads` and says which connection that is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from tiermem.runtime import episode_search, level_cache, levels, quote_search, scopes, unfolded
from tiermem.runtime.hotstore import fact_clause, item_clause
from tiermem.runtime.levels import WorkingItem
from tiermem.runtime.query_expansion import QueryExpansion
from tiermem.runtime.quote_search import DenseSearch
from tiermem.runtime.rerank import Reranker
from tiermem.runtime.scopes import ScoredFact
from tiermem.runtime.store import Row
from tiermem.runtime.visibility import Principal


def _row(row: Any) -> Row | None:
    return None if row is None else dict(row)


class SharedReads:
    """Every read of the `HotStore` protocol, over `self._reads` (the backend's connection)."""

    dense: DenseSearch | None
    rerank: Reranker | None = None  # retrieval.rerank: set by the backend's `open`
    expand: QueryExpansion | None = None  # retrieval.expand: set by the backend's `open`

    @property
    def _reads(self) -> sqlite3.Connection:
        raise NotImplementedError

    def identity(self, agent_id: str) -> str:
        row = self._reads.execute("SELECT content FROM identity WHERE agent_id=?", (agent_id,)).fetchone()
        return "" if row is None else str(row[0])

    def recent(self, who: Principal, level: str, limit: int) -> list[WorkingItem]:
        return levels.recent_items(self._reads, who, level, limit)

    def history(self, who: Principal) -> list[WorkingItem]:
        return levels.all_items(self._reads, who)

    def current_level(self, who: Principal) -> str:
        # Kept per connection while no agent-level item changed (SQLite with its counting triggers).
        return level_cache.agent_level(self._reads, who)

    def relationship(self, who: Principal) -> Row | None:
        if who.user is None:
            return None
        where, params = item_clause(who, "r")
        row = self._reads.execute(
            "SELECT r.participant, r.summary, r.rapport, r.trust, r.last_spoke_ts, r.interactions"
            f" FROM relationships r WHERE r.participant = ? AND {where}",
            (who.user, *params),
        ).fetchone()
        return _row(row)

    def scope_rules(self, who: Principal, limit: int = 20) -> list[Row]:
        where, params = fact_clause(who, "f")
        rows = self._reads.execute(
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
            self._reads, who, kinds=kinds, topic=topic, participant_first=participant_first, limit=limit
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
            self._reads, who, query, topic=topic, limit=limit, kinds=kinds, weights=weights, now=now
        )

    def kv_lookup(self, who: Principal, key: str) -> Row | None:
        return _row(scopes.kv_lookup(self._reads, who, key))

    def visible_fact(self, who: Principal, fact_id: str) -> Row | None:
        where, params = fact_clause(who, "f")
        row = self._reads.execute(
            f"SELECT f.* FROM facts f WHERE f.fact_id = ? AND f.status = 'active' AND {where}",
            (fact_id, *params),
        ).fetchone()
        return _row(row)

    def search_episodes(
        self, who: Principal, query: str, participant: str | None = None, limit: int = 3
    ) -> list[Row]:
        return episode_search.search_episodes(self._reads, who, query, participant, limit)

    def recall_lines(
        self, who: Principal, query: str, participant: str | None = None, budget: int | None = None
    ) -> list[tuple[str, tuple[str, ...]]]:
        return quote_search.recall_lines(
            self._reads, who, query, participant, budget, self.dense, self.rerank, self.expand
        )

    def search_turns(
        self,
        who: Principal,
        query: str,
        participant: str | None = None,
        limit: int = 5,
        exclude: frozenset[str] = frozenset(),
    ) -> list[Row]:
        return unfolded.search_unfolded(self._reads, who, query, participant, limit, exclude)
