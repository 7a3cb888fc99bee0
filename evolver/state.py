"""The current knowledge state, as a pure fold of knowledge events.

The evolver decides against this state, never against the hot store (DESIGN:
the evolver must not read the hot store as its source of truth). The fold is
deterministic: the same events in the same order give the same state, so any
run can be replayed from the log.

Inputs, in log order:
- `knowledge_proposed` → a `Proposal` (what a channel suggested),
- `knowledge_decided`  → upsert of the complete resulting `Fact` (latest wins),
- `fact_set` / `fact_removed` → explicit KV facts (`kv:` fact ids),
- `retrieval` → recall counts per item id,
- `erasure` → every listed event id is ignored from then on.

A fact or proposal that names no scope is private to its agent (scope
`agent`), as the runtime and the projector read it: the fold never widens
what an event did not. Each proposal and fact also knows its `owners`: the
users it was derived from (its participant and the users of the turns it
cites, looked up once in the `interactions` view), so decisions never mix
two people's facts and promotion never publishes a user's data.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tiermem.settings import Settings

ACTIVE = "active"
INACTIVE = "inactive"
ARCHIVED = "archived"
PENDING = "pending"
# The scope private to the agent that learned the fact. On the log it is the
# absence of a `scope` field (the runtime reads a fact without one as its writer's own).
AGENT_SCOPE = "agent"


@dataclass(frozen=True)
class Proposal:
    proposal_id: str
    agent_id: str
    ts: str
    content: str
    category: str | None = None
    topic: str | None = None
    key: str | None = None
    participant: str | None = None
    scope: str | None = None
    project_id: str | None = None
    agent_type: str | None = None
    confidence: float = 1.0
    importance: int = 5
    origin: str = "compressor"
    is_correction: bool = False
    corrects: str | None = None
    evidence: tuple[dict[str, Any], ...] = ()
    source_event_ids: tuple[str, ...] = ()
    owners: tuple[str, ...] = ()  # the users it was derived from (set by `attach_owners`)

    @classmethod
    def from_event(cls, ev: Mapping[str, Any]) -> Proposal:
        return cls(
            proposal_id=ev["event_id"],
            agent_id=ev.get("agent_id") or "",
            ts=ev["ts"],
            content=ev.get("content") or "",
            category=ev.get("category"),
            topic=ev.get("topic"),
            key=ev.get("key"),
            participant=ev.get("participant"),
            scope=ev.get("scope"),
            project_id=ev.get("project_id"),
            agent_type=ev.get("agent_type"),
            confidence=float(ev["confidence"]) if ev.get("confidence") is not None else 1.0,
            importance=int(ev["importance"]) if ev.get("importance") is not None else 5,
            origin=ev.get("origin") or "compressor",
            is_correction=bool(ev.get("is_correction")),
            corrects=ev.get("corrects"),
            evidence=tuple(e for e in (ev.get("evidence") or []) if isinstance(e, dict)),
            source_event_ids=tuple(ev.get("source_event_ids") or ()),
        )

    @property
    def effective_scope(self) -> str:
        """Named scope, else the project's, else the agent's own; a user's data stays in the
        agent's own scope whatever was asked (never wider than what was said)."""
        if self.owners:
            return AGENT_SCOPE
        if self.scope:
            return self.scope
        return "project" if self.project_id else AGENT_SCOPE


@dataclass(frozen=True)
class Fact:
    """One fact as the latest decision left it (the knowledge view's row)."""

    fact_id: str
    agent_id: str
    content: str
    status: str
    scope: str
    created_at: str
    updated_at: str
    category: str | None = None
    topic: str | None = None
    key: str | None = None
    participant: str | None = None
    project_id: str | None = None
    agent_type: str | None = None
    source: str = "compressor"  # origin of the newest content: user|agent|gap_fill|compressor|system
    decision: str = "created"
    decided_by: str = "auto"
    proposal_id: str | None = None
    previous_content: str | None = None
    similarity: float | None = None
    note: str | None = None
    original: str | None = None
    importance: int = 5
    confidence: float = 1.0
    revision: int = 0
    seen_projects: tuple[str, ...] = ()
    source_event_ids: tuple[str, ...] = ()
    event_id: str | None = None  # the decision event this row came from
    owners: tuple[str, ...] = ()  # the users it was derived from (set by `attach_owners`)

    @property
    def is_kv(self) -> bool:
        return self.fact_id.startswith("kv:")

    def with_changes(self, **changes: Any) -> Fact:
        return replace(self, **changes)


def fact_from_decision(ev: Mapping[str, Any], previous: Fact | None) -> Fact:
    """The fact a decision leaves; fields the event omits keep their previous value.

    The evolver writes complete facts, but other writers (the runtime's
    `decide_fact`) may send only what changed (status, note).
    """

    def pick(name: str, default: Any = None) -> Any:
        value = ev.get(name)
        if value is not None:
            return value
        return getattr(previous, name) if previous is not None else default

    return Fact(
        fact_id=ev["fact_id"],
        agent_id=ev.get("agent_id") or (previous.agent_id if previous else ""),
        content=pick("content", ""),
        status=ev.get("status") or ACTIVE,
        scope=pick("scope", AGENT_SCOPE),
        created_at=previous.created_at if previous else ev["ts"],
        updated_at=ev["ts"],
        category=pick("category"),
        topic=pick("topic"),
        key=pick("key"),
        participant=pick("participant"),
        project_id=pick("project_id"),
        agent_type=pick("agent_type"),
        source=ev.get("origin") or (previous.source if previous else ev.get("decided_by") or "compressor"),
        decision=ev.get("decision") or "created",
        decided_by=ev.get("decided_by") or "auto",
        proposal_id=ev.get("proposal_id"),
        previous_content=ev.get("previous_content"),
        similarity=ev.get("similarity"),
        note=ev.get("note"),
        original=pick("original"),
        importance=int(pick("importance", 5)),
        confidence=float(pick("confidence", 1.0)),
        revision=int(ev["revision"])
        if ev.get("revision") is not None
        else (previous.revision + 1 if previous else 1),
        seen_projects=tuple(ev.get("seen_projects") or (previous.seen_projects if previous else ())),
        source_event_ids=tuple(ev.get("source_event_ids") or (previous.source_event_ids if previous else ())),
        event_id=ev.get("event_id"),
        owners=previous.owners if previous else (),
    )


def kv_owner(scope: str, project_id: str | None, agent_type: str | None) -> str:
    if scope in ("project", "override"):
        return project_id or "-"
    if scope == "agent_type":
        return agent_type or "-"
    return "-"


def kv_fact_id(
    agent_id: str,
    scope: str,
    project_id: str | None,
    agent_type: str | None,
    key: str,
    user: str | None = None,
) -> str:
    """The contract's id of an explicit KV fact (a fact about a user: `@<user>` as scope owner)."""
    owner = f"@{user}" if user and scope == "agent" else kv_owner(scope, project_id, agent_type)
    return f"kv:{agent_id}:{scope}:{owner}:{key}"


@dataclass
class KnowledgeState:
    """Facts by id, proposals by id, which proposals are decided, recall counts."""

    facts: dict[str, Fact] = field(default_factory=dict)
    proposals: dict[str, Proposal] = field(default_factory=dict)
    decided: dict[str, str] = field(default_factory=dict)  # proposal_id -> latest decision
    decision_ids: set[str] = field(default_factory=set)
    recall_counts: dict[str, int] = field(default_factory=dict)
    last_recalled: dict[str, str] = field(default_factory=dict)
    erased: set[str] = field(default_factory=set)
    positions: dict[str, int] = field(default_factory=dict)  # lines read per segment (a checkpoint)

    def apply(self, ev: Mapping[str, Any]) -> None:
        """Fold one event into the state (a pure function of the event sequence)."""
        etype = ev.get("type")
        eid = ev.get("event_id", "")
        if etype == "erasure":
            self._erase(set(ev.get("erased_event_ids") or ()))
            return
        if eid in self.erased:
            return
        if etype == "knowledge_proposed":
            self.proposals[eid] = Proposal.from_event(ev)
        elif etype == "knowledge_decided":
            self.decision_ids.add(eid)
            if ev.get("proposal_id"):
                self.decided[ev["proposal_id"]] = ev.get("decision") or ""
            if ev.get("fact_id"):
                fact = fact_from_decision(ev, self.facts.get(ev["fact_id"]))
                self.facts[fact.fact_id] = fact
        elif etype == "fact_set":
            self._apply_fact_set(ev)
        elif etype == "fact_removed":
            fid = ev.get("fact_id") or kv_fact_id(
                ev.get("agent_id") or "",
                ev.get("scope") or "agent",
                ev.get("project_id"),
                ev.get("agent_type"),
                ev["key"],
            )
            old = self.facts.get(fid)
            if old is not None:
                self.facts[fid] = old.with_changes(
                    status=INACTIVE, updated_at=ev["ts"], decision="removed", note=ev.get("reason")
                )
        elif etype == "retrieval":
            for item in ev.get("item_ids") or ():
                self.recall_counts[item] = self.recall_counts.get(item, 0) + 1
                self.last_recalled[item] = ev["ts"]

    def _apply_fact_set(self, ev: Mapping[str, Any]) -> None:
        scope = ev.get("scope") or AGENT_SCOPE
        fid = ev.get("fact_id") or kv_fact_id(
            ev.get("agent_id") or "",
            scope,
            ev.get("project_id"),
            ev.get("agent_type"),
            ev["key"],
            ev.get("participant") if scope == "agent" else None,
        )
        old = self.facts.get(fid)
        self.facts[fid] = Fact(
            fact_id=fid,
            agent_id=ev.get("agent_id") or "",
            content=f"{ev['key']}: {ev['value']}",
            status=ACTIVE,
            scope=scope,
            created_at=old.created_at if old else ev["ts"],
            updated_at=ev["ts"],
            key=ev["key"],
            participant=ev.get("participant"),
            project_id=ev.get("project_id"),
            agent_type=ev.get("agent_type"),
            source=ev.get("source") or "agent",
            decision="set",
            decided_by=ev.get("source") or "agent",
            previous_content=old.content if old else None,
            revision=(old.revision + 1) if old else 1,
            source_event_ids=(ev["event_id"],),
            event_id=ev["event_id"],
        )

    def _erase(self, ids: set[str]) -> None:
        self.erased |= ids
        for pid in [p for p in self.proposals if p in ids]:
            del self.proposals[pid]
        for fid in [
            f.fact_id for f in self.facts.values() if f.event_id in ids or ids & set(f.source_event_ids)
        ]:
            del self.facts[fid]

    # -------------------------------------------------------------- queries
    def undecided(self) -> list[Proposal]:
        """Proposals with no decision yet, in log order."""
        return [p for pid, p in self.proposals.items() if pid not in self.decided]

    def pending(self) -> list[Proposal]:
        return [p for pid, p in self.proposals.items() if self.decided.get(pid) == PENDING]

    def active_facts(self, agent_id: str | None = None) -> list[Fact]:
        return [
            f
            for f in self.facts.values()
            if f.status == ACTIVE and (agent_id is None or f.agent_id == agent_id)
        ]


def attach_owners(state: KnowledgeState, turn_users: Mapping[str, str]) -> None:
    """Set every proposal's and fact's `owners` from participants and the turns they cite."""

    def users_of(ids: Iterable[str]) -> set[str]:
        return {turn_users[i] for i in ids if i in turn_users}

    for pid, p in list(state.proposals.items()):
        owners = users_of(p.source_event_ids) | ({p.participant} if p.participant else set())
        state.proposals[pid] = replace(p, owners=tuple(sorted(owners)))
    for fid, f in list(state.facts.items()):
        owners = users_of(f.source_event_ids) | ({f.participant} if f.participant else set())
        for source in f.source_event_ids:
            proposal = state.proposals.get(source)
            if proposal is not None:
                owners |= set(proposal.owners)
        state.facts[fid] = replace(f, owners=tuple(sorted(owners)))


def cited_ids(state: KnowledgeState) -> list[str]:
    """Every event id a proposal or fact cites (the turns whose users own them)."""
    ids = {i for p in state.proposals.values() for i in p.source_event_ids}
    ids |= {i for f in state.facts.values() for i in f.source_event_ids}
    return sorted(ids)


def turn_users(settings: Settings, ids: list[str]) -> dict[str, str]:
    """The user of each of these turns (those that have one), from the `interactions` view."""
    if not ids:
        return {}
    from tiermem.catalog import connect

    con = connect(settings)
    try:
        rows = con.execute(
            'SELECT event_id, "user" FROM interactions WHERE "user" IS NOT NULL'
            " AND event_id IN (SELECT unnest(?::VARCHAR[]))",
            [ids],
        ).fetchall()
    finally:
        con.close()
    return {str(r[0]): str(r[1]) for r in rows}


def fold(events: Iterable[Mapping[str, Any]], state: KnowledgeState | None = None) -> KnowledgeState:
    state = state or KnowledgeState()
    for ev in events:
        state.apply(ev)
    return state


STATE_STREAMS = ("erasures", "knowledge", "retrievals")


def load_state(settings: Settings, agent_id: str | None = None) -> KnowledgeState:
    """Fold the whole knowledge history from the log (erasures first, so erased ids never enter)."""
    from tiermem.erased import erased_filter
    from tiermem.eventlog import EventLog

    state = KnowledgeState()
    hidden = erased_filter(settings)  # also catches events derived from erased ones after the erasure
    log = EventLog(settings)
    try:
        for stream in STATE_STREAMS:
            for segment, line, ev in log.read(stream):
                state.positions[segment] = line + 1
                if ev.get("type") != "erasure" and hidden(ev):
                    continue
                if agent_id is not None and ev.get("type") != "erasure" and ev.get("agent_id") != agent_id:
                    continue
                state.apply(ev)
    finally:
        log.close()
    attach_owners(state, turn_users(settings, cited_ids(state)))
    return state
