"""Scopes and ranking (docs/runtime.md, "Scopes"): who sees which fact, and in what order.

Scopes, broadest to most specific: system → agent type → project → project
override (project + agent type). Each fact also may be private to the agent
that wrote it (scope `agent`, stored when an event names no scope). An agent
sees a fact when

- it is its own private fact (scope `agent`, same agent_id), or
- the fact is in a scope it shares: `system`; `agent_type` = its type;
  `project` = its project; `override` = its project and its type.

Nothing else: two agents share nothing unless a shared scope says so. A fact
derived from a user (owned, see `tiermem.runtime.visibility`) is seen only by
its agent serving that user, whatever scope it names. The visibility rules
live in `visibility`; every query here takes a `Principal` and filters with
the hot store's translation of them (`hotstore.fact_clause`).

KV lookups are first-match-wins from the most specific scope (override,
project, the agent's own, agent type, system); within the agent's own scope a
fact about the current user comes before the agent-level one. Searches merge every visible
scope: score = relevance (FTS5 BM25) x scope weight (override/project/own
1.0, agent type 0.7, system 0.4; `settings.runtime.scope_weights`) x time
decay (slight: 1.0 now, towards 0.8 for old facts) x source trust (user or a
correction 1.0, agent 0.9, system/batch 0.8). With a topic, the search first
keeps only facts with that topic (case-insensitive) or with no topic at all
(an untagged memory may be about anything, so a filter must not hide it),
and falls back to all topics when that finds fewer than 3. Listing by topic
keeps the untagged ones the same way.
"""

from __future__ import annotations

import math
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from tiermem.runtime.hotstore import fact_clause
from tiermem.runtime.visibility import KV_ORDER, Principal

from tiermem.ids import parse_ts

__all__ = ["KV_ORDER", "Principal", "kv_lookup", "list_facts", "search_facts"]
DEFAULT_WEIGHTS = {"override": 1.0, "project": 1.0, "agent": 1.0, "agent_type": 0.7, "system": 0.4}
DECAY_FLOOR = 0.8
DECAY_DAYS = 180.0
TOPIC_FALLBACK_MIN = 3
VISIBLE_STATUSES = ("active",)  # inactive/archived/removed/pending/rejected are never returned

_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "him",
        "his",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)


def fts_query(text: str, max_terms: int = 16) -> str | None:
    """A safe FTS5 OR-query from free text (quoted terms, no operators); None when empty."""
    terms: list[str] = []
    for word in re.findall(r"\w+", text.lower()):
        if word in _STOPWORDS or word in terms:
            continue
        terms.append(word)
        if len(terms) >= max_terms:
            break
    if not terms:
        return None
    return " OR ".join(f'"{t}"' for t in terms)


def time_decay(updated_at: str, now: datetime) -> float:
    """Slight recency preference: 1.0 for today, approaching DECAY_FLOOR for old facts."""
    try:
        age_days = max((now - parse_ts(updated_at)).total_seconds() / 86400.0, 0.0)
    except ValueError:
        return DECAY_FLOOR
    return DECAY_FLOOR + (1.0 - DECAY_FLOOR) * math.exp(-age_days / DECAY_DAYS)


def source_trust(source: str | None, is_correction: int | bool = False) -> float:
    """User corrections rank above agent writes, which rank above system/batch output."""
    if is_correction or source == "user":
        return 1.0
    if source == "agent":
        return 0.9
    return 0.8


def scope_weight(scope: str, weights: Mapping[str, float] | None = None) -> float:
    merged = {**DEFAULT_WEIGHTS, **(weights or {})}
    merged.setdefault("agent", merged.get("project", 1.0))
    return float(merged.get(scope, 0.4))


@dataclass
class ScoredFact:
    fact_id: str
    content: str
    key: str | None
    scope: str
    category: str | None
    topic: str | None
    participant: str | None
    source: str | None
    updated_at: str
    kind: str
    score: float
    owner: str | None = None  # the user(s) the fact belongs to (visibility.owner_key)


_FACT_COLS = (
    "f.fact_id, f.content, f.key, f.scope, f.category, f.topic, f.participant, f.source, f.updated_at,"
    " f.kind, f.is_correction, f.owner"
)


def kv_lookup(conn: sqlite3.Connection, who: Principal, key: str) -> sqlite3.Row | None:
    """First match wins, from the most specific scope (the user's own first); newest within it."""
    where, params = fact_clause(who, "f")
    rows = conn.execute(
        f"SELECT f.* FROM facts f WHERE f.key = ? AND f.status = 'active' AND {where}", (key, *params)
    ).fetchall()
    if not rows:
        return None
    rank = {s: i for i, s in enumerate(KV_ORDER)}
    best: sqlite3.Row = min(
        rows, key=lambda r: (rank.get(r["scope"], 99), r["owner"] is None, _neg(r["updated_at"]))
    )
    return best


def _neg(ts: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in ts)


def search_facts(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    *,
    topic: str | None = None,
    limit: int = 10,
    kinds: tuple[str, ...] | None = None,
    weights: Mapping[str, float] | None = None,
    now: datetime,
) -> list[ScoredFact]:
    """Merged, weighted full-text search over every visible scope (see module doc)."""
    match = fts_query(query)
    if match is None:
        return []
    if topic:
        found = _search(conn, who, match, topic, limit, kinds, weights, now)
        if len(found) >= TOPIC_FALLBACK_MIN:
            return found
    return _search(conn, who, match, None, limit, kinds, weights, now)


def _search(
    conn: sqlite3.Connection,
    who: Principal,
    match: str,
    topic: str | None,
    limit: int,
    kinds: tuple[str, ...] | None,
    weights: Mapping[str, float] | None,
    now: datetime,
) -> list[ScoredFact]:
    where, params = fact_clause(who, "f")
    extra = ""
    if topic:
        extra += " AND (lower(f.topic) = lower(?) OR f.topic IS NULL)"  # untagged ones stay in
        params.append(topic)
    if kinds:
        extra += f" AND f.kind IN ({','.join('?' * len(kinds))})"
        params.extend(kinds)
    # Oversample by BM25, then rescore with scope, decay and trust. A backend with its own
    # full-text engine (the PostgreSQL one) carries its query for the same rows as `fact_index`.
    fact_index = getattr(conn, "fact_index", None)
    if fact_index is not None:
        rows = fact_index(conn, _FACT_COLS, match, f"{where}{extra}", params, max(limit * 5, 50))
    else:
        rows = conn.execute(
            f"SELECT {_FACT_COLS}, bm25(facts_fts) AS bm FROM facts_fts JOIN facts f ON f.rowid = facts_fts.rowid"
            f" WHERE facts_fts MATCH ? AND f.status = 'active' AND {where}{extra} ORDER BY bm LIMIT ?",
            (match, *params, max(limit * 5, 50)),
        ).fetchall()
    out = []
    for r in rows:
        relevance = -float(r["bm"])  # FTS5 bm25 is negative: smaller is better
        score = (
            relevance
            * scope_weight(r["scope"], weights)
            * time_decay(r["updated_at"], now)
            * source_trust(r["source"], r["is_correction"])
        )
        out.append(
            ScoredFact(
                fact_id=r["fact_id"],
                content=r["content"],
                key=r["key"],
                scope=r["scope"],
                category=r["category"],
                topic=r["topic"],
                participant=r["participant"],
                source=r["source"],
                updated_at=r["updated_at"],
                kind=r["kind"],
                score=score,
                owner=r["owner"],
            )
        )
    out.sort(key=lambda f: (-f.score, f.fact_id))
    return out[:limit]


def list_facts(
    conn: sqlite3.Connection,
    who: Principal,
    *,
    kinds: tuple[str, ...] | None = None,
    topic: str | None = None,
    participant_first: str | None = None,
    limit: int = 100,
) -> list[sqlite3.Row]:
    """Visible active facts, this participant's first, then newest first."""
    where, params = fact_clause(who, "f")
    extra = ""
    if kinds:
        extra += f" AND f.kind IN ({','.join('?' * len(kinds))})"
        params.extend(kinds)
    if topic:
        extra += " AND (lower(f.topic) = lower(?) OR f.topic IS NULL)"  # untagged ones stay in
        params.append(topic)
    return conn.execute(
        f"SELECT f.* FROM facts f WHERE f.status = 'active' AND {where}{extra}"
        " ORDER BY (f.participant IS NOT NULL AND f.participant = ?) DESC, f.updated_at DESC, f.fact_id LIMIT ?",
        (*params, participant_first or "", limit),
    ).fetchall()
