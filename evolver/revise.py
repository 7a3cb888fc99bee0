"""An operator's revision of one fact, by id: edit its content or remove it.

The change goes to the log like every other decision, with who made it, why,
and the text before and after, so the knowledge view, the hot store and an
export all show it and a rebuild replays it.

- A learned fact (`fact:...`) gets a `knowledge_decided` event: decision
  `edited` (status stays active, `previous_content` holds the old text, the
  source becomes the editor's) or `removed` (status inactive, the text is kept
  for the audit trail and is never shown to the agent again).
- A key-value fact (`kv:...`) is edited by writing its new value (`fact_set`,
  source `user`; the old value stays in the log) and removed with
  `fact_removed`, whose reason names the editor.

A pending proposal is decided in the review queue (`proposals approve|reject`),
not here. Runs under the evolver's job lock, so it never races an evolve run
deciding against the same facts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tiermem.evolver.job import append_events, decision_event
from tiermem.evolver.state import ACTIVE, AGENT_SCOPE, INACTIVE, Fact, load_state

from tiermem.errors import NotFoundError, ValidationError
from tiermem.ids import format_ts, utcnow
from tiermem.locks import job_lock
from tiermem.settings import Settings


def _current(settings: Settings, agent_id: str, fact_id: str) -> Fact:
    state = load_state(settings, agent_id)
    fact = state.facts.get(fact_id)
    if fact is None or fact.agent_id != agent_id:
        raise NotFoundError(f"no fact {fact_id!r} of agent {agent_id!r}")
    if fact.status != ACTIVE:
        hint = " (a pending proposal is decided with `tiermem proposals`)" if fact.status == "pending" else ""
        raise ValidationError("fact_id", f"{fact_id} is {fact.status}, not active{hint}")
    return fact


def _scope_fields(fact: Fact) -> dict[str, Any]:
    fields: dict[str, Any] = {"key": fact.key}
    if fact.scope != AGENT_SCOPE:
        fields["scope"] = fact.scope
    if fact.project_id:
        fields["project_id"] = fact.project_id
    if fact.agent_type:
        fields["agent_type"] = fact.agent_type
    return fields


def _kv_value(fact: Fact) -> str:
    prefix = f"{fact.key}: "
    return fact.content[len(prefix) :] if fact.key and fact.content.startswith(prefix) else fact.content


def _outcome(fact: Fact, action: str, before: str, after: str | None, by: str, events: int) -> dict[str, Any]:
    return {
        "fact_id": fact.fact_id,
        "agent_id": fact.agent_id,
        "action": action,
        "before": before,
        "after": after,
        "decided_by": by,
        "events_appended": events,
    }


def edit_fact(
    settings: Settings,
    agent_id: str,
    fact_id: str,
    content: str,
    *,
    by: str = "user",
    reason: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Replace the content of one active fact of `agent_id`; returns what changed."""
    content = content.strip()
    if not content:
        raise ValidationError("content", "empty: to take a fact away, remove it")
    now_dt = now or utcnow()
    now_ts = format_ts(now_dt)
    with job_lock(settings, "evolver"):
        fact = _current(settings, agent_id, fact_id)
        if fact.is_kv:
            before = _kv_value(fact)
            event: dict[str, Any] = {
                "type": "fact_set",
                "ts": now_ts,
                "agent_id": agent_id,
                "fact_id": fact_id,
                "value": content,
                "source": "user",
                **_scope_fields(fact),
            }
            if fact.participant:
                event["participant"] = fact.participant
        else:
            before = fact.content
            edited = fact.with_changes(
                content=content,
                previous_content=before,
                original=None,
                decision="edited",
                decided_by=by,
                proposal_id=None,
                similarity=None,
                note=f"edited by {by}" + (f": {reason}" if reason else ""),
                source="user",
                updated_at=now_ts,
                revision=fact.revision + 1,
            )
            event = decision_event(edited, ts=now_ts, id_ts=now_dt)
        appended, _dups = append_events(settings, [event])
    return _outcome(fact, "edited", before, content, by, appended)


def remove_fact(
    settings: Settings,
    agent_id: str,
    fact_id: str,
    *,
    by: str = "user",
    reason: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Retire one active fact of `agent_id` (kept for the audit trail, never shown again)."""
    now_dt = now or utcnow()
    now_ts = format_ts(now_dt)
    note = f"removed by {by}" + (f": {reason}" if reason else "")
    with job_lock(settings, "evolver"):
        fact = _current(settings, agent_id, fact_id)
        if fact.is_kv:
            before = _kv_value(fact)
            event: dict[str, Any] = {
                "type": "fact_removed",
                "ts": now_ts,
                "agent_id": agent_id,
                "fact_id": fact_id,
                "reason": note,
                **_scope_fields(fact),
            }
        else:
            before = fact.content
            removed = fact.with_changes(
                status=INACTIVE,
                previous_content=before,
                decision="removed",
                decided_by=by,
                proposal_id=None,
                similarity=None,
                note=note,
                updated_at=now_ts,
                revision=fact.revision + 1,
            )
            event = decision_event(removed, ts=now_ts, id_ts=now_dt)
        appended, _dups = append_events(settings, [event])
    return _outcome(fact, "removed", before, None, by, appended)
