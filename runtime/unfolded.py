"""Turns not yet folded into an episode: searched directly, so no turn is out of reach.

Between two compressions an agent's newest turns exist only as working-memory
rows: the prompt shows the last few, and episode search cannot find the rest.
This search covers that gap. A turn counts as folded once an episode names it
among its sources (`folded_turns`, filled when the episode is applied, so the
order in which a rebuild applies turns and episodes does not matter); from
then on the episode answers for it, and this search no longer returns it, so
a turn is never delivered twice nor lost in between.

Ranking is deliberately simple, as the set is small (the turns since the last
compression): how many of the query's terms a turn contains (stems matched as
prefixes, as in episode search), newest first among equals. Only the newest
`SCAN_LIMIT` unfolded turns are read (newest first along the agent's time
index), which bounds the cost for an agent that has never been compressed.
The scan reads only that index; a turn's words are kept sorted (cached per
turn, its text read once), so a term is found by one binary search instead
of a pass over every word, and only the results' texts are read.
"""

from __future__ import annotations

import re
import sqlite3
from bisect import bisect_left
from typing import Any

from tiermem.runtime.episode_search import query_terms
from tiermem.runtime.hotstore import database_key, item_clause
from tiermem.runtime.visibility import Principal

SCAN_LIMIT = 400
WORD_CACHE = 20_000  # turns whose sorted words are kept (a few agents' scans)
_WORD = re.compile(r"[a-z0-9]+")
# (database file, item id) -> the turn's distinct words, sorted. A turn's text never changes
# (an erased turn's row is gone, so it is never looked up again).
_WORDS: dict[tuple[str, str], tuple[str, ...]] = {}


def _sorted_words(text: str) -> tuple[str, ...]:
    return tuple(sorted(set(_WORD.findall(text.lower()))))


def _hits(words: tuple[str, ...], terms: list[str]) -> int:
    """How many terms the words hold: as in episode search, a term of 4+ letters as a prefix."""
    n = 0
    for term in terms:
        i = bisect_left(words, term)
        # The first word not before `term` is `term` itself, or the first one it prefixes.
        if i < len(words) and (words[i].startswith(term) if len(term) >= 4 else words[i] == term):
            n += 1
    return n


def search_unfolded(
    conn: sqlite3.Connection,
    who: Principal,
    query: str,
    participant: str | None = None,
    limit: int = 5,
    exclude: frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """The visible turns no episode covers yet that match `query`, best first.

    `exclude` names turns the caller already shows (the prompt's recent
    section), so they are not repeated.
    """
    terms = query_terms(query)
    if limit <= 0 or not terms:
        return []
    where, params = item_clause(who, "w")
    if participant:
        where += " AND lower(w.user) = lower(?)"
        params.append(participant)
    # The scan reads the index only (texts are fetched for turns not yet seen, and for the results).
    rows = conn.execute(
        "SELECT w.event_id, w.ts, w.user, w.item_id FROM wm_items w"
        f" WHERE w.kind = 'interaction' AND {where}"
        " AND NOT EXISTS (SELECT 1 FROM folded_turns t WHERE t.event_id = w.event_id)"
        " ORDER BY w.ts DESC, w.item_id DESC LIMIT ?",
        (*params, SCAN_LIMIT),
    ).fetchall()
    words = _turn_words(conn, database_key(conn), [r[3] for r in rows if r[0] not in exclude])
    scored: list[tuple[int, int, Any]] = []
    for rank, row in enumerate(rows):
        if row[0] in exclude:
            continue
        hits = _hits(words[row[3]], terms)
        if hits:
            scored.append((-hits, rank, row))
    scored.sort(key=lambda s: (s[0], s[1]))
    best = scored[:limit]
    texts = _texts(conn, [row[3] for _, _, row in best])
    return [
        {
            "event_id": row[0],
            "ts": row[1],
            "user": row[2],
            "user_message": texts[row[3]][0],
            "agent_response": texts[row[3]][1],
            "score": float(-neg),
        }
        for neg, _, row in best
    ]


def _texts(conn: sqlite3.Connection, item_ids: list[str]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    for start in range(0, len(item_ids), 500):
        chunk = item_ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for item_id, message, response in conn.execute(
            f"SELECT item_id, user_message, agent_response FROM wm_items WHERE item_id IN ({marks})", chunk
        ):
            out[item_id] = (message or "", response or "")
    return out


def _turn_words(conn: sqlite3.Connection, db: str, item_ids: list[str]) -> dict[str, tuple[str, ...]]:
    """Each turn's sorted words, from the cache (a turn's text never changes) or read once."""
    out = {i: _WORDS[(db, i)] for i in item_ids if (db, i) in _WORDS}
    missing = [i for i in item_ids if i not in out]
    if missing:
        if len(_WORDS) + len(missing) > WORD_CACHE:
            _WORDS.clear()
        for item_id, (message, response) in _texts(conn, missing).items():
            out[item_id] = _WORDS[(db, item_id)] = _sorted_words(f"{message} {response}")
    return out
