"""The evolve job: undecided proposals → `knowledge_decided` events.

Steps: fold the knowledge history from the log (`state.load_state`), decide
every undecided proposal in log order (`decide.decide`, each decision folded
back into the state so the next proposal sees it), then promote and archive
(`lifecycle`), and append every decision in batches.

Idempotent twice over: a proposal that already has a decision is never decided
again, and every decision has a deterministic id (the proposal's time plus a
hash of fact id, revision and decision), so a run that is killed after its
append and re-run appends nothing new (the log drops the duplicates). One run
at a time per data root (a lock file), because two concurrent folds would
decide against stale states.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from tiermem.evolver.decide import Decision, decide
from tiermem.evolver.index import FactIndex
from tiermem.evolver.lifecycle import (
    archivals,
    kv_supersessions,
    promotion_allowed,
    promotion_candidates,
    promotions,
    same_owners,
)
from tiermem.evolver.state import AGENT_SCOPE, PENDING, Fact, KnowledgeState, Proposal, load_state

from tiermem.engine import Engine
from tiermem.eventlog import Checkpoints, EventLog
from tiermem.ids import derived_event_id, format_ts, parse_ts, utcnow
from tiermem.locks import job_lock
from tiermem.merging import Merger, make_merger
from tiermem.output import Progress
from tiermem.settings import Settings

APPEND_BATCH = 5000
CONSUMER = "evolver"


@dataclass
class EvolveInfo:
    proposals_seen: int = 0
    decided: int = 0
    created: int = 0
    touched: int = 0
    merged: int = 0
    superseded: int = 0
    superseded_by_writes: int = 0  # learned facts overtaken by an explicit KV write with the same key
    corrected: int = 0
    pending: int = 0
    joined_pending: int = 0  # proposals that said what a pending one says: one item in the queue
    promoted: int = 0
    promotions_held: int = 0  # candidates the policy keeps where they are (a user's data, low confidence)
    archived: int = 0
    events_appended: int = 0
    duplicates: int = 0
    active_facts: int = 0
    inactive_facts: int = 0
    archived_facts: int = 0
    path: str = "offline"
    claude_merge_failures: int = 0
    agent: str | None = None
    elapsed_s: float = 0.0
    decisions: list[dict[str, Any]] = field(default_factory=list)


def decision_event(fact: Fact, *, ts: str, id_ts: datetime) -> dict[str, Any]:
    """A complete `knowledge_decided` event for one fact (every projection is an upsert)."""
    event: dict[str, Any] = {
        "type": "knowledge_decided",
        "event_id": derived_event_id(
            id_ts,
            "knowledge_decided",
            fact.fact_id,
            str(fact.revision),
            fact.decision,
            fact.proposal_id or "",
        ),
        "ts": ts,
        "agent_id": fact.agent_id,
        "fact_id": fact.fact_id,
        "decision": fact.decision,
        "status": fact.status,
        "content": fact.content,
        "scope": fact.scope if fact.scope != "agent" else None,  # private to the agent: no scope field
        "category": fact.category,
        "topic": fact.topic,
        "key": fact.key,
        "participant": fact.participant,
        "project_id": fact.project_id,
        "agent_type": fact.agent_type,
        "proposal_id": fact.proposal_id,
        "previous_content": fact.previous_content,
        "similarity": fact.similarity,
        "note": fact.note,
        "decided_by": fact.decided_by,
        "source_event_ids": list(fact.source_event_ids),
        "revision": fact.revision,
        "original": fact.original,
        "importance": fact.importance,
        "confidence": fact.confidence,
        "origin": fact.source,
        "seen_projects": list(fact.seen_projects),
    }
    if fact.scope == AGENT_SCOPE:
        del event["scope"]  # the agent's own fact: the log names no scope
    return {k: v for k, v in event.items() if v is not None}


def duplicate_event(decision: Decision, agent_id: str, *, ts: str, id_ts: datetime) -> dict[str, Any]:
    """The decision of a proposal that joined a pending one: it names no fact of its own."""
    event: dict[str, Any] = {
        "type": "knowledge_decided",
        "event_id": derived_event_id(
            id_ts, "knowledge_decided", decision.proposal_id, "duplicate", decision.target_fact_id or ""
        ),
        "ts": ts,
        "agent_id": agent_id,
        "proposal_id": decision.proposal_id,
        "decision": "duplicate",
        "decided_by": "auto",
        "similarity": decision.similarity,
        "note": decision.note,
    }
    return {k: v for k, v in event.items() if v is not None}


def with_owners(decision: Decision, proposal: Proposal) -> Decision:
    """The decision's facts carry the proposal's owners (their words are now in them)."""
    if not proposal.owners:
        return decision
    changes = tuple(
        f.with_changes(owners=tuple(sorted(set(f.owners) | set(proposal.owners)))) for f in decision.changes
    )
    return replace(decision, changes=changes)


def apply_changes(
    state: KnowledgeState, decision: Decision, events: list[dict[str, Any]], id_ts: datetime
) -> None:
    """Fold a decision into the in-memory state and queue its events."""
    for fact in decision.changes:
        ev = decision_event(fact, ts=fact.updated_at, id_ts=id_ts)
        events.append(ev)
        state.facts[fact.fact_id] = fact.with_changes(event_id=ev["event_id"])
    if decision.action == "duplicate":
        joined = decision.changes[0]
        events.append(duplicate_event(decision, joined.agent_id, ts=joined.updated_at, id_ts=id_ts))
    state.decided[decision.proposal_id] = (
        decision.action if decision.action in ("pending", "duplicate") else "applied"
    )


def append_events(settings: Settings, events: list[dict[str, Any]]) -> tuple[int, int]:
    appended = duplicates = 0
    if not events:
        return 0, 0
    log = EventLog(settings)
    try:
        for start in range(0, len(events), APPEND_BATCH):
            batch = log.append_many(events[start : start + APPEND_BATCH])
            if batch.rejected:
                _index, error = batch.rejected[0]
                raise error
            appended += batch.accepted
            duplicates += batch.duplicates
    finally:
        log.close()
    return appended, duplicates


def run_evolve(
    settings: Settings,
    agent: str | None = None,
    *,
    now: datetime | None = None,
    merger: Merger | None = None,
    claude_client: Any | None = None,
    progress: bool | None = None,
    include_decisions: bool = False,
    engine: Engine | None = None,
) -> EvolveInfo:
    """Decide every undecided proposal (optionally of one agent), then promote and archive.

    Proposals are decided per agent (one agent's never touch another's facts),
    in partitions of agents that `engine` computes; promotions, archivals and
    the append stay here.
    """
    started = time.monotonic()
    now_dt = now or utcnow()
    now_ts = format_ts(now_dt)
    info = EvolveInfo(agent=agent)
    built = merger is None
    if merger is None:
        merger, info.path = make_merger(settings, claude_client)
    else:
        info.path = "custom"
    with job_lock(settings, CONSUMER):
        state = load_state(settings, agent)
        queue = state.undecided()
        info.proposals_seen = len(state.proposals)
        events: list[dict[str, Any]] = []
        counts: Counter[str] = Counter()
        bar = Progress("evolve", total=len(queue), enabled=progress)
        works = _partitions(state, queue, settings.batch.partition_agents, now_ts)
        if engine is None or engine.name == "local":
            results: Iterator[AgentsDecided] = (
                decide_agents(settings, merger, include_decisions, w) for w in works
            )
        else:  # a model merger's client stays here; the workers build theirs from the settings
            results = engine.map(decide_agents, works, settings, None if built else merger, include_decisions)
        for done in results:
            state.facts.update(done.facts)
            state.decided.update(done.decided)
            events.extend(done.events)
            counts.update(done.counts)
            info.decisions.extend(done.decisions)
            info.claude_merge_failures += done.merge_failures
            bar.update(done.proposals)
        bar.close()
        for fact in kv_supersessions(
            [f for f in state.facts.values() if agent is None or f.agent_id == agent], now_ts
        ):
            events.append(decision_event(fact, ts=now_ts, id_ts=parse_ts(fact.created_at)))
            state.facts[fact.fact_id] = fact
            counts["superseded_by_writes"] += 1
        held = [
            f
            for f in promotion_candidates(state.active_facts(agent), settings.evolver)
            if promotion_allowed(f, settings.evolver) is not None
        ]
        counts["promotions_held"] = len(held)
        for fact in promotions(state.active_facts(agent), settings.evolver, now_ts):
            events.append(decision_event(fact, ts=now_ts, id_ts=parse_ts(fact.created_at)))
            state.facts[fact.fact_id] = fact
            counts["promoted"] += 1
        for fact in archivals(
            state.active_facts(agent), settings.evolver, now_ts, state.recall_counts, state.last_recalled
        ):
            events.append(decision_event(fact, ts=now_ts, id_ts=parse_ts(fact.created_at)))
            state.facts[fact.fact_id] = fact
            counts["archived"] += 1
        info.events_appended, info.duplicates = append_events(settings, events)
        _save_checkpoint(settings, state)
    info.decided = sum(
        v
        for k, v in counts.items()
        if k not in ("promoted", "promotions_held", "archived", "superseded_by_writes")
    )
    for name in (
        "created",
        "touched",
        "merged",
        "superseded",
        "corrected",
        "pending",
        "promoted",
        "promotions_held",
        "archived",
        "superseded_by_writes",
    ):
        setattr(info, name, counts.get(name, 0))
    info.joined_pending = counts.get("duplicate", 0)
    statuses = Counter(f.status for f in state.facts.values() if agent is None or f.agent_id == agent)
    info.active_facts, info.inactive_facts = statuses.get("active", 0), statuses.get("inactive", 0)
    info.archived_facts = statuses.get("archived", 0)
    if hasattr(merger, "failures") and (engine is None or engine.name == "local"):
        info.claude_merge_failures = int(merger.failures)
    if built and hasattr(merger, "path"):  # a model merger whose endpoint was unreachable says so
        info.path = str(merger.path)
    info.elapsed_s = round(time.monotonic() - started, 3)
    return info


@dataclass
class AgentsWork:
    """One partition: the facts and the undecided proposals (in log order) of some agents."""

    facts: dict[str, Fact]
    queue: list[Proposal]
    now: str  # the run's time, the same in every partition


@dataclass
class AgentsDecided:
    facts: dict[str, Fact]  # every fact of the partition's agents after the decisions
    decided: dict[str, str]
    events: list[dict[str, Any]]
    counts: Counter[str]
    decisions: list[dict[str, Any]]
    proposals: int
    merge_failures: int = 0


def _partitions(state: KnowledgeState, queue: list[Proposal], size: int, now: str) -> list[AgentsWork]:
    """The agents with undecided proposals, `size` at a time, with their facts."""
    agents = sorted({p.agent_id for p in queue})
    part_of = {a: i // max(1, size) for i, a in enumerate(agents)}
    works = [AgentsWork({}, [], now) for _ in range((len(agents) + size - 1) // max(1, size))]
    for proposal in queue:
        works[part_of[proposal.agent_id]].queue.append(proposal)
    for fact in state.facts.values():
        if fact.agent_id in part_of:
            works[part_of[fact.agent_id]].facts[fact.fact_id] = fact
    return works


def decide_agents(
    settings: Settings, merger: Merger | None, include_decisions: bool, work: AgentsWork
) -> AgentsDecided:
    """Decide a partition's proposals in log order, each decision folded back before the next."""
    if merger is None:
        merger, _path = make_merger(settings, None)
    state = KnowledgeState(facts=dict(work.facts))
    out = AgentsDecided({}, {}, [], Counter(), [], len(work.queue))
    indexes: dict[str, FactIndex] = {}
    waiting: dict[str, FactIndex] = {}  # pending facts, which a proposal for review may join
    for fact in state.facts.values():
        indexes.setdefault(fact.agent_id, FactIndex()).put(fact)
        waiting.setdefault(fact.agent_id, FactIndex(status=PENDING)).put(fact)
    for proposal in work.queue:
        index = indexes.setdefault(proposal.agent_id, FactIndex())
        queued = waiting.setdefault(proposal.agent_id, FactIndex(status=PENDING))
        # Only facts of the same people: one user's words never merge into another's fact,
        # nor join another's item in the queue.
        decision = decide(
            proposal,
            same_owners(index.candidates(proposal), proposal.owners),
            settings.evolver,
            now=work.now,
            merger=merger,
            waiting=same_owners(queued.candidates(proposal, limit=5), proposal.owners),
        )
        decision = with_owners(decision, proposal)
        apply_changes(state, decision, out.events, parse_ts(proposal.ts))
        for fact in decision.changes:
            index.put(state.facts[fact.fact_id])
            queued.put(state.facts[fact.fact_id])
        out.counts[decision.action] += 1
        if include_decisions:
            out.decisions.append(_summary(decision, proposal))
    out.facts, out.decided = state.facts, state.decided
    out.merge_failures = int(getattr(merger, "failures", 0))
    return out


def _summary(decision: Decision, proposal: Proposal) -> dict[str, Any]:
    return {
        "proposal_id": proposal.proposal_id,
        "action": decision.action,
        "fact_ids": [f.fact_id for f in decision.changes],
        "similarity": decision.similarity,
        "note": decision.note,
    }


def _save_checkpoint(settings: Settings, state: KnowledgeState) -> None:
    """Record how far the log was read (observability: decisions dedupe themselves)."""
    Checkpoints(settings).save(CONSUMER, state.positions)
