"""Derived views for the analyst catalog (`tiermem sql`): what memory was delivered where."""

from __future__ import annotations

VIEWS: dict[str, str] = {
    # One row per delivery of memory to a prompt or a tool result ("which memories did you use?").
    "retrievals": (
        "SELECT event_id, ts, agent_id, tool, query, participant, item_ids, scores, tokens, reason, session_id,"
        " len(coalesce(item_ids, [])) AS n_items"
        " FROM retrievals_events WHERE type = 'retrieval'"
    ),
}
