"""Session-end gap-fill (docs/evolver.md, "Session-end gap-fill").

A narrow extraction, not a full one (a full one floods the store
with low-quality duplicates). At the end of a session:

1. the user corrected the agent but the agent did not write it → a correction
   proposal (`is_correction`, origin `gap_fill`);
2. the user stated a preference or a stable fact about themselves that the
   agent did not store → a proposal (origin `gap_fill`);
3. a session summary → an `episode` event with kind `session_summary` (the L2
   archive).

"The agent stored it" means: the turn (or the next one) used a memory-writing
tool, or an agent-channel proposal / KV write of the same agent in the session's
time window says nearly the same thing. The proposals go through the evolver
like any other (a correction deactivates the wrong fact there). Offline,
pattern-based extraction; every event id is derived from its inputs, so
processing a session twice appends nothing new.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tiermem.erased import erased_filter
from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts, parse_ts
from tiermem.settings import Settings
from tiermem.similarity import text_similarity

MEMORY_WRITE_TOOLS = frozenset(
    {"memory_write", "memory_fact_store", "memory_idea_save", "memory_save", "memory_store"}
)
SAVED_SIMILARITY = 0.6  # an agent write this close to the candidate already covers it
WINDOW = timedelta(minutes=10)  # agent writes shortly after the session still count

_CORRECTION = re.compile(
    r"^\s*(?:no[,.!]|nope|that'?s (?:not right|wrong|incorrect)|wrong[,.!]|actually[, ]|not quite|"
    r"you'?re wrong|correction:|i said|i meant|it'?s not\b)",
    re.IGNORECASE,
)
_STATEMENTS: list[tuple[re.Pattern[str], str, str]] = [
    # (pattern on one sentence, template, category); templates get the captured groups.
    (re.compile(r"\bmy name is ([\w' -]{1,40})", re.I), "The user's name is {0}", "user"),
    # A name is capitalised: "call me Sam", not "call me tomorrow".
    (re.compile(r"\b(?i:call me) ([A-Z][\w'-]{1,30})"), "The user wants to be called {0}", "user"),
    (
        re.compile(r"\bmy ([a-z][\w -]{1,30}?) (?:is|are) ([^.;!?]{1,80})", re.I),
        "The user's {0} is {1}",
        "user",
    ),
    (
        re.compile(
            r"\bi (?:really )?(prefer|like|love|hate|dislike|enjoy|want|need|use) ([^.;!?]{2,80})", re.I
        ),
        "The user {0}s {1}",
        "user",
    ),
    (
        re.compile(r"\bi (?:do not|don't) (?:like|want|use|eat|drink) ([^.;!?]{2,80})", re.I),
        "The user does not like {0}",
        "user",
    ),
    (re.compile(r"\bi (?:always|usually) ([^.;!?]{2,80})", re.I), "The user always {0}", "user"),
    (re.compile(r"\bi never ([^.;!?]{2,80})", re.I), "The user never {0}", "user"),
    (
        re.compile(
            r"\bi(?: am|'m) (?:a |an )?((?:vegetarian|vegan|allergic to [\w ]+|[\w -]{2,30} developer|[\w -]{2,30} engineer|based in [\w ,-]+))",
            re.I,
        ),
        "The user is {0}",
        "user",
    ),
    (
        re.compile(r"\bi (?:live|work) (in|at|for) ([^.;!?]{2,60})", re.I),
        "The user lives/works {0} {1}",
        "user",
    ),
    (
        re.compile(r"\b(?:please )?(always|never) ([^.;!?]{2,80})", re.I),
        "The user wants the agent to {0} {1}",
        "preference",
    ),
]
_KEYED = re.compile(r"\bmy ([a-z][\w -]{1,30}?) (?:is|are) ", re.I)
_SENTENCE = re.compile(r"(?<=[.!?;])\s+|\n+")


@dataclass
class GapFillInfo:
    agent_id: str
    session_id: str
    interactions: int = 0
    corrections: int = 0
    preferences: int = 0
    already_saved: int = 0
    proposals: list[str] = field(default_factory=list)
    summary_event_id: str | None = None
    events_appended: int = 0
    duplicates: int = 0
    path: str = "offline"


def _clean(text: str) -> str:
    return " ".join(text.strip().strip("\"'").split()).rstrip(" ,")


def _first_person_to_user(text: str) -> str:
    swaps = {
        r"\bmy\b": "their",
        r"\bme\b": "them",
        r"\bi'm\b": "they are",
        r"\bi am\b": "they are",
        r"\bi\b": "they",
    }
    for pattern, repl in swaps.items():
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE)
    return text


def extract_statements(message: str) -> list[tuple[str, str, str | None]]:
    """(declarative content, category, key) for each stated preference or fact in a user message."""
    out: list[tuple[str, str, str | None]] = []
    for sentence in _SENTENCE.split(message):
        for pattern, template, category in _STATEMENTS:
            m = pattern.search(sentence)
            if not m:
                continue
            groups = [_first_person_to_user(_clean(g)) for g in m.groups()]
            if any(not g for g in groups):
                continue
            content = template.format(*groups)
            content = content[0].upper() + content[1:]
            keyed = _KEYED.search(sentence)
            key = re.sub(r"\W+", "_", keyed.group(1).strip().lower()) if keyed else None
            out.append((content.rstrip(".") + ".", category, key))
            break  # one statement per sentence: the first (most specific) pattern wins
    return out


# "No, thanks." declines an offer; a correction says what is right instead.
_DECLINE = re.compile(
    r"^\s*(?:no|nope)[,.!]?\s*(?:thanks|thank you|thx|that'?s all|that'?s it|i'?m good|all good|"
    r"not now|not today|nothing else)?[.!]*\s*$",
    re.IGNORECASE,
)


def is_correction(message: str) -> bool:
    return bool(_CORRECTION.search(message)) and not _DECLINE.match(message)


def _session_events(
    settings: Settings, agent_id: str, session_id: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the session's interactions, the agent's own knowledge writes) from the log, erased ones hidden."""
    hidden = erased_filter(settings)
    turns: list[dict[str, Any]] = []
    writes: list[dict[str, Any]] = []
    log = EventLog(settings)
    try:
        for _seg, _line, ev in log.read("interactions"):
            if ev.get("agent_id") == agent_id and ev.get("session_id") == session_id and not hidden(ev):
                turns.append(ev)
        for _seg, _line, ev in log.read("knowledge"):
            if ev.get("agent_id") != agent_id or hidden(ev):
                continue
            if (ev.get("type") == "knowledge_proposed" and ev.get("origin") in ("agent", "user")) or ev.get(
                "type"
            ) == "fact_set":
                writes.append(ev)
    finally:
        log.close()
    turns.sort(key=lambda e: (e["ts"], e["event_id"]))
    return turns, writes


def _saved(
    candidate: str, turn_index: int, turns: list[dict[str, Any]], writes: list[dict[str, Any]]
) -> bool:
    for t in turns[turn_index : turn_index + 2]:
        if MEMORY_WRITE_TOOLS & set(t.get("tools_used") or ()):
            return True
    start = parse_ts(turns[0]["ts"])
    end = parse_ts(turns[-1]["ts"]) + WINDOW
    for w in writes:
        if not start <= parse_ts(w["ts"]) <= end:
            continue
        text = w.get("content") or f"{w.get('key', '')} {w.get('value', '')}"
        if text_similarity(candidate, text) >= SAVED_SIMILARITY:
            return True
    return False


def _summary_text(turns: list[dict[str, Any]], corrections: int, statements: int) -> tuple[str, str]:
    users = sorted({str(t["user"]) for t in turns if t.get("user")})
    first = _clean(turns[0].get("user_message") or "")[:120]
    last = _clean(turns[-1].get("user_message") or "")[:120]
    tools = sorted({tool for t in turns for tool in (t.get("tools_used") or ())})
    name = f"Session with {', '.join(users) or 'an unknown user'} ({len(turns)} turns)"
    parts = [f"{len(turns)} turns with {', '.join(users) or 'an unknown user'}, opened with “{first}”"]
    if len(turns) > 1:
        parts.append(f"ended with “{last}”")
    if tools:
        parts.append(f"tools used: {', '.join(tools)}")
    if corrections:
        parts.append(f"the user corrected the agent {corrections} time(s)")
    if statements:
        parts.append(f"{statements} stated preference(s)/fact(s)")
    return name, "; ".join(parts) + "."


def process_session_end(settings: Settings, agent_id: str, session_id: str) -> GapFillInfo:
    """Gap-fill one finished session: missed corrections and preferences, and a session summary."""
    info = GapFillInfo(agent_id=agent_id, session_id=session_id)
    turns, writes = _session_events(settings, agent_id, session_id)
    info.interactions = len(turns)
    if not turns:
        return info
    events: list[dict[str, Any]] = []
    for i, turn in enumerate(turns):
        message = turn.get("user_message") or ""
        correction = is_correction(message) and i > 0
        statements = extract_statements(message)
        if correction and not statements:
            statements = [(f"Correction from the user: {_clean(message)[:200]}", "user", None)]
        for content, category, key in statements:
            if _saved(content, i, turns, writes):
                info.already_saved += 1
                continue
            prev = turns[i - 1] if i > 0 else None
            ts = parse_ts(turn["ts"])
            proposal: dict[str, Any] = {
                "type": "knowledge_proposed",
                "event_id": derived_event_id(ts, "gap_fill", turn["event_id"], content),
                "ts": format_ts(ts),
                "agent_id": agent_id,
                "content": content,
                "category": category,
                "key": key,
                "participant": turn.get("user"),
                "agent_type": turn.get("agent_type"),
                "project_id": turn.get("project_id"),
                "scope": "project" if turn.get("project_id") else None,
                "confidence": 0.8 if correction else 0.75,
                "importance": 8 if correction else 6,
                "origin": "gap_fill",
                "is_correction": correction,
                "evidence": [{"text": _clean(message)[:200], "event_id": turn["event_id"]}],
                "source_event_ids": [turn["event_id"]] + ([prev["event_id"]] if correction and prev else []),
            }
            if correction and prev is not None:
                proposal["corrects"] = _clean(prev.get("agent_response") or "")[:300] or None
            events.append({k: v for k, v in proposal.items() if v is not None})
            info.proposals.append(proposal["event_id"])
            if correction:
                info.corrections += 1
            else:
                info.preferences += 1
    name, summary = _summary_text(turns, info.corrections, info.preferences)
    end = parse_ts(turns[-1]["ts"])
    summary_event = {
        "type": "episode",
        "event_id": derived_event_id(end, "session_summary", agent_id, session_id),
        "ts": format_ts(end + timedelta(milliseconds=1)),
        "agent_id": agent_id,
        "name": name,
        "summary": summary,
        "kind": "session_summary",
        "start_ts": turns[0]["ts"],
        "end_ts": turns[-1]["ts"],
        "importance": 3 + min(4, info.corrections * 2 + info.preferences),
        "participants": sorted({t["user"] for t in turns if t.get("user")}),
        "scorer": "offline",
        "key_quotes": [],
        "metadata": {"session_id": session_id},
        "source_event_ids": [t["event_id"] for t in turns],
    }
    if turns[-1].get("project_id"):
        summary_event["project_id"] = turns[-1]["project_id"]
    events.append(summary_event)
    info.summary_event_id = summary_event["event_id"]
    log = EventLog(settings)
    try:
        batch = log.append_many(events)
    finally:
        log.close()
    if batch.rejected:
        raise batch.rejected[0][1]
    info.events_appended = batch.accepted
    info.duplicates = batch.duplicates
    return info
