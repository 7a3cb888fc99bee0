"""From a scored batch to `episode` and `knowledge_proposed` events with deterministic ids.

An event's id is `derived_event_id(ts, kind, agent, *inputs)` where the inputs
are the ids of the interactions it was derived from (and, for a fact, its
category and content), so computing the same batch again gives the same ids
and the log drops the repeat: killing the job and re-running it cannot
duplicate anything.
"""

from __future__ import annotations

from typing import Any

from tiermem.compressor.scoring import BatchResult, EpisodeDraft, FactDraft, Interaction

from tiermem.dates import human_date, human_range
from tiermem.events import SCHEMA_VERSION
from tiermem.ids import derived_event_id, format_ts


def episode_event(
    agent_id: str,
    draft: EpisodeDraft,
    batch: dict[str, Interaction],
    scores: dict[str, int],
    *,
    threshold: int,
    scorer: str,
) -> dict[str, Any]:
    members = [batch[m] for m in draft.member_ids]
    start, end = members[0].ts, members[-1].ts
    participants = sorted({m.user for m in members if m.user})
    project = next((m.project_id for m in members if m.project_id), "")
    summary = draft.summary
    # Dates must survive compression even when a model forgets them.
    if human_date(start) not in summary:
        summary = f"{summary} ({human_range(start, end)})"
    end_ts = format_ts(end)
    event: dict[str, Any] = {
        "event_id": derived_event_id(end, "episode", agent_id, *draft.member_ids),
        "type": "episode",
        "schema_version": SCHEMA_VERSION,
        "ts": end_ts,
        "agent_id": agent_id,
        "name": draft.name,
        "summary": summary,
        "key_quotes": [
            {"text": q.text, "event_id": q.event_id, "speaker": q.speaker} for q in draft.key_quotes
        ],
        "participants": participants,
        "start_ts": format_ts(start),
        "end_ts": end_ts,
        "importance": draft.importance,
        "important": draft.importance >= threshold,
        "emotional_context": draft.emotional_context,
        "kind": "episode",
        "scorer": scorer,
        "source_event_ids": list(draft.member_ids),
        "metadata": {"scores": {m: scores[m] for m in draft.member_ids}, "threshold": threshold},
    }
    if project:
        event["project_id"] = project
    return event


def fact_event(agent_id: str, fact: FactDraft, batch: dict[str, Interaction]) -> dict[str, Any]:
    sources = sorted({q.event_id for q in fact.evidence}, key=lambda e: (batch[e].ts, e))
    last = batch[sources[-1]]
    project = next((batch[s].project_id for s in sources if batch[s].project_id), "")
    event: dict[str, Any] = {
        "event_id": derived_event_id(
            last.ts, "knowledge_proposed", agent_id, fact.category, fact.content, *sources
        ),
        "type": "knowledge_proposed",
        "schema_version": SCHEMA_VERSION,
        "ts": format_ts(last.ts),
        "agent_id": agent_id,
        "category": fact.category,
        "topic": fact.topic,
        "content": fact.content,
        "participant": fact.participant,
        "confidence": fact.confidence,
        "importance": fact.importance,
        "origin": "compressor",
        "is_correction": fact.is_correction,
        "evidence": [{"text": q.text, "event_id": q.event_id} for q in fact.evidence],
        "source_event_ids": sources,
    }
    # With a project the fact is the project's (every agent on it may use it);
    # without one it stays the agent's own: an event that names no scope.
    if project:
        event["scope"] = "project"
        event["project_id"] = project
    if not fact.participant:
        del event["participant"]
    return event


def batch_events(
    agent_id: str, batch: list[Interaction], result: BatchResult, *, threshold: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(episode events, knowledge_proposed events) for one sanitised batch."""
    by_id = {it.event_id: it for it in batch}
    episodes = [
        episode_event(agent_id, ep, by_id, result.scores, threshold=threshold, scorer=result.scorer)
        for ep in result.episodes
    ]
    seen: set[str] = set()
    facts = []
    for fact in result.facts:
        ev = fact_event(agent_id, fact, by_id)
        if ev["event_id"] not in seen:
            seen.add(ev["event_id"])
            facts.append(ev)
    return episodes, facts
