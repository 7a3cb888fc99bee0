"""Episode search behind `recall_memory`: full text over the hot store's episodic archive.

Candidates come from FTS5 (`episodes_fts`: name, summary, quote texts,
participants) with BM25 column weights; query words are matched by prefix of
their stem, so "painting" finds "painted". The candidates are then re-ranked
in Python by how much of the query they cover (an episode that mentions every
asked-for thing beats one that repeats a single word), with a small boost for
important episodes. Each result's quotes are ordered best match first, so a
caller that must cut to a budget cuts the least relevant quote. Dates are
returned both as timestamps and human-readable.
"""

from __future__ import annotations

import math
import re
import sqlite3
from typing import Any

import orjson

from tiermem.compressor.dates import human_range
from tiermem.compressor.text import STOP_WORDS, stem
from tiermem.ids import parse_ts

CANDIDATES = 60
# bm25() weights per column of episodes_fts: name, summary, quotes, participants.
COLUMN_WEIGHTS = (2.0, 1.0, 1.2, 0.5)
_WORD = re.compile(r"[a-z0-9]+")


def query_terms(query: str) -> list[str]:
    out: list[str] = []
    for word in _WORD.findall(query.lower()):
        if word in STOP_WORDS or len(word) < 2:
            continue
        term = stem(word) if len(word) > 4 else word
        if term not in out:
            out.append(term)
    return out[:24]


def _fts(terms: list[str]) -> str:
    return " OR ".join(f'"{t}"*' if len(t) >= 4 else f'"{t}"' for t in terms)


def _matches(text_words: set[str], term: str) -> bool:
    if len(term) >= 4:
        return any(w.startswith(term) for w in text_words)
    return term in text_words


def search_episodes(
    conn: sqlite3.Connection,
    agent_id: str,
    query: str,
    participant: str | None = None,
    limit: int = 3,
) -> list[dict[str, Any]]:
    """The best `limit` episodes of `agent_id` for `query` (optionally only those with `participant`)."""
    terms = query_terms(query)
    params: list[Any] = []
    where = "e.agent_id = ?"
    params.append(agent_id)
    if participant:
        where += " AND EXISTS (SELECT 1 FROM json_each(e.participants) p WHERE lower(p.value) = lower(?))"
        params.append(participant)
    cols = "e.episode_id, e.name, e.summary, e.key_quotes, e.participants, e.start_ts, e.end_ts, e.importance, e.emotional_context"
    if terms:
        weights = ", ".join(str(w) for w in COLUMN_WEIGHTS)
        sql = (
            f"SELECT {cols}, bm25(episodes_fts, {weights}) AS rank FROM episodes_fts "
            "JOIN episodes e ON e.rowid = episodes_fts.rowid "
            f"WHERE episodes_fts MATCH ? AND {where} ORDER BY rank LIMIT {CANDIDATES}"
        )
        rows = conn.execute(sql, [_fts(terms), *params]).fetchall()
    else:
        rows = []
    if not rows:
        # Nothing matched (or no usable words): the most important recent memories instead.
        sql = f"SELECT {cols}, 0.0 AS rank FROM episodes e WHERE {where} ORDER BY importance DESC, end_ts DESC LIMIT ?"
        rows = conn.execute(sql, [*params, limit]).fetchall()

    scored: list[tuple[float, dict[str, Any]]] = []
    for row in rows:
        quotes = orjson.loads(row[3] or "[]")
        text = " ".join([row[1] or "", row[2] or "", *(q.get("text", "") for q in quotes)]).lower()
        words = set(_WORD.findall(text))
        covered = [t for t in terms if _matches(words, t)]
        coverage = len(covered) / len(terms) if terms else 0.0
        bm25 = -float(row[9] or 0.0)  # FTS5 bm25 is negative: smaller is better
        score = bm25 * (0.5 + coverage) + 0.05 * int(row[7] or 0)

        def quote_rank(q: dict[str, Any]) -> int:
            qwords = set(_WORD.findall(str(q.get("text", "")).lower()))
            return -sum(1 for t in terms if _matches(qwords, t))

        ordered = sorted(quotes, key=quote_rank)  # stable: ties keep spoken order
        start, end = parse_ts(row[5]), parse_ts(row[6])
        scored.append(
            (
                score,
                {
                    "episode_id": row[0],
                    "name": row[1],
                    "summary": row[2],
                    "key_quotes": ordered,
                    "participants": orjson.loads(row[4] or "[]"),
                    "start_ts": row[5],
                    "end_ts": row[6],
                    "when": human_range(start, end),
                    "importance": int(row[7] or 0),
                    "emotional_context": row[8] or "",
                    "score": round(score, 4) if math.isfinite(score) else 0.0,
                },
            )
        )
    scored.sort(key=lambda s: (-s[0], s[1]["episode_id"]))
    return [item for _, item in scored[:limit]]
