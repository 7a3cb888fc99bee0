"""Derived DuckDB views the compressor declares for analysts (see tiermem.sqlviews).

`episodes`: the latest version of each episode (an id appears once even if a
duplicate line ever slipped into a file), with the least columns DESIGN.md
promises plus importance details.
"""

from __future__ import annotations

VIEWS: dict[str, str] = {
    "episodes": """
        SELECT event_id AS episode_id, agent_id, name, summary, key_quotes, participants, start_ts, end_ts,
               importance, coalesce(important, false) AS important, emotional_context, kind, scorer,
               project_id, source_event_ids, len(source_event_ids) AS interactions, ts
        FROM episodes_events
        WHERE type = 'episode'
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ts DESC) = 1
    """,
}
