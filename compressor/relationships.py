"""The producer of `relationship_updated` events: one summary per agent and participant.

At the end of a compress run, for every agent that has episodes, each
participant gets a short summary derived from the episodes shared with them
and the facts proposed about them: rapport (how warm the moments were), trust
(how much they confided), what is known about them, and when they last spoke.
The event id is derived from the inputs (the episode and fact ids and the last
time they spoke), so an unchanged relationship is not appended again.
"""

from __future__ import annotations

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
from tiermem.sqlviews import open_catalog

_WARM = {"joy", "gratitude", "hope", "trust"}
_COLD = {"anger", "fear", "sadness"}


@dataclass
class _Acc:
    episodes: list[tuple[str, str, int, str, datetime]] = field(
        default_factory=list
    )  # id, name, imp, emo, end
    facts: list[tuple[str, str, int]] = field(default_factory=list)  # id, content, importance
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
            f"""SELECT agent_id, participant, event_id, content, coalesce(importance, 5)
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
    for agent_id, participant, eid, content, imp in facts:
        if (agent_id, participant) in accs:
            accs[(agent_id, participant)].facts.append((eid, content, int(imp)))
    for agent_id, user, last, n in spoke:
        if (agent_id, user) in accs:
            accs[(agent_id, user)].last_spoke = _as_utc(last)
            accs[(agent_id, user)].interactions = int(n)

    out = []
    for (agent_id, participant), acc in sorted(accs.items()):
        out.append(_event(agent_id, participant, acc))
    return out


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
    top_eps = list({e[1]: e for e in sorted(acc.episodes, key=lambda e: (-e[2], e[0]))}.values())[:2]
    distinct = {f[1]: f for f in sorted(acc.facts, key=lambda f: (-f[2], f[0]))}
    top_facts = list(distinct.values())[:3]
    parts = [
        f"{participant}: {n_eps} shared memories since {human_date(first)}; last spoke {human_date(last)}.",
        f"Rapport {rapport:.1f}, trust {trust:.1f}"
        + (f"; mostly {', '.join(e for e, _ in emotions.most_common(2))}." if emotions else "."),
    ]
    if top_facts:
        parts.append("Known: " + " | ".join(f[1][:160] for f in top_facts))
    if top_eps:
        parts.append("Memorable: " + "; ".join(e[1] for e in top_eps))
    inputs = [e[0] for e in acc.episodes] + [f[0] for f in acc.facts] + [format_ts(last)]
    return {
        "event_id": derived_event_id(last, "relationship", agent_id, participant, content_hash(*inputs)),
        "type": "relationship_updated",
        "schema_version": SCHEMA_VERSION,
        "ts": format_ts(last),
        "agent_id": agent_id,
        "participant": participant,
        "summary": " ".join(parts)[:1000],
        "rapport": rapport,
        "trust": trust,
        "last_spoke_ts": format_ts(last),
        "interactions": acc.interactions,
        "source_event_ids": [e[0] for e in acc.episodes][-50:],
    }
