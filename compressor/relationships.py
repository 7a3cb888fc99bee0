"""The producer of `relationship_updated` events: one summary per agent and participant.

At the end of a compress run, for every agent that has episodes, each
participant gets a short summary derived from the episodes shared with them
and the facts proposed about them: rapport (how warm the moments were), trust
(how much they confided), what is known about them, and when they last spoke.
The event id is derived from the inputs (the episode and fact ids and the last
time they spoke), so an unchanged relationship is not appended again.

The summary is written as a note a person would keep about someone, and it
does not begin with their name (whoever shows it puts the name in front):
"Talked with support-bot 44 times since 16 November 2026, most recently on
23 November 2026; mostly grateful and happy. Known: alice moved to Osaka in
October 2026; alice prefers to be contacted by email, not phone. Remembered:
alice asked for a refund of the double charge."
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from tiermem.compressor.selection import _as_utc

from tiermem.dates import human_date
from tiermem.events import SCHEMA_VERSION
from tiermem.ids import content_hash, derived_event_id, format_ts
from tiermem.settings import Settings
from tiermem.similarity import text_similarity
from tiermem.sqlviews import open_catalog

_WARM = {"joy", "gratitude", "hope", "trust"}
_COLD = {"anger", "fear", "sadness"}


@dataclass
class _Acc:
    episodes: list[tuple[str, str, int, str, datetime]] = field(
        default_factory=list
    )  # id, name, imp, emo, end
    facts: list[tuple[str, str, int, str]] = field(default_factory=list)  # id, content, importance, topic
    last_spoke: datetime | None = None
    interactions: int = 0


def relationship_events(settings: Settings, agents: list[str] | None = None) -> list[dict[str, Any]]:
    con = open_catalog(settings)
    try:
        where = ""
        params: list[Any] = []
        if agents is not None:
            if not agents:
                return []
            where = f"AND agent_id IN ({', '.join('?' * len(agents))})"
            params = list(agents)
        eps = con.execute(
            f"""SELECT agent_id, event_id, name, importance, coalesce(emotional_context, ''), end_ts,
                       participants
                FROM episodes_events WHERE type = 'episode' {where} ORDER BY agent_id, end_ts, event_id""",
            params,
        ).fetchall()
        facts = con.execute(
            f"""SELECT agent_id, participant, event_id, content, coalesce(importance, 5), coalesce(topic, '')
                FROM knowledge_events
                WHERE type = 'knowledge_proposed' AND participant IS NOT NULL AND origin = 'compressor' {where}
                ORDER BY agent_id, event_id""",
            params,
        ).fetchall()
        spoke = con.execute(
            f"""SELECT agent_id, "user", max(ts), count(*) FROM interactions
                WHERE "user" IS NOT NULL {where} GROUP BY 1, 2""",
            params,
        ).fetchall()
    finally:
        con.close()

    accs: dict[tuple[str, str], _Acc] = {}
    for agent_id, eid, name, imp, emo, end, parts in eps:
        plist = parts if isinstance(parts, list) else orjson.loads(parts or "[]")
        for p in plist:
            accs.setdefault((agent_id, p), _Acc()).episodes.append((eid, name, int(imp), emo, _as_utc(end)))
    for agent_id, participant, eid, content, imp, topic in facts:
        if (agent_id, participant) in accs:
            accs[(agent_id, participant)].facts.append((eid, content, int(imp), topic))
    for agent_id, user, last, n in spoke:
        if (agent_id, user) in accs:
            accs[(agent_id, user)].last_spoke = _as_utc(last)
            accs[(agent_id, user)].interactions = int(n)

    out = []
    for (agent_id, participant), acc in sorted(accs.items()):
        out.append(_event(agent_id, participant, acc))
    return out


# How a kind of feeling reads in a sentence about the conversations.
_MOOD_WORDS = {
    "joy": "happy",
    "gratitude": "grateful",
    "hope": "hopeful",
    "trust": "trusting",
    "sadness": "sad",
    "fear": "worried",
    "anger": "frustrated",
}
KNOWN_FACTS = 3
REMEMBERED = 2
SAME_THING = 0.5  # a remembered moment this close to a known fact is left out


def _known(acc: _Acc) -> list[str]:
    """What the person said about themselves, the newest statement per topic, weightiest first.

    A later "moved to Osaka" replaces an earlier "moved to Lisbon" (same topic),
    so the note does not list every address the person ever had.
    """
    newest: dict[str, tuple[str, str, int, str]] = {}
    for fact in sorted(acc.facts, key=lambda f: f[0]):  # event ids sort by time
        newest[fact[3] or fact[1]] = fact
    ranked = sorted(newest.values(), key=lambda f: (-f[2], f[0]))
    return list(dict.fromkeys(_plain(f[1]) for f in ranked))[:KNOWN_FACTS]


_ACCORDING = re.compile(r"^according to [^(]+\(([^)]+)\),\s*(.+)$", re.IGNORECASE)


def _plain(statement: str) -> str:
    """ "According to alice (22 November 2026), X." -> "X (22 November 2026)": the note is about alice."""
    statement = statement.strip().rstrip(".")
    m = _ACCORDING.match(statement)
    return f"{m.group(2)} ({m.group(1)})" if m else statement


def summary_text(agent_id: str, acc: _Acc, emotions: Counter[str], first: datetime, last: datetime) -> str:
    """The note about one participant (see the module docstring)."""
    n = acc.interactions or len(acc.episodes)
    times = "once" if n == 1 else f"{n} times"
    since = f" since {human_date(first)}" if first.date() != last.date() else ""
    text = f"Talked with {agent_id} {times}{since}, most recently on {human_date(last)}"
    moods = [_MOOD_WORDS.get(e, e) for e, _ in emotions.most_common(2)]
    if moods:
        text += f"; mostly {' and '.join(moods)}"
    parts = [text + "."]
    known = _known(acc)
    if known:
        parts.append("Known: " + "; ".join(known) + ".")
    weighty = sorted(acc.episodes, key=lambda e: (-e[2], e[0]))
    names = [e[1].rstrip(".") for e in weighty if not e[1].startswith("Small talk")]
    # A moment that restates (or contradicts) what is known adds nothing to the note.
    remembered: list[str] = []
    for name in dict.fromkeys(names):  # the first REMEMBERED that pass: the rest need not be compared
        if all(text_similarity(name, k) < SAME_THING for k in known):
            remembered.append(name)
            if len(remembered) == REMEMBERED:
                break
    if remembered:
        parts.append("Remembered: " + "; ".join(n.rstrip(".") for n in remembered) + ".")
    return " ".join(parts)


def _event(agent_id: str, participant: str, acc: _Acc) -> dict[str, Any]:
    emotions: Counter[str] = Counter()
    for *_, emo, _end in acc.episodes:
        for label in (e.strip() for e in emo.split(",")):
            if label:
                emotions[label] += 1
    warm = sum(n for e, n in emotions.items() if e in _WARM)
    cold = sum(n for e, n in emotions.items() if e in _COLD)
    n_eps = len(acc.episodes)
    # Rapport grows with shared moments and warmth; trust with what they confided.
    rapport = round(min(1.0, 0.3 + 0.05 * min(n_eps, 8) + 0.3 * (warm - 0.5 * cold) / max(1, warm + cold)), 2)
    rapport = max(0.0, rapport)
    trust = round(min(1.0, 0.3 + 0.07 * min(len(acc.facts), 10)), 2)
    first = acc.episodes[0][4]
    last = acc.last_spoke or acc.episodes[-1][4]
    summary = summary_text(agent_id, acc, emotions, first, last)
    inputs = [e[0] for e in acc.episodes] + [f[0] for f in acc.facts] + [format_ts(last)]
    return {
        "event_id": derived_event_id(last, "relationship", agent_id, participant, content_hash(*inputs)),
        "type": "relationship_updated",
        "schema_version": SCHEMA_VERSION,
        "ts": format_ts(last),
        "agent_id": agent_id,
        "participant": participant,
        "summary": summary[:1000],
        "rapport": rapport,
        "trust": trust,
        "last_spoke_ts": format_ts(last),
        "interactions": acc.interactions,
        "source_event_ids": [e[0] for e in acc.episodes][-50:],
    }
