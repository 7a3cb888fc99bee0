"""The hot store's one typed interface: what the runtime and the projector may ask of it.

The hot store is a projection of the log (working memory, identity, facts,
episodes, relationships, retrievals, erasure tombstones) that can always be
deleted and rebuilt. The runtime (context assembly, memory tools, levels)
and the projector reach it only through `HotStore`; a backend implements it
once. The embedded backend is SQLite (`tiermem.runtime.sqlite_store`), which
keeps every SQL dialect detail to itself; the server backend (PostgreSQL,
`tiermem.runtime.pg_store`, chosen by `hot_url`) is another implementation of
the same protocol. `tests/test_hotstore_contract.py`
runs one contract suite against every backend in its list, visibility
included: what each read returns is checked against the predicates of
`tiermem.runtime.visibility`, row by row.

Every read names its `Principal` (agent, user, scopes): a backend returns only
what that principal may see. Rows are plain dicts (column name → value), so
callers never depend on a driver's row type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tiermem.runtime.visibility import Principal

from tiermem.settings import Settings

if TYPE_CHECKING:
    from tiermem.runtime.levels import WorkingItem
    from tiermem.runtime.scopes import ScoredFact

Row = dict[str, Any]


@dataclass
class ProjectionInfo:
    applied: int = 0
    refused: int = 0  # events covered by an erasure: never (re-)added
    by_type: dict[str, int] = field(default_factory=dict)
    erasures: int = 0
    segments: int = 0
    seconds: float = 0.0
    path: str = "offline"


def kv_fact_id(
    agent_id: str,
    scope: str,
    agent_type: str | None,
    project_id: str | None,
    key: str,
    user: str | None = None,
) -> str:
    """`kv:<agent_id>:<scope>:<scope_owner>:<key>` (docs/CONTRACTS.md).

    A fact about a user lives in the agent's own scope with `@<user>` as its
    scope owner, so each user of an agent has their own value for a key.
    """
    if scope == "project":
        owner = project_id or "-"
    elif scope == "agent_type":
        owner = agent_type or "-"
    elif scope == "override":
        owner = f"{project_id or '-'}/{agent_type or '-'}"
    else:
        owner = f"@{user}" if user else "-"
    return f"kv:{agent_id}:{scope}:{owner}:{key}"


@runtime_checkable
class HotStore(Protocol):
    """The hot store as the runtime and the projector see it (one implementation per backend)."""

    # ------------------------------------------------------------ projection (the writer side)
    def apply_now(self, events: Iterable[Mapping[str, Any]]) -> ProjectionInfo:
        """Apply validated events in their own transaction (a runtime reading its own writes)."""
        ...

    def apply_batch(
        self, events: Iterable[Mapping[str, Any]], meta: Mapping[str, str], info: ProjectionInfo
    ) -> None:
        """Apply events and set `meta` entries (the projector's position) in one transaction."""
        ...

    def get_meta(self, key: str) -> str | None: ...

    def projector_lease(self, wait: bool = True) -> AbstractContextManager[bool]:
        """Hold the right to project into this store: one projector per store at a time.

        True when held; with `wait=False`, False at once when another process holds it.
        A store that one machine owns (SQLite) has nothing to share: always True.
        """
        ...

    def scrub(self) -> bool:
        """Make erased text unrecoverable from the store's storage; True when every step ran.

        Also drops this process's kept copies of the store's text (`erased`)."""
        ...

    def erased(self) -> None:
        """(After an erasure's commit.) This process's caches of the store's text drop it now."""
        ...

    def digest(self) -> str:
        """Order-independent hash of the content (a rebuild from the same log reproduces it)."""
        ...

    def counts(self) -> dict[str, int]:
        """Rows per content table."""
        ...

    def files(self) -> list[Path]:
        """The files holding the store on this machine (empty for a server backend)."""
        ...

    def close(self) -> None: ...

    # ------------------------------------------------------------ reads, each as a principal
    def identity(self, agent_id: str) -> str:
        """The agent's L0 identity ('' when none): agent-level memory, visible to all its users."""
        ...

    def recent(self, who: Principal, level: str, limit: int) -> list[WorkingItem]:
        """The last `limit` items of the visible history, filtered by memory level, oldest first."""
        ...

    def history(self, who: Principal) -> list[WorkingItem]:
        """Every visible working-memory item, oldest first."""
        ...

    def current_level(self, who: Principal) -> str:
        """The level of the newest visible item; global when there is none."""
        ...

    def relationship(self, who: Principal) -> Row | None:
        """The relationship summary of the principal's user (None without a user)."""
        ...

    def scope_rules(self, who: Principal, limit: int = 20) -> list[Row]:
        """Visible active project overrides and `rule` facts, overrides first, newest first."""
        ...

    def list_facts(
        self,
        who: Principal,
        *,
        kinds: tuple[str, ...] | None = None,
        topic: str | None = None,
        participant_first: str | None = None,
        limit: int = 100,
    ) -> list[Row]:
        """Visible active facts, this participant's first, then newest first."""
        ...

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
        """Merged, weighted full-text search over the visible facts of every scope."""
        ...

    def kv_lookup(self, who: Principal, key: str) -> Row | None:
        """First match wins, most specific scope first (the user's own first), newest within it."""
        ...

    def visible_fact(self, who: Principal, fact_id: str) -> Row | None:
        """One active fact by id, if the principal may read it."""
        ...

    def search_episodes(
        self, who: Principal, query: str, participant: str | None = None, limit: int = 3
    ) -> list[Row]:
        """The best visible episodes for `query` (optionally only those with `participant`)."""
        ...

    def recall_lines(
        self, who: Principal, query: str, participant: str | None = None, budget: int | None = None
    ) -> list[tuple[str, tuple[str, ...]]]:
        """The best visible remembered turns as dated lines (text, cited event ids)."""
        ...

    def search_turns(
        self,
        who: Principal,
        query: str,
        participant: str | None = None,
        limit: int = 5,
        exclude: frozenset[str] = frozenset(),
    ) -> list[Row]:
        """Visible turns no episode covers yet, matching `query`, best first (not those in `exclude`).

        Each row: event_id, ts, user, user_message, agent_response, score.
        """
        ...


def open_store(settings: Settings) -> HotStore:
    """The configured hot store: PostgreSQL when `hot_url` names a server, else the embedded SQLite one."""
    if settings.hot_url:
        from tiermem.runtime.pg_store import PostgresHotStore

        return PostgresHotStore.open(settings)
    from tiermem.runtime.sqlite_store import SQLiteHotStore

    return SQLiteHotStore.open(settings)


def remove_store(settings: Settings) -> None:
    """Delete the hot store entirely (before a rebuild from the log)."""
    if settings.hot_url:
        from tiermem.runtime.pg_store import PostgresHotStore

        PostgresHotStore.remove(settings)
        return
    from tiermem.runtime.sqlite_store import SQLiteHotStore

    SQLiteHotStore.remove(settings)
