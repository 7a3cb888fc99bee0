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
`SCAN_LIMIT` unfolded turns are read, which bounds the cost for an agent that
has never been compressed.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from tiermem.runtime.episode_search import query_matches, query_terms
from tiermem.runtime.hotstore import item_clause
from tiermem.runtime.visibility import Principal

SCAN_LIMIT = 400


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
    if limit <= 0 or not query_terms(query):
        return []
    where, params = item_clause(who, "w")
    if participant:
        where += " AND lower(w.user) = lower(?)"
        params.append(participant)
    rows = conn.execute(
        "SELECT w.event_id, w.ts, w.user, w.user_message, w.agent_response FROM wm_items w"
        f" WHERE w.kind = 'interaction' AND {where}"
        " AND NOT EXISTS (SELECT 1 FROM folded_turns t WHERE t.event_id = w.event_id)"
        " ORDER BY w.ts DESC, w.item_id DESC LIMIT ?",
        (*params, SCAN_LIMIT),
    ).fetchall()
    scored: list[tuple[int, int, dict[str, Any]]] = []
    for rank, row in enumerate(rows):
        if row[0] in exclude:
            continue
        text = f"{row[3] or ''} {row[4] or ''}"
        hits = query_matches(query, text)
        if hits == 0:
            continue
        scored.append(
            (
                -hits,
                rank,
                {
                    "event_id": row[0],
                    "ts": row[1],
                    "user": row[2],
                    "user_message": row[3] or "",
                    "agent_response": row[4] or "",
                    "score": float(hits),
                },
            )
        )
    scored.sort(key=lambda s: (s[0], s[1]))
    return [item for _, _, item in scored[:limit]]
