"""The analyst catalog: the log's views plus the views derived from its events.

`open_catalog(settings)` is what `tiermem sql`, the batch jobs and notebooks
use. The derived views (`episodes`, `knowledge`, `proposals`, `retrievals`, `notes`)
are declared here, in the base, written against the log's per-stream views, so
every part reads the same definitions and no part needs another to query.
`knowledge` and `proposals` are computed from the log alone (knowledge events,
retrievals, erasures), so they agree with the evolver's own fold and with the
runtime's projection; erased events are excluded even before the next seal
rewrites the cold files.
"""

from __future__ import annotations

import duckdb

from tiermem import catalog
from tiermem.registry import type_filter
from tiermem.settings import Settings

# `episodes`: the latest version of each episode (an id appears once even if a
# duplicate line ever slipped into a file).
EPISODE_VIEWS: dict[str, str] = {
    "episodes": f"""
        SELECT event_id AS episode_id, agent_id, name, summary, key_quotes, participants, start_ts, end_ts,
               importance, coalesce(important, false) AS important, emotional_context, kind, scorer,
               project_id, source_event_ids, len(source_event_ids) AS interactions, ts
        FROM episodes_events
        WHERE {type_filter("episodes")}
        QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ts DESC) = 1
    """,
}


_ERASED = """
    SELECT DISTINCT unnest(erased_event_ids) AS event_id
    FROM erasures_events WHERE type = 'erasure' AND erased_event_ids IS NOT NULL
"""

# One row per version of a fact: evolver decisions and explicit KV writes. A fact whose
# events name no scope is private to its agent (scope 'agent'), as the runtime reads it.
_FACT_VERSIONS = f"""
    SELECT fact_id, agent_id, coalesce(scope, 'agent') AS scope, category, topic, key, content, status,
           coalesce(origin, decided_by) AS source, ts, coalesce(revision, 0) AS revision, event_id,
           decision, note, previous_content, proposal_id, participant, project_id, agent_type,
           original, importance, source_event_ids
    FROM knowledge_events
    WHERE type = 'knowledge_decided' AND fact_id IS NOT NULL
      AND event_id NOT IN ({_ERASED})
    UNION ALL BY NAME
    SELECT coalesce(fact_id, 'kv:' || agent_id || ':' || coalesce(scope, 'agent') || ':' ||
             CASE WHEN scope IN ('project', 'override') THEN coalesce(project_id, '-')
                  WHEN scope = 'agent_type' THEN coalesce(agent_type, '-')
                  WHEN scope IS NULL AND participant IS NOT NULL THEN '@' || participant
                  ELSE '-' END || ':' || key) AS fact_id,
           agent_id, coalesce(scope, 'agent') AS scope, 'kv' AS category, NULL AS topic, key,
           key || ': ' || value AS content, 'active' AS status, coalesce(source, 'agent') AS source, ts,
           0 AS revision, event_id, 'set' AS decision, NULL AS note, NULL AS previous_content,
           NULL AS proposal_id, participant, project_id, agent_type, NULL AS original, NULL AS importance,
           [event_id] AS source_event_ids
    FROM knowledge_events
    WHERE type = 'fact_set' AND event_id NOT IN ({_ERASED})
    UNION ALL BY NAME
    SELECT coalesce(fact_id, 'kv:' || agent_id || ':' || coalesce(scope, 'agent') || ':' ||
             CASE WHEN scope IN ('project', 'override') THEN coalesce(project_id, '-')
                  WHEN scope = 'agent_type' THEN coalesce(agent_type, '-') ELSE '-' END || ':' || key) AS fact_id,
           agent_id, coalesce(scope, 'agent') AS scope, 'kv' AS category, NULL AS topic, key,
           NULL AS content, 'inactive' AS status, 'user' AS source, ts, 0 AS revision, event_id,
           'removed' AS decision, reason AS note, NULL AS previous_content, NULL AS proposal_id,
           NULL AS participant, project_id, agent_type, NULL AS original, NULL AS importance,
           [event_id] AS source_event_ids
    FROM knowledge_events
    WHERE type = 'fact_removed' AND event_id NOT IN ({_ERASED})
"""

KNOWLEDGE = f"""
WITH versions AS ({_FACT_VERSIONS}),
ranked AS (
    SELECT *,
           row_number() OVER (PARTITION BY fact_id ORDER BY ts DESC, revision DESC, event_id DESC) AS rn,
           min(ts) OVER (PARTITION BY fact_id) AS first_ts,
           last_value(scope IGNORE NULLS) OVER (
               PARTITION BY fact_id ORDER BY ts, revision, event_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last_scope,
           last_value(content IGNORE NULLS) OVER (
               PARTITION BY fact_id ORDER BY ts, revision, event_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS last_content
    FROM versions
),
recalls AS (
    SELECT item AS fact_id, count(*) AS recall_count
    FROM (SELECT unnest(item_ids) AS item FROM retrievals_events
          WHERE type = 'retrieval' AND event_id NOT IN ({_ERASED}))
    GROUP BY item
)
SELECT r.fact_id, r.agent_id,
       -- A decision that never names a scope leaves the fact its agent's own.
       coalesce(r.last_scope, 'agent') AS scope, r.category, r.topic, r.key,
       coalesce(r.content, r.last_content) AS content, r.status, r.source,
       r.first_ts AS created_at, r.ts AS updated_at, coalesce(c.recall_count, 0) AS recall_count,
       r.decision, r.note, r.previous_content, r.participant, r.project_id, r.agent_type,
       r.original, r.importance, r.proposal_id, r.source_event_ids
FROM ranked r LEFT JOIN recalls c USING (fact_id)
WHERE r.rn = 1
  AND r.status IN ('active', 'inactive', 'archived')
  AND NOT (r.decision IN ('pending', 'rejected') OR (r.decision = 'approved' AND r.status = 'inactive'))
"""

PROPOSALS = f"""
WITH decisions AS (
    SELECT proposal_id, decision, decided_by, fact_id, note, ts,
           row_number() OVER (PARTITION BY proposal_id ORDER BY ts DESC, coalesce(revision, 0) DESC,
                              event_id DESC) AS rn
    FROM knowledge_events
    WHERE type = 'knowledge_decided' AND proposal_id IS NOT NULL AND event_id NOT IN ({_ERASED})
)
SELECT p.event_id AS proposal_id, p.agent_id,
       CASE WHEN d.decision IS NULL THEN 'new'
            WHEN d.decision IN ('pending', 'rejected', 'duplicate') THEN d.decision
            WHEN d.decided_by = 'user' THEN 'approved'
            ELSE 'applied' END AS status,
       p.content, p.source_event_ids, p.ts, p.origin, p.confidence, p.importance, p.category, p.topic,
       p.key, p.participant, p.scope, p.project_id, p.is_correction, p.corrects,
       d.decision, d.fact_id, d.note, d.ts AS decided_at
FROM knowledge_events p LEFT JOIN decisions d ON d.proposal_id = p.event_id AND d.rn = 1
WHERE p.type = 'knowledge_proposed' AND p.event_id NOT IN ({_ERASED})
"""

KNOWLEDGE_VIEWS: dict[str, str] = {"knowledge": KNOWLEDGE, "proposals": PROPOSALS}


RETRIEVAL_VIEWS: dict[str, str] = {
    # One row per delivery of memory to a prompt or a tool result ("which memories did you use?").
    "retrievals": (
        "SELECT event_id, ts, agent_id, tool, query, participant, item_ids, scores, tokens, reason, session_id,"
        " len(coalesce(item_ids, [])) AS n_items"
        f" FROM retrievals_events WHERE {type_filter('retrievals')}"
    ),
}


NOTE_VIEWS: dict[str, str] = {
    # Notes derived from turns (absolute dates, who did what), with the turn they came from.
    "notes": (
        "SELECT event_id AS note_id, agent_id, kind, text, speaker, user, session_id, said_ts,"
        " source_event_ids, source_event_ids[1] AS source_event_id, ts"
        f" FROM notes_events WHERE {type_filter('notes')}"
        " QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY ts DESC) = 1"
    ),
}


DERIVED_VIEWS: dict[str, str] = {**EPISODE_VIEWS, **KNOWLEDGE_VIEWS, **RETRIEVAL_VIEWS, **NOTE_VIEWS}


def open_catalog(settings: Settings) -> duckdb.DuckDBPyConnection:
    con = catalog.connect(settings)
    for view, sql in DERIVED_VIEWS.items():
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {sql}")
    return con
