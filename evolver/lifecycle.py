"""Promotion and archiving (docs/evolver.md).

Pure functions over the folded state: which facts move to the agent-type
scope because they were seen in several projects, and which are archived
because they are stale, never recalled and of low importance. Facts a user
said (source "user") are never archived automatically.

Promotion never widens a user's data: only a fact with no tie to a user (no
participant, no owner among the turns it came from) may move to a wider
scope, and only when the approval policy would apply it without a person
(a user's word, or confidence at least `auto_apply_confidence`); the others
stay where they are and are counted as held back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from tiermem.evolver.state import ACTIVE, ARCHIVED, INACTIVE, Fact

from tiermem.ids import parse_ts
from tiermem.settings import EvolverSettings


def _auto_revision(f: Fact, now: str, decision: str, note: str, **changes: object) -> Fact:
    """The next revision of `f`, decided by the evolver itself (no proposal, nothing merged in)."""
    return f.with_changes(
        decision=decision,
        decided_by="auto",
        note=note,
        previous_content=None,
        similarity=None,
        updated_at=now,
        revision=f.revision + 1,
        **changes,
    )


def same_owners(facts: Iterable[Fact], owners: tuple[str, ...]) -> list[Fact]:
    """The facts a decision about a proposal with these owners may touch: same people, no others."""
    return [f for f in facts if f.owners == owners]


def promotion_allowed(f: Fact, settings: EvolverSettings) -> str | None:
    """None when the fact may be published wider; else why not."""
    if f.owners or f.participant:
        return "tied to a user: a user's data is never published to a wider scope"
    if f.source != "user" and f.confidence < settings.auto_apply_confidence:
        return (
            f"confidence {f.confidence:.2f} < {settings.auto_apply_confidence:.2f}: "
            "the approval policy would not apply it without a person"
        )
    return None


def promotion_candidates(facts: Iterable[Fact], settings: EvolverSettings) -> list[Fact]:
    """Project-scoped facts seen in at least `promote_min_projects` projects."""
    return [
        f
        for f in facts
        if f.status == ACTIVE
        and not f.is_kv
        and f.scope in ("project", "override")
        and len(f.seen_projects) >= settings.promote_min_projects
    ]


def promotions(facts: Iterable[Fact], settings: EvolverSettings, now: str) -> list[Fact]:
    """Promotion candidates the policy allows → agent-type scope."""
    out = []
    for f in promotion_candidates(facts, settings):
        if promotion_allowed(f, settings) is not None:
            continue
        note = f"seen in {len(f.seen_projects)} projects: {', '.join(f.seen_projects)}"
        out.append(_auto_revision(f, now, "promoted", note, scope="agent_type", project_id=None))
    return out


def archivals(
    facts: Iterable[Fact],
    settings: EvolverSettings,
    now: str,
    recall_counts: Mapping[str, int],
    last_recalled: Mapping[str, str] | None = None,
) -> list[Fact]:
    """Active facts not updated or recalled for `archive_after_days`, never recalled, low importance."""
    cutoff: datetime = parse_ts(now) - timedelta(days=settings.archive_after_days)
    last_recalled = last_recalled or {}
    out = []
    for f in facts:
        if f.status != ACTIVE or f.is_kv or f.source == "user":
            continue
        if f.importance > settings.archive_max_importance or recall_counts.get(f.fact_id, 0) > 0:
            continue
        last_touch = max(parse_ts(f.updated_at), parse_ts(last_recalled.get(f.fact_id, f.updated_at)))
        if last_touch > cutoff:
            continue
        note = (
            f"stale since {f.updated_at[:10]}, never recalled, importance {f.importance} "
            f"<= {settings.archive_max_importance}"
        )
        out.append(_auto_revision(f, now, "archived", note, status=ARCHIVED))
    return out


def kv_supersessions(facts: Iterable[Fact], now: str) -> list[Fact]:
    """Learned facts that an explicit KV write (`fact_set`) with the same key has overtaken.

    An explicit write is the most direct statement there is (user
    correction > agent > system), so an older learned fact with the same key and
    scope owner becomes inactive, with a note naming the write.
    """
    facts = list(facts)
    latest_kv: dict[tuple[str, str, str | None, str | None, str], Fact] = {}
    for f in facts:
        if f.is_kv and f.status == ACTIVE and f.key:
            latest_kv[(f.agent_id, f.scope, f.project_id, f.agent_type, f.key)] = f
    out = []
    for f in facts:
        if f.is_kv or f.status != ACTIVE or not f.key:
            continue
        kv = latest_kv.get((f.agent_id, f.scope, f.project_id, f.agent_type, f.key))
        if kv is None or kv.updated_at <= f.updated_at:
            continue
        value = kv.content.split(": ", 1)[-1]
        if value.strip().lower() in f.content.lower():
            continue  # the learned fact already says what the write says
        out.append(
            _auto_revision(
                f,
                now,
                "superseded",
                f"superseded by the explicit write {kv.fact_id} = '{value}'",
                status=INACTIVE,
                source_event_ids=tuple(dict.fromkeys([*f.source_event_ids, *kv.source_event_ids])),
            )
        )
    return out
