"""The review queue: proposals a person approves or rejects, with provenance and diffs.

The approval policy lives in `decide.review_reason` (not said by the user, and
below `settings.evolver.auto_apply_confidence`, or in a reviewed category, or
on a sensitive topic: a proposal waits as a `pending` decision on a
placeholder fact `fact:<proposal_id>`; one saying the same as a waiting one
joins it as a `duplicate`, so the queue holds each thing once).
Here a person looks at it — the quoted source turns it came from (looked up in
the log by `source_event_ids` and its evidence), and for merges and corrections
a diff against the current fact — and decides. Approval re-runs the decision
against the *current* state (the world may have moved since), decided by
"user"; rejection retires the placeholder. Both are `knowledge_decided` events.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict
from datetime import datetime
from typing import Any

from tiermem.evolver.decide import Decision, decide, new_fact_id
from tiermem.evolver.job import append_events, decision_event, job_lock
from tiermem.evolver.state import INACTIVE, PENDING, Fact, KnowledgeState, Proposal, load_state

from tiermem.errors import NotFoundError, ValidationError
from tiermem.ids import format_ts, utcnow
from tiermem.merging import make_merger
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog

SNIPPET = 280  # characters of a quoted source turn


def _snip(text: str | None, limit: int = SNIPPET) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def list_proposals(
    settings: Settings, agent: str | None = None, status: str | None = "pending"
) -> list[dict[str, Any]]:
    """Rows of the `proposals` view (default: the pending ones), oldest first."""
    con = open_catalog(settings)
    try:
        where, params = ["true"], []
        if agent:
            where.append("agent_id = ?")
            params.append(agent)
        if status and status != "all":
            where.append("status = ?")
            params.append(status)
        cur = con.execute(
            "SELECT proposal_id, agent_id, status, confidence, origin, category, topic, key, content, "
            f"decision, fact_id, ts FROM proposals WHERE {' AND '.join(where)} ORDER BY ts, proposal_id",
            params,
        )
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    finally:
        con.close()


def source_turns(settings: Settings, event_ids: list[str]) -> list[dict[str, Any]]:
    """The interactions a proposal came from, as short quotes (provenance)."""
    if not event_ids:
        return []
    con = open_catalog(settings)
    try:
        rows = con.execute(
            'SELECT event_id, ts, agent_id, "user", session_id, user_message, agent_response '
            "FROM interactions WHERE event_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY ts, event_id",
            [event_ids],
        ).fetchall()
    finally:
        con.close()
    return [
        {
            "event_id": r[0],
            "ts": format_ts(r[1]) if isinstance(r[1], datetime) else r[1],
            "user": r[3],
            "session_id": r[4],
            "user_message": _snip(r[5]),
            "agent_response": _snip(r[6]),
        }
        for r in rows
    ]


def diff(old: str, new: str) -> str:
    """A word-level unified diff, readable in a terminal."""
    return "\n".join(
        difflib.unified_diff(
            old.replace(". ", ".\n").splitlines(),
            new.replace(". ", ".\n").splitlines(),
            "current",
            "proposed",
            lineterm="",
        )
    )


def _proposal(state: KnowledgeState, proposal_id: str) -> Proposal:
    p = state.proposals.get(proposal_id)
    if p is None:
        raise NotFoundError(f"no proposal {proposal_id!r}")
    return p


def preview(settings: Settings, state: KnowledgeState, p: Proposal, now: str) -> Decision:
    facts = [
        f
        for f in state.facts.values()
        if f.agent_id == p.agent_id and f.fact_id != new_fact_id(p.proposal_id) and f.owners == p.owners
    ]
    merger, _path = make_merger(settings)
    return decide(
        p, facts, settings.evolver, now=now, merger=merger, decided_by="user", require_approval=False
    )


def show_proposal(settings: Settings, proposal_id: str) -> dict[str, Any]:
    """Everything a reviewer needs: the proposal, its status, its source turns and what approving would do."""
    state = load_state(settings)
    p = _proposal(state, proposal_id)
    now = format_ts(utcnow())
    outcome = preview(settings, state, p, now)
    changes = []
    for fact in outcome.changes:
        current = state.facts.get(fact.fact_id)
        entry: dict[str, Any] = {
            "fact_id": fact.fact_id,
            "decision": fact.decision,
            "status": fact.status,
            "content": fact.content,
            "note": fact.note,
        }
        if current is not None and current.status != PENDING:
            entry["current_content"] = current.content
            entry["diff"] = diff(current.content, fact.content)
        elif fact.previous_content:
            entry["current_content"] = fact.previous_content
            entry["diff"] = diff(fact.previous_content, fact.content)
        changes.append(entry)
    evidence_ids = [str(e["event_id"]) for e in p.evidence if e.get("event_id")]
    return {
        "proposal": asdict(p),
        "status": _status(state, p.proposal_id),
        "provenance": {
            "evidence": [{"text": _snip(e.get("text")), "event_id": e.get("event_id")} for e in p.evidence],
            "source_turns": source_turns(settings, list(dict.fromkeys([*p.source_event_ids, *evidence_ids]))),
        },
        "if_approved": {
            "action": outcome.action,
            "similarity": outcome.similarity,
            "target_fact_id": outcome.target_fact_id,
            "changes": changes,
        },
    }


def _status(state: KnowledgeState, proposal_id: str) -> str:
    decision = state.decided.get(proposal_id)
    if decision is None:
        return "new"
    return decision if decision in (PENDING, "rejected") else "decided"


def _placeholder(state: KnowledgeState, p: Proposal) -> Fact:
    fact = state.facts.get(new_fact_id(p.proposal_id))
    if fact is None or fact.status != PENDING:
        raise ValidationError(
            "proposal_id", f"{p.proposal_id} is not pending (status {_status(state, p.proposal_id)})"
        )
    return fact


def approve(
    settings: Settings, proposal_id: str, *, by: str = "user", now: datetime | None = None
) -> dict[str, Any]:
    """Apply a pending proposal as if it had passed the policy, decided by `by`."""
    now_dt = now or utcnow()
    now_ts = format_ts(now_dt)
    with job_lock(settings, "evolver"):
        state = load_state(settings)
        p = _proposal(state, proposal_id)
        placeholder = _placeholder(state, p)
        outcome = preview(settings, state, p, now_ts)
        events = []
        touched_placeholder = False
        for fact in outcome.changes:
            fact = fact.with_changes(decided_by=by)
            if fact.fact_id == placeholder.fact_id:
                # Proposals that joined this one while it waited bring their sources along.
                sources = tuple(dict.fromkeys((*fact.source_event_ids, *placeholder.source_event_ids)))
                fact = fact.with_changes(
                    revision=placeholder.revision + 1,
                    created_at=placeholder.created_at,
                    source_event_ids=sources,
                )
                touched_placeholder = True
            events.append(decision_event(fact, ts=now_ts, id_ts=now_dt))
        if not touched_placeholder:
            target = outcome.target_fact_id or (outcome.changes[0].fact_id if outcome.changes else None)
            done = placeholder.with_changes(
                status=INACTIVE,
                decision="approved",
                decided_by=by,
                note=f"approved: {outcome.action} into {target}",
                updated_at=now_ts,
                revision=placeholder.revision + 1,
            )
            events.append(decision_event(done, ts=now_ts, id_ts=now_dt))
        appended, _dups = append_events(settings, events)
    return {
        "proposal_id": proposal_id,
        "action": outcome.action,
        "decided_by": by,
        "fact_ids": [e["fact_id"] for e in events],
        "events_appended": appended,
    }


def reject(
    settings: Settings,
    proposal_id: str,
    *,
    by: str = "user",
    reason: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Retire a pending proposal; it is kept (inactive) for the audit trail."""
    now_dt = now or utcnow()
    now_ts = format_ts(now_dt)
    with job_lock(settings, "evolver"):
        state = load_state(settings)
        p = _proposal(state, proposal_id)
        placeholder = _placeholder(state, p)
        done = placeholder.with_changes(
            status=INACTIVE,
            decision="rejected",
            decided_by=by,
            note=f"rejected by {by}" + (f": {reason}" if reason else ""),
            updated_at=now_ts,
            revision=placeholder.revision + 1,
        )
        appended, _dups = append_events(settings, [decision_event(done, ts=now_ts, id_ts=now_dt)])
    return {"proposal_id": proposal_id, "action": "rejected", "decided_by": by, "events_appended": appended}
