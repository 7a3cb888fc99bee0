"""The decision function: one proposal + the current facts → the resulting facts.

Pure: no I/O, no clock (the caller passes `now`), no randomness. The evolver
job folds the log and calls it; the runtime may call it too (for example to
tell an agent what `memory_idea_save` did). Every outcome is a list of
complete `Fact` rows, each with its `decision`, so the caller only has to
turn them into `knowledge_decided` events.

Rules (DESIGN, seeds 001 §8 and 002):
- a correction (`is_correction` / `corrects`) deactivates the wrong fact
  (kept for audit, never returned again) and makes the right one active;
- the same `key` with different content, or a contradiction on the same
  topic, supersedes: the old fact becomes inactive and the note says why;
- similarity > 0.95: touch (timestamp, add the source, no content change);
- 0.8–0.95 within the same scope owner: merge (newer wins on contradiction,
  the change is noted);
- < 0.8: a new fact;
- long content (> `summary_over_tokens`): the fact holds a summary for search
  and keeps the original beside it;
- the approval policy (`review_reason`): not said by the user and below
  `auto_apply_confidence`, or in a category or on a topic a person reviews →
  pending, for a person; a proposal that says what a pending one already says
  joins it (`duplicate`: one item in the queue, its sources added) instead of
  queueing a second copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tiermem.evolver.state import ACTIVE, INACTIVE, PENDING, Fact, Proposal, kv_owner

from tiermem.merging import Merger, contradicts, estimate_tokens, merge_offline, summarize_offline
from tiermem.settings import EvolverSettings
from tiermem.similarity import normalize, text_similarity

TOPIC_CONTRADICTION_MIN = 0.5  # below this, a same-topic fact is about something else
CORRECTION_TARGET_MIN = 0.5  # how close a fact must be to the text a correction names
# A correction that names no fact may still retire a same-topic fact it contradicts,
# but only one that shares some of its words: a topic is broad ("billing").
TOPIC_CORRECTION_MIN = 0.3


@dataclass(frozen=True)
class Decision:
    proposal_id: str
    action: str  # created|touched|merged|superseded|corrected|pending|duplicate
    changes: tuple[Fact, ...]
    target_fact_id: str | None = None
    similarity: float | None = None
    note: str | None = None
    merge_path: str | None = None


def new_fact_id(proposal_id: str) -> str:
    return f"fact:{proposal_id}"


def owner_of(fact_or_proposal: Fact | Proposal) -> tuple[str, str]:
    scope = fact_or_proposal.scope if isinstance(fact_or_proposal, Fact) else fact_or_proposal.effective_scope
    return scope, kv_owner(scope, fact_or_proposal.project_id, fact_or_proposal.agent_type)


def _merge_sources(*groups: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for g in groups for s in g))


def _sources(p: Proposal) -> tuple[str, ...]:
    return _merge_sources(p.source_event_ids, (p.proposal_id,))


def _seen(fact: Fact | None, p: Proposal) -> tuple[str, ...]:
    existing = fact.seen_projects if fact else ()
    return tuple(sorted(set(existing) | ({p.project_id} if p.project_id else set())))


def _participant_ok(fact: Fact, p: Proposal) -> bool:
    return fact.participant is None or p.participant is None or fact.participant == p.participant


def _new_fact(
    p: Proposal, now: str, content: str, original: str | None, decided_by: str, **extra: object
) -> Fact:
    scope = p.effective_scope
    fields: dict[str, object] = {
        "fact_id": new_fact_id(p.proposal_id),
        "agent_id": p.agent_id,
        "content": content,
        "status": ACTIVE,
        "scope": scope,
        "created_at": now,
        "updated_at": now,
        "category": p.category,
        "topic": p.topic,
        "key": p.key,
        "participant": p.participant,
        "project_id": p.project_id if scope in ("project", "override") else None,
        "agent_type": p.agent_type,
        "source": p.origin,
        "decision": "created",
        "decided_by": decided_by,
        "proposal_id": p.proposal_id,
        "original": original,
        "importance": p.importance,
        "confidence": p.confidence,
        "revision": 1,
        "seen_projects": _seen(None, p),
        "source_event_ids": _sources(p),
    }
    fields.update(extra)
    return Fact(**fields)  # type: ignore[arg-type]


def _retire(fact: Fact, p: Proposal, now: str, decision: str, note: str, decided_by: str) -> Fact:
    return fact.with_changes(
        status=INACTIVE,
        decision=decision,
        decided_by=decided_by,
        proposal_id=p.proposal_id,
        note=note,
        previous_content=None,
        similarity=None,
        updated_at=now,
        revision=fact.revision + 1,
        source_event_ids=_merge_sources(fact.source_event_ids, (p.proposal_id,)),
    )


def _correction_targets(
    p: Proposal, facts: list[Fact], similarity: Callable[[str, str], float]
) -> list[Fact]:
    if p.corrects:
        by_id = [f for f in facts if f.fact_id == p.corrects]
        if by_id:
            return by_id
    targets: list[Fact] = []
    if p.key:
        targets = [f for f in facts if f.key == p.key and owner_of(f) == owner_of(p)]
    if targets:
        return targets
    probes = [t for t in (p.corrects, p.content) if t]
    scored = sorted(
        ((max(similarity(t, f.content) for t in probes), f.fact_id, f) for f in facts), reverse=True
    )
    if scored and scored[0][0] >= CORRECTION_TARGET_MIN:
        best = scored[0][0]
        # Every fact about as close as the best one goes: a wrong belief is often saved twice.
        return [f for s, _, f in scored if s >= max(CORRECTION_TARGET_MIN, best - 0.05)]
    if p.topic:
        return [
            f
            for s, _, f in scored
            if f.topic == p.topic and s >= TOPIC_CORRECTION_MIN and contradicts(f.content, p.content)
        ]
    return []


def review_reason(p: Proposal, settings: EvolverSettings) -> str | None:
    """Why the approval policy keeps `p` for a person, or None when it may be applied as it is."""
    if p.origin == "user":
        return None  # the person the fact is about said it
    if p.confidence < settings.auto_apply_confidence:
        return f"confidence {p.confidence:.2f} < {settings.auto_apply_confidence:.2f}: waits for review"
    if p.category and p.category in settings.review_categories:
        return f"category {p.category!r} is reviewed by a person: waits for review"
    if p.topic and p.topic in settings.review_topics:
        return f"topic {p.topic!r} is sensitive: waits for review"
    return None


def _pending_twin(
    p: Proposal,
    text: str,
    waiting: Iterable[Fact],
    settings: EvolverSettings,
    similarity: Callable[[str, str], float],
) -> tuple[Fact, float] | None:
    """The pending fact (same agent, owner and person) that already says what `p` says."""
    best: tuple[Fact, float] | None = None
    for f in waiting:
        if f.agent_id != p.agent_id or f.status != PENDING or owner_of(f) != owner_of(p):
            continue
        if f.participant != p.participant or f.is_kv:
            continue
        score = similarity(text, f.content)
        if score >= settings.related and (best is None or score > best[1]):
            best = (f, score)
    return best


def _near_identical(
    text: str, candidates: list[Fact], settings: EvolverSettings, similarity: Callable[[str, str], float]
) -> tuple[Fact, float] | None:
    """The active fact that says the same thing (similarity above `near_identical`), if any."""
    best = max(((similarity(text, f.content), f) for f in candidates), key=lambda x: x[0], default=None)
    if best is None or best[0] <= settings.near_identical:
        return None
    return best[1], best[0]


def _for_review(
    p: Proposal,
    note: str,
    text: str,
    original: str | None,
    waiting: Iterable[Fact],
    settings: EvolverSettings,
    now: str,
    decided_by: str,
    similarity: Callable[[str, str], float],
) -> Decision:
    """A proposal the policy holds for a person: join a pending twin, else wait on its own."""
    twin = _pending_twin(p, text, waiting, settings, similarity)
    if twin is not None:
        fact, score = twin
        joined = fact.with_changes(
            updated_at=now,
            revision=fact.revision + 1,
            importance=max(fact.importance, p.importance),
            confidence=max(fact.confidence, p.confidence),
            seen_projects=_seen(fact, p),
            source_event_ids=_merge_sources(fact.source_event_ids, _sources(p)),
        )
        said = f"says what pending {fact.fact_id} says: waits with it"
        return Decision(p.proposal_id, "duplicate", (joined,), fact.fact_id, round(score, 6), said)
    pending = _new_fact(p, now, text, original, decided_by, status=PENDING, decision="pending")
    return Decision(p.proposal_id, "pending", (pending.with_changes(note=note),), note=note)


def _correct(
    p: Proposal,
    candidates: list[Fact],
    text: str,
    original: str | None,
    settings: EvolverSettings,
    now: str,
    decided_by: str,
    similarity: Callable[[str, str], float],
) -> Decision | None:
    """A correction: the wrong facts inactive, the right one active (None: nothing to correct)."""
    targets = _correction_targets(p, candidates, similarity)
    if not targets:
        return None
    # The right fact may already exist among them (the agent saved it too): keep that one.
    same = [t for t in targets if similarity(text, t.content) > settings.near_identical]
    wrong = [t for t in targets if t not in same]
    changes = [
        _retire(t, p, now, "deactivated", f"corrected by {p.origin}: '{text}'", decided_by) for t in wrong
    ]
    if same:
        keep = same[0]
        changes.append(_touch(keep, p, now, decided_by, similarity(text, keep.content)))
    else:
        old = "; ".join(t.content for t in wrong)
        changes.append(
            _new_fact(
                p,
                now,
                text,
                original,
                decided_by,
                previous_content=old,
                note=f"correction: replaces '{old}'",
                source="user" if p.origin in ("user", "gap_fill") else p.origin,
            )
        )
    return Decision(
        p.proposal_id,
        "corrected",
        tuple(changes),
        target_fact_id=wrong[0].fact_id if wrong else None,
        note=changes[-1].note,
    )


def decide(
    p: Proposal,
    facts: Iterable[Fact],
    settings: EvolverSettings,
    *,
    now: str,
    merger: Merger = merge_offline,
    similarity: Callable[[str, str], float] = text_similarity,
    decided_by: str = "auto",
    require_approval: bool = True,
    waiting: Iterable[Fact] = (),
) -> Decision:
    """Decide what one proposal does to the facts of its agent (see module doc).

    `waiting`: the agent's pending facts, which a proposal for review may join.
    """
    candidates = [
        f
        for f in facts
        if f.agent_id == p.agent_id and f.status == ACTIVE and _participant_ok(f, p) and not f.is_kv
    ]
    text, original = p.content.strip(), None
    if estimate_tokens(text) > settings.summary_over_tokens:
        original, text = text, summarize_offline(text)

    note = review_reason(p, settings) if require_approval else None
    if note is not None:
        # Saying again what an active fact already says adds a source, not content: no person needed.
        same = _near_identical(text, candidates, settings, similarity)
        if same is not None:
            fact, score = same
            return Decision(
                p.proposal_id, "touched", (_touch(fact, p, now, decided_by, score),), fact.fact_id, score
            )
        return _for_review(p, note, text, original, waiting, settings, now, decided_by, similarity)
    if p.is_correction or p.corrects:
        corrected = _correct(p, candidates, text, original, settings, now, decided_by, similarity)
        if corrected is not None:
            return corrected

    scored = sorted(((similarity(text, f.content), f.fact_id, f) for f in candidates), reverse=True)
    best_score, best = (scored[0][0], scored[0][2]) if scored else (0.0, None)

    if best is not None and best_score > settings.near_identical:
        return Decision(
            p.proposal_id,
            "touched",
            (_touch(best, p, now, decided_by, best_score),),
            best.fact_id,
            best_score,
        )

    # Same key or same topic, different content, same owner: a contradiction the newer proposal wins.
    same_owner = [(s, f) for s, _, f in scored if owner_of(f) == owner_of(p)]
    rivals = [f for s, f in same_owner if p.key and f.key == p.key]
    if not rivals:
        rivals = [
            f
            for s, f in same_owner
            if p.topic
            and f.topic == p.topic
            and s >= TOPIC_CONTRADICTION_MIN
            and contradicts(f.content, text)
        ]
    if not rivals:
        rivals = [
            f
            for s, f in same_owner
            if settings.related > s >= TOPIC_CONTRADICTION_MIN
            and contradicts(f.content, text, strong_only=True)
        ][:1]
    if not rivals and best is not None and best_score >= settings.related and owner_of(best) == owner_of(p):
        result = merger(best.content, text)
        if not (result.contradiction and normalize(result.content) == normalize(text)):
            merged = best.with_changes(
                content=result.content,
                previous_content=best.content,
                decision="merged",
                decided_by="claude" if result.path == "claude" and decided_by == "auto" else decided_by,
                proposal_id=p.proposal_id,
                similarity=round(best_score, 6),
                note=result.note,
                original=original or best.original,
                importance=max(best.importance, p.importance),
                confidence=max(best.confidence, p.confidence),
                updated_at=now,
                revision=best.revision + 1,
                seen_projects=_seen(best, p),
                source_event_ids=_merge_sources(best.source_event_ids, _sources(p)),
                source=p.origin,
            )
            return Decision(
                p.proposal_id, "merged", (merged,), best.fact_id, best_score, result.note, result.path
            )
        rivals = [best]

    if rivals:
        old = "; ".join(r.content for r in rivals)
        note = f"changed: '{old}' → '{text}' (newer wins)"
        changes = [_retire(r, p, now, "superseded", f"superseded by '{text}'", decided_by) for r in rivals]
        changes.append(
            _new_fact(
                p,
                now,
                text,
                original,
                decided_by,
                previous_content=old,
                note=note,
                similarity=round(similarity(text, rivals[0].content), 6),
            )
        )
        return Decision(p.proposal_id, "superseded", tuple(changes), rivals[0].fact_id, best_score, note)

    created = _new_fact(p, now, text, original, decided_by, similarity=round(best_score, 6) if best else None)
    return Decision(p.proposal_id, "created", (created,), None, best_score if best else None)


def _touch(fact: Fact, p: Proposal, now: str, decided_by: str, score: float) -> Fact:
    return fact.with_changes(
        decision="touched",
        decided_by=decided_by,
        proposal_id=p.proposal_id,
        similarity=round(score, 6),
        note=None,
        previous_content=None,
        updated_at=now,
        revision=fact.revision + 1,
        importance=max(fact.importance, p.importance),
        confidence=max(fact.confidence, p.confidence),
        seen_projects=_seen(fact, p),
        source_event_ids=_merge_sources(fact.source_event_ids, _sources(p)),
    )
