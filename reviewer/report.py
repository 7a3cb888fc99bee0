"""The behavioural review of one day of one agent, computed with DuckDB over the log.

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

from datetime import date, datetime
from typing import Any

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


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> list[dict[str, Any]]:
    cur = con.execute(sql, params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def groups(con: duckdb.DuckDBPyConnection, day: str | None, agent: str | None) -> list[tuple[str, str]]:
    """(day, agent) pairs that have interactions, optionally restricted."""
    where, params = _where(day, agent)
    rows = con.execute(
        f"SELECT DISTINCT CAST(day AS VARCHAR), agent_id FROM reviewed WHERE {where} ORDER BY 1, 2", params
    ).fetchall()
    return [(r[0], r[1]) for r in rows]


def _where(day: str | None, agent: str | None) -> tuple[str, list[Any]]:
    clauses, params = ["true"], []
    if day:
        clauses.append("day = CAST(? AS DATE)")
        params.append(day)
    if agent:
        clauses.append("agent_id = ?")
        params.append(agent)
    return " AND ".join(clauses), params


def prepare(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(f"CREATE OR REPLACE TEMP TABLE reviewed AS {BASE}")


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


def compute(con: duckdb.DuckDBPyConnection, settings: Settings, day: str, agent: str) -> dict[str, Any]:
    """The report of one day of one agent (call `prepare` first)."""
    where, params = "day = CAST(? AS DATE) AND agent_id = ?", [day, agent]
    n = int(con.execute(f"SELECT count(*) FROM reviewed WHERE {where}", params).fetchone()[0])  # type: ignore[index]
    cov_sql = ", ".join(
        f'avg(CASE WHEN {pred} THEN 1.0 ELSE 0.0 END) AS "{name}"' for name, pred in COVERAGE_FIELDS.items()
    )
    cov_row = _rows(con, f"SELECT {cov_sql} FROM reviewed WHERE {where}", params)[0]
    coverage = {k: round(float(v or 0.0), 6) for k, v in cov_row.items()}
    set_counts = _rows(
        con,
        "SELECT "
        + ", ".join(
            f'sum(CASE WHEN {pred} THEN 1 ELSE 0 END) AS "{name}"' for name, pred in COVERAGE_FIELDS.items()
        )
        + f" FROM reviewed WHERE {where}",
        params,
    )[0]
    required = [*CORE_ENRICHMENT, *(f for f in WIRED_ENRICHMENT if int(set_counts[f] or 0) > 0)]
    fully = con.execute(
        f"SELECT count(*) FROM reviewed WHERE {where} AND "
        + " AND ".join(f"({COVERAGE_FIELDS[f]})" for f in required),
        params,
    ).fetchone()[0]  # type: ignore[index]

    models = _rows(
        con,
        "SELECT coalesce(nullif(trim(model), ''), '(not recorded)') AS model, count(*) AS interactions, "
        "coalesce(sum(usage.input_tokens), 0) AS input_tokens, coalesce(sum(usage.output_tokens), 0) AS output_tokens, "
        "coalesce(sum(usage.cache_read_tokens), 0) AS cache_read_tokens, "
        "count(usage.input_tokens) AS with_usage "
        f"FROM reviewed WHERE {where} GROUP BY 1 ORDER BY 2 DESC, 1",
        params,
    )
    total_cost = 0.0
    unpriced = []
    for m in models:
        m["cost_usd"] = cost_usd(
            settings, m["model"], int(m["input_tokens"]), int(m["output_tokens"]), int(m["cache_read_tokens"])
        )
        if m["cost_usd"] is None:
            unpriced.append(m["model"])
        else:
            total_cost += m["cost_usd"]

    length = _rows(
        con,
        "SELECT min(length(coalesce(agent_response, ''))) AS min, "
        "quantile_cont(length(coalesce(agent_response, '')), 0.5) AS p50, "
        "quantile_cont(length(coalesce(agent_response, '')), 0.9) AS p90, "
        "quantile_cont(length(coalesce(agent_response, '')), 0.99) AS p99, "
        "max(length(coalesce(agent_response, ''))) AS max, avg(length(coalesce(agent_response, ''))) AS mean "
        f"FROM reviewed WHERE {where}",
        params,
    )[0]
    buckets = list(LENGTH_BUCKETS)
    hist_rows = con.execute(
        f"SELECT length(coalesce(agent_response, '')) FROM reviewed WHERE {where}", params
    ).fetchall()
    lengths = [int(r[0]) for r in hist_rows]
    histogram = []
    for i, lo in enumerate(buckets):
        hi = buckets[i + 1] if i + 1 < len(buckets) else None
        count = sum(1 for v in lengths if v >= lo and (hi is None or v < hi))
        histogram.append({"from": lo, "to": hi, "count": count})

    tools = _rows(
        con,
        f"SELECT tool, count(*) AS uses FROM (SELECT unnest(tools_used) AS tool FROM reviewed WHERE {where}) "
        "GROUP BY 1 ORDER BY 2 DESC, 1",
        params,
    )
    with_tools = con.execute(
        f"SELECT count(*) FROM reviewed WHERE {where} AND len(coalesce(tools_used, [])) > 0", params
    ).fetchone()[0]  # type: ignore[index]
    approvals = _rows(
        con,
        "SELECT coalesce(nullif(trim(approval_status), ''), '(not recorded)') AS approval_status, count(*) AS n "
        f"FROM reviewed WHERE {where} GROUP BY 1 ORDER BY 2 DESC, 1",
        params,
    )
    latency = _rows(
        con,
        "SELECT quantile_cont(latency_ms, 0.5) AS p50, quantile_cont(latency_ms, 0.9) AS p90, max(latency_ms) AS max "
        f"FROM reviewed WHERE {where} AND latency_ms IS NOT NULL",
        params,
    )[0]

    flagged: dict[str, list[dict[str, Any]]] = {}
    for flag in FLAGS:
        rows = con.execute(
            f"SELECT event_id, ts, agent_response, length(coalesce(agent_response, '')) FROM reviewed "
            f"WHERE {where} AND f_{flag} ORDER BY ts, event_id",
            params,
        ).fetchall()
        flagged[flag] = [
            {
                "event_id": r[0],
                "ts": r[1].isoformat() if isinstance(r[1], datetime) else str(r[1]),
                "snippet": snippet(r[2]),
                "response_length": int(r[3]),
            }
            for r in rows
        ]
    flagged_ids = sorted({f["event_id"] for rows in flagged.values() for f in rows})
    event_ids = [
        r[0]
        for r in con.execute(
            f"SELECT event_id FROM reviewed WHERE {where} ORDER BY ts, event_id", params
        ).fetchall()
    ]
    return {
        "day": day,
        "agent_id": agent,
        "interactions": n,
        "enrichment_coverage": coverage,
        "enrichment_set_counts": {k: int(v or 0) for k, v in set_counts.items()},
        "fully_enriched": int(fully),
        "fully_enriched_fraction": round(int(fully) / n, 6) if n else 0.0,
        "fully_enriched_fields": required,
        "missing_fields": sorted(k for k, v in coverage.items() if v < 1.0),
        "tokens_by_model": models,
        "tokens": {
            "input": sum(int(m["input_tokens"]) for m in models),
            "output": sum(int(m["output_tokens"]) for m in models),
            "cache_read": sum(int(m["cache_read_tokens"]) for m in models),
        },
        "cost_usd": round(total_cost, 6),
        "unpriced_models": unpriced,
        "response_length": {k: (round(float(v), 1) if v is not None else None) for k, v in length.items()},
        "response_length_histogram": histogram,
        "tool_use": {"interactions_with_tools": int(with_tools), "by_tool": tools},
        "approval_status": approvals,
        "latency_ms": {k: (round(float(v), 1) if v is not None else None) for k, v in latency.items()},
        "flags": {flag: len(rows) for flag, rows in flagged.items()},
        "flagged": flagged,
        "flagged_interactions": len(flagged_ids),
        "event_ids": event_ids,
    }


def day_text(value: str | date | None) -> str | None:
    if value is None:
        return None
    return value.isoformat() if isinstance(value, date) else str(value)
