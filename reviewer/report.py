"""The behavioural review of one day of one agent: what it measures, and the rows it reads.

Logging code can support model, usage, selection reason and approval status
without anyone wiring them, leaving every record unenriched. So the first
thing a report shows is enrichment coverage per field:
the fraction of interactions that carry it. Then tokens and estimated cost by
model (`settings.prices`), the response-length distribution, tool use,
approval status, and flagged interactions (empty, repeated, truncated,
refusals, very long) with their ids and at most a short snippet — a report is
not a second copy of the conversation.

Erased events are excluded (the erasure stream is read here, so a report
regenerated after `forget` no longer mentions them, before and after seal).
"""

from __future__ import annotations

from datetime import date

import duckdb

from tiermem.settings import Settings

SNIPPET_CHARS = 60
VERY_LONG_CHARS = 4000
TRUNCATION_MIN_CHARS = 200
LENGTH_BUCKETS = (0, 1, 50, 200, 500, 1000, 2000, 4000)
REFUSAL_PATTERN = (
    r"(i can't help|i cannot help|i can't assist|i cannot assist|i'm unable to|i am unable to|"
    r"i won't be able|i'm not able to|i am not able to|i must decline|as an ai(,| language model))"
)

# Enrichment fields and the SQL predicate that says "set" for each.
COVERAGE_FIELDS: dict[str, str] = {
    "model": "nullif(trim(model), '') IS NOT NULL",
    "usage": "usage IS NOT NULL AND (usage.input_tokens IS NOT NULL OR usage.output_tokens IS NOT NULL)",
    "usage.input_tokens": "usage.input_tokens IS NOT NULL",
    "usage.output_tokens": "usage.output_tokens IS NOT NULL",
    "usage.tool_calls": "usage.tool_calls IS NOT NULL",
    # The log writes `tools_used = []` when a turn says nothing, so only a non-empty list or a
    # recorded tool-call count shows that the runtime tracked tool use.
    "tools_used": "len(coalesce(tools_used, [])) > 0 OR usage.tool_calls IS NOT NULL",
    "selection_reason": "nullif(trim(selection_reason), '') IS NOT NULL",
    "approval_status": "nullif(trim(approval_status), '') IS NOT NULL",
    "latency_ms": "latency_ms IS NOT NULL",
    "response_length": "response_length IS NOT NULL",
    "session_id": "nullif(trim(session_id), '') IS NOT NULL",
    "user": "nullif(trim(\"user\"), '') IS NOT NULL",
    "channel": "nullif(trim(channel), '') IS NOT NULL",
    "agent_type": "nullif(trim(agent_type), '') IS NOT NULL",
}

# "Fully enriched": a turn carries the core enrichment (without model and token
# usage a review can say nothing about cost or model choice), and every other
# enrichment field that the agent's runtime records
# at all that day. A deployment with no selection or approval step never sets
# `selection_reason` or `approval_status`, which is not a gap; a runtime that
# sets them on some turns and forgets them on others is.
CORE_ENRICHMENT = ("model", "usage")
WIRED_ENRICHMENT = ("selection_reason", "approval_status", "latency_ms", "usage.tool_calls")

FLAGS = ("empty", "repeated", "truncated", "refusal", "very_long")

BASE = f"""
WITH erased AS (
    SELECT DISTINCT unnest(erased_event_ids) AS event_id FROM erasures_events
    WHERE type = 'erasure' AND erased_event_ids IS NOT NULL
)
SELECT *, CAST(ts AS DATE) AS day,
       trim(coalesce(agent_response, '')) = '' AS f_empty,
       trim(coalesce(agent_response, '')) <> '' AND count(*) OVER (
           PARTITION BY CAST(ts AS DATE), agent_id, md5(trim(coalesce(agent_response, '')))) > 1 AS f_repeated,
       (rtrim(coalesce(agent_response, '')) LIKE '%...' OR rtrim(coalesce(agent_response, '')) LIKE '%…'
        OR (length(agent_response) >= {TRUNCATION_MIN_CHARS}
            AND regexp_matches(right(rtrim(agent_response), 1), '[A-Za-z0-9,;:\\-]'))) AS f_truncated,
       regexp_matches(lower(coalesce(agent_response, '')), '{REFUSAL_PATTERN.replace("'", "''")}') AS f_refusal,
       length(coalesce(agent_response, '')) > {VERY_LONG_CHARS} AS f_very_long
FROM interactions
WHERE event_id NOT IN (SELECT event_id FROM erased)
  AND (user_message IS NOT NULL OR agent_response IS NOT NULL)
"""


def prepare(con: duckdb.DuckDBPyConnection, day: str | None = None, agent: str | None = None) -> None:
    """The `reviewed` table: the interactions to review with their flags, of one day and/or agent if given.

    The flags' windows are per day and agent, so narrowing first gives the same rows.
    """
    sql, params = BASE, []
    if day:
        sql += " AND CAST(ts AS DATE) = CAST(? AS DATE)"
        params.append(day)
    if agent:
        sql += " AND agent_id = ?"
        params.append(agent)
    con.execute(f"CREATE OR REPLACE TEMP TABLE reviewed AS {sql}", params)


def snippet(text: str | None) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= SNIPPET_CHARS else text[: SNIPPET_CHARS - 1] + "…"


def cost_usd(
    settings: Settings, model: str | None, tokens_in: int, tokens_out: int, cache_read: int
) -> float | None:
    price = settings.prices.get(model or "")
    if price is None:
        return None
    return round(
        (tokens_in * price.input + tokens_out * price.output + cache_read * price.cache_read) / 1e6, 6
    )


def day_text(value: str | date | None) -> str | None:
    if value is None:
        return None
    return value.isoformat() if isinstance(value, date) else str(value)
