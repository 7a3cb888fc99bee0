"""The typed values the public `Memory` API hands back where no job info object existed yet.

Batch calls return the jobs' own info objects (`IngestInfo`, `CompressInfo`,
`EvolveInfo`, `ReviewInfo`, `SealInfo`, `ForgetInfo`, `RebuildInfo`); the
agent's reads return the frozen values below. Each has `to_json()` giving
exactly what the matching `tiermem ... --json` command prints, so a script
can switch between the CLI and Python without changing its parsing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True)
class ContextSection:
    """One prompt section: its name, token count, rendered text and the memory ids it holds."""

    name: str
    tokens: int
    text: str
    item_ids: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "tokens": self.tokens, "text": self.text, "item_ids": list(self.item_ids)}


@dataclass(frozen=True)
class Context:
    """What an agent's prompt holds for one turn, in prompt order and within its token budgets.

    `as_system_prompt()` is every section but the per-turn retrieval; the
    retrieval (`memory_context`, present when a query was given) belongs in
    front of the user's message: `user_message(text)` puts it there.
    """

    agent_id: str
    level: str
    user: str | None
    query: str | None
    cap: int
    total_tokens: int
    sections: tuple[ContextSection, ...]
    dropped: tuple[str, ...] = ()
    retrieval_scores: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    elapsed_ms: float = 0.0

    @classmethod
    def from_assembled(cls, ctx: Any) -> Context:
        """From the runtime's `AssembledContext`."""
        return cls(
            agent_id=ctx.agent_id,
            level=ctx.level,
            user=ctx.user,
            query=ctx.query,
            cap=ctx.cap,
            total_tokens=ctx.total_tokens,
            sections=tuple(ContextSection(s.name, s.tokens, s.text, tuple(s.item_ids)) for s in ctx.sections),
            dropped=tuple(ctx.dropped),
            retrieval_scores=MappingProxyType(dict(ctx.retrieval_scores)),
            elapsed_ms=ctx.elapsed_ms,
        )

    @property
    def item_ids(self) -> tuple[str, ...]:
        """Every memory id placed in the prompt, in prompt order."""
        return tuple(i for s in self.sections for i in s.item_ids)

    def section(self, name: str) -> ContextSection | None:
        return next((s for s in self.sections if s.name == name), None)

    def as_system_prompt(self) -> str:
        return "\n\n".join(s.text for s in self.sections if s.name != "memory_context")

    def user_message(self, message: str) -> str:
        """The user's message with this turn's retrieval (if any) in front of it."""
        mc = self.section("memory_context")
        return f"{mc.text}\n\n{message}" if mc else message

    def to_json(self) -> dict[str, Any]:
        """The `tiermem context --json` object."""
        return {
            "agent_id": self.agent_id,
            "level": self.level,
            "user": self.user,
            "query": self.query,
            "cap": self.cap,
            "total_tokens": self.total_tokens,
            "sections": [s.to_json() for s in self.sections],
            "dropped": list(self.dropped),
        }


# The keys of one recalled episode, in the order `tiermem recall --json` prints them.
EPISODE_KEYS = (
    "episode_id",
    "name",
    "summary",
    "key_quotes",
    "participants",
    "start_ts",
    "end_ts",
    "importance",
    "score",
    "emotional_context",
)


@dataclass(frozen=True)
class RecalledEpisode:
    episode_id: str
    name: str
    summary: str
    key_quotes: tuple[Any, ...]  # {"text", "event_id", ...} as the compressor kept them
    participants: tuple[str, ...]
    start_ts: str | None
    end_ts: str | None
    importance: int | None
    score: float
    emotional_context: str | None = None
    when: str | None = None  # the time range in words; not part of the JSON

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RecalledEpisode:
        """From one result of the runtime's episode search (values kept as they are)."""
        return cls(
            episode_id=row["episode_id"],
            name=row["name"],
            summary=row["summary"],
            key_quotes=tuple(row.get("key_quotes") or ()),
            participants=tuple(row.get("participants") or ()),
            start_ts=row.get("start_ts"),
            end_ts=row.get("end_ts"),
            importance=row.get("importance"),
            score=row["score"],
            emotional_context=row.get("emotional_context"),
            when=row.get("when"),
        )

    @property
    def quotes(self) -> list[str]:
        """The verbatim key quotes as plain strings."""
        return [str(q.get("text", "")) if isinstance(q, Mapping) else str(q) for q in self.key_quotes]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in EPISODE_KEYS:
            value = getattr(self, key)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class RecalledTurn:
    """A turn no episode covers yet (recorded since the last compression) that matches the query."""

    event_id: str
    ts: str
    user: str | None
    user_message: str
    agent_response: str
    score: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RecalledTurn:
        return cls(
            event_id=str(row["event_id"]),
            ts=str(row["ts"]),
            user=row.get("user"),
            user_message=str(row.get("user_message") or ""),
            agent_response=str(row.get("agent_response") or ""),
            score=float(row.get("score") or 0.0),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Recall:
    """The episodes an agent remembers for a query (most relevant first), the turns no episode
    covers yet that match it, and the retrieval record."""

    query: str
    participant: str | None
    episodes: tuple[RecalledEpisode, ...]
    tokens: int = 0
    retrieval_event_id: str | None = None  # the `retrieval` event, when something was delivered
    turns: tuple[RecalledTurn, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.episodes or self.turns)

    def to_json(self) -> dict[str, Any]:
        """The `tiermem recall --json` object (`turns` only when there are some)."""
        out: dict[str, Any] = {"results": [e.to_json() for e in self.episodes]}
        if self.turns:
            out["turns"] = [t.to_json() for t in self.turns]
        return out


FACT_KEYS = (
    "fact_id",
    "kind",
    "scope",
    "key",
    "content",
    "category",
    "topic",
    "source",
    "updated_at",
    "recall_count",
)


@dataclass(frozen=True)
class Fact:
    """One active fact an agent can see: a key-value fact (`kind == "kv"`) or learned knowledge."""

    fact_id: str
    kind: str
    scope: str
    key: str | None
    content: str
    category: str | None = None
    topic: str | None = None
    source: str | None = None
    updated_at: str | None = None
    recall_count: int = 0

    @classmethod
    def from_row(cls, row: Any) -> Fact:
        """From a hot-store row (sqlite3.Row or mapping) with at least the FACT_KEYS columns."""
        return cls(**{k: row[k] for k in FACT_KEYS})

    @property
    def value(self) -> str:
        return self.content

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in FACT_KEYS}


@dataclass(frozen=True)
class FactWrite:
    """What `facts.set` / `facts.remove` did."""

    fact_id: str
    key: str
    scope: str
    value: str | None = None  # None for a removal
    removed: bool = False

    def to_json(self) -> dict[str, Any]:
        if self.removed:
            return {"fact_id": self.fact_id, "key": self.key, "removed": True}
        return {"fact_id": self.fact_id, "key": self.key, "value": self.value, "scope": self.scope}


@dataclass(frozen=True)
class Transition:
    """A finished task or project: the `memory_transition` event and the level the agent is back at."""

    event_id: str
    finished: str  # task | project
    level: str  # the level returned to


@dataclass(frozen=True)
class ExportInfo:
    """Everything held about one agent or user (`data`), its rendering (`text`), where it was written."""

    target_kind: str
    target: str
    format: str
    counts: Mapping[str, int]
    data: Mapping[str, Any] = field(repr=False)
    text: str = field(repr=False)
    out: str | None = None

    @property
    def items(self) -> int:
        return sum(self.counts.values())
