"""The sanitisation layer between a model's output and the log.

Models reference ids that do not exist, write numbers as strings, go out of
range, paraphrase when asked for verbatim quotes, and stop mid-JSON. Each of
these is corrected here or, when nothing usable is left, reported as a
`MalformedOutput` so the job retries the batch: a batch is written whole or
not at all. The rules:

- ids: the model sees short labels (`t1`..`t15`); unknown labels are dropped,
  labels used by two episodes stay with the first one;
- numbers: "7", 7.6, "8/10" are coerced; importance is clamped to 1-10,
  confidence to 0-1; booleans accept true/"yes"/1;
- quotes: kept only when they occur verbatim in the turn they cite;
- coverage: every interaction of the batch gets a score and ends up in exactly
  one episode (unassigned ones join their nearest neighbour's episode);
- partial JSON (a truncated tool input or a JSON text block) is repaired by
  closing open strings and brackets; if that fails the batch is retried.
"""

from __future__ import annotations

import math
import re
from typing import Any

import orjson
from tiermem.compressor.scoring import (
    FACT_CATEGORIES,
    BatchResult,
    EpisodeDraft,
    FactDraft,
    Interaction,
    Quote,
)


class MalformedOutput(Exception):
    """The model's answer cannot be turned into a complete batch; retry the batch."""


def coerce_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        m = re.search(r"-?\d+(?:\.\d+)?", value)
        if m:
            return float(m.group(0))
    return None


def clamp_importance(value: Any, default: int = 1) -> int:
    n = coerce_number(value)
    if n is None:
        return default
    return max(1, min(10, round(n)))


def coerce_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value > 0
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "y")
    return False


def _text(value: Any, limit: int = 2000) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        value = str(value)
    return value.replace("\x00", "").strip()[:limit]


def _open_brackets(text: str) -> tuple[list[str], bool]:
    """The closers still owed at the end of `text`, innermost last, and whether a string is open."""
    stack: list[str] = []
    in_string = escape = False
    for ch in text:
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and stack:
            stack.pop()
    return stack, in_string


def repair_json(text: str) -> Any:
    """Parse JSON that may be wrapped in prose or code fences, or cut off; None if hopeless."""
    text = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)(?:```|$)", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        return None
    text = text[start:]
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    # Walk the text tracking open strings/brackets, then close what is open. A
    # trailing fragment that cannot stand (a dangling key, a comma) is cut back.
    stack, in_string = _open_brackets(text)
    candidate = text + ('"' if in_string else "")
    for _ in range(200):
        try:
            return orjson.loads(candidate + "".join(reversed(stack)))
        except orjson.JSONDecodeError:
            trimmed = re.sub(r'(,\s*"[^"]*"\s*:?\s*|,\s*|:\s*|"[^"]*"\s*:\s*)$', "", candidate)
            if trimmed == candidate:
                trimmed = candidate[:-1]
            candidate = trimmed
            # Recount the brackets still open in what is left.
            stack, in_string = _open_brackets(candidate)
            if in_string:
                candidate += '"'
            if not candidate:
                return None
    return None


def labels_for(batch: list[Interaction]) -> dict[str, Interaction]:
    return {f"t{i + 1}": it for i, it in enumerate(batch)}


def _resolve(label: Any, labels: dict[str, Interaction], by_id: dict[str, Interaction]) -> Interaction | None:
    key = _text(label)
    if key in labels:
        return labels[key]
    if key in by_id:
        return by_id[key]
    if key.isdigit() and f"t{key}" in labels:
        return labels[f"t{key}"]
    return None


def _quote(
    raw: Any, default_turn: Interaction | None, labels: dict[str, Interaction], by_id: dict[str, Interaction]
) -> Quote | None:
    if isinstance(raw, str):
        raw = {"text": raw}
    if not isinstance(raw, dict):
        return None
    text = _text(raw.get("text"))
    if not text:
        return None
    turn = _resolve(raw.get("id") or raw.get("interaction_id") or raw.get("event_id"), labels, by_id)
    candidates = [turn] if turn else []
    if default_turn is not None:
        candidates.append(default_turn)
    candidates.extend(labels.values())
    for it in candidates:
        if it is None:
            continue
        for speaker, side in it.lines():
            if text in side:
                return Quote(text=text, event_id=it.event_id, speaker=speaker)
    return None  # not verbatim anywhere: a paraphrase is not a quote


_Index = dict[str, Interaction]


def sanitize_batch(raw: Any, batch: list[Interaction], *, scorer: str) -> BatchResult:
    """Turn the model's tool input into a complete, trustworthy BatchResult (or raise MalformedOutput)."""
    answer = _answer_object(raw)
    labels = labels_for(batch)
    by_id = {it.event_id: it for it in batch}
    scores = _read_scores(answer, labels, by_id)
    episodes, assigned = _read_episodes(answer, labels, by_id)
    # Every interaction gets a score and an episode; a half-covered batch is completed, not dropped.
    _complete_scores(scores, batch)
    _assign_leftovers(batch, episodes, assigned)
    _finish_episodes(episodes, batch, scores, by_id)
    facts = _read_facts(answer, labels, by_id)
    return BatchResult(scores=scores, episodes=episodes, facts=facts, scorer=scorer)


def _answer_object(raw: Any) -> dict[str, Any]:
    """The tool input as an object (a string answer is repaired and parsed first)."""
    if isinstance(raw, str):
        raw = repair_json(raw)
    if not isinstance(raw, dict):
        raise MalformedOutput(f"expected an object, got {type(raw).__name__}")
    return raw


def _read_scores(answer: dict[str, Any], labels: _Index, by_id: _Index) -> dict[str, int]:
    """The importance the model gave each interaction it named (the first score for an id wins)."""
    scores: dict[str, int] = {}
    for item in answer.get("interactions") or []:
        if not isinstance(item, dict):
            continue
        it = _resolve(item.get("id"), labels, by_id)
        if it is not None and it.event_id not in scores:
            scores[it.event_id] = clamp_importance(item.get("importance"))
    return scores


def _read_episodes(
    answer: dict[str, Any], labels: _Index, by_id: _Index
) -> tuple[list[EpisodeDraft], dict[str, int]]:
    """The model's episodes with at least one member, and the episode index each member went to."""
    episodes: list[EpisodeDraft] = []
    assigned: dict[str, int] = {}
    for ep in answer.get("episodes") or []:
        if not isinstance(ep, dict):
            continue
        members = _episode_members(ep, labels, by_id, assigned)
        if not members:
            continue
        index = len(episodes)
        for it in members:
            assigned[it.event_id] = index
        episodes.append(_episode_draft(ep, members, labels, by_id))
    if not episodes:
        raise MalformedOutput("no usable episode in the answer")
    return episodes, assigned


def _episode_members(
    ep: dict[str, Any], labels: _Index, by_id: _Index, assigned: dict[str, int]
) -> list[Interaction]:
    """The interactions an episode names that no earlier episode took (each once)."""
    members: list[Interaction] = []
    for label in ep.get("interaction_ids") or []:
        it = _resolve(label, labels, by_id)
        if it is not None and it.event_id not in assigned and it not in members:
            members.append(it)
    return members


def _episode_draft(
    ep: dict[str, Any], members: list[Interaction], labels: _Index, by_id: _Index
) -> EpisodeDraft:
    quotes = [q for q in (_quote(r, None, labels, by_id) for r in ep.get("key_quotes") or []) if q]
    name = _text(ep.get("name"), 200)
    summary = _text(ep.get("summary"), 2000)
    if not name and not summary:
        raise MalformedOutput("an episode without name and summary")
    return EpisodeDraft(
        name=name or summary[:80],
        summary=summary or name,
        member_ids=[it.event_id for it in members],
        key_quotes=quotes,
        emotional_context=_text(ep.get("emotional_context"), 300),
        importance=clamp_importance(ep.get("importance"), default=0),
    )


def _complete_scores(scores: dict[str, int], batch: list[Interaction]) -> None:
    """Unscored interactions get the lowest importance; an answer that scored none is refused."""
    missing_scores = [it for it in batch if it.event_id not in scores]
    if len(missing_scores) == len(batch):
        raise MalformedOutput("no usable importance score in the answer")
    for it in missing_scores:
        scores[it.event_id] = 1


def _assign_leftovers(
    batch: list[Interaction], episodes: list[EpisodeDraft], assigned: dict[str, int]
) -> None:
    """An interaction no episode took joins a neighbour's episode (else the last one)."""
    for i, it in enumerate(batch):
        if it.event_id in assigned:
            continue
        neighbours = [batch[j].event_id for j in (i - 1, i + 1) if 0 <= j < len(batch)]
        target = next((assigned[n] for n in neighbours if n in assigned), len(episodes) - 1)
        assigned[it.event_id] = target
        episodes[target].member_ids.append(it.event_id)


def _finish_episodes(
    episodes: list[EpisodeDraft], batch: list[Interaction], scores: dict[str, int], by_id: _Index
) -> None:
    """Members in batch order; a missing importance or key quote taken from the best-scored member."""
    order = {it.event_id: k for k, it in enumerate(batch)}
    for ep in episodes:
        ep.member_ids.sort(key=order.__getitem__)
        best = max(scores[m] for m in ep.member_ids)
        ep.importance = ep.importance or best
        if not ep.key_quotes:
            top = max(ep.member_ids, key=lambda m: (scores[m], -order[m]))
            ep.key_quotes = [Quote(text=t, event_id=top, speaker=s) for s, t in by_id[top].lines()]


def _read_facts(answer: dict[str, Any], labels: _Index, by_id: _Index) -> list[FactDraft]:
    facts: list[FactDraft] = []
    for f in answer.get("facts") or []:
        if isinstance(f, dict):
            fact = _fact_draft(f, labels, by_id)
            if fact is not None:
                facts.append(fact)
    return facts


def _fact_draft(f: dict[str, Any], labels: _Index, by_id: _Index) -> FactDraft | None:
    """One fact, or None when it has no content or no evidence in the batch."""
    content = _text(f.get("content"), 1000)
    if not content:
        return None
    category = _text(f.get("category")).lower()
    if category not in FACT_CATEGORIES:
        category = "domain"
    evidence = []
    for label in f.get("evidence_ids") or []:
        it = _resolve(label, labels, by_id)
        if it is not None:
            evidence.append(Quote(text=it.text[:500], event_id=it.event_id))
    if not evidence:
        return None  # a fact nobody said is not evidence-backed: dropped
    confidence = coerce_number(f.get("confidence"))
    return FactDraft(
        category=category,
        content=content,
        topic=_text(f.get("topic"), 100),
        participant=_text(f.get("participant"), 200),
        confidence=0.5 if confidence is None else max(0.0, min(1.0, confidence)),
        importance=clamp_importance(f.get("importance"), default=5),
        is_correction=coerce_bool(f.get("is_correction")),
        evidence=evidence,
    )


def check_complete(result: BatchResult, batch: list[Interaction]) -> None:
    """Assert the invariants the writer relies on (any scorer, including the offline one)."""
    ids = [it.event_id for it in batch]
    if set(result.scores) != set(ids):
        raise MalformedOutput("scores do not cover the batch exactly")
    members = [m for ep in result.episodes for m in ep.member_ids]
    if sorted(members) != sorted(ids):
        raise MalformedOutput("episodes do not partition the batch")
    for ep in result.episodes:
        if not 1 <= ep.importance <= 10:
            raise MalformedOutput(f"episode importance {ep.importance} out of range")
