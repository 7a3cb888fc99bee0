"""Every report of a set of (day, agent) pairs from a handful of grouped queries.

A report per pair used to cost about fifteen queries, each a scan of the
reviewed rows filtered to one agent: at 10k agents the scans, not the
arithmetic, were the job. Here each section of the report is one `GROUP BY
day, agent_id` query over the whole set, and the rows come back sorted by the
pair, so assembling the reports is a merge. The figures are those of the
per-pair queries (same expressions, same ordering, same rounding).

The connection must hold a `reviewed` table (see `report.prepare` and
`report.prepare_from`); the set is whatever that table holds, optionally
narrowed by `where`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import duckdb
from tiermem.reviewer import report as rep

from tiermem.settings import Settings

Key = tuple[str, str]  # (day as YYYY-MM-DD, agent)
KEY = "CAST(day AS VARCHAR) AS d, agent_id AS a"
GROUP = "GROUP BY 1, 2"


def _grouped(con: duckdb.DuckDBPyConnection, sql: str) -> dict[Key, list[dict[str, Any]]]:
    """Rows of `sql` (whose first two columns are the key) per key, in the query's order."""
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description][2:]
    out: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    for row in cur.fetchall():
        out[(row[0], row[1])].append(dict(zip(cols, row[2:], strict=True)))
    return out


def _one(rows: dict[Key, list[dict[str, Any]]], key: Key) -> dict[str, Any]:
    found = rows.get(key)
    return found[0] if found else {}


def compute_all(
    con: duckdb.DuckDBPyConnection, settings: Settings, where: str = "true"
) -> list[dict[str, Any]]:
    """The reports of every (day, agent) in `reviewed` matching `where`, ordered by day then agent."""
    return list(iter_reports(con, settings, where))


def iter_reports(
    con: duckdb.DuckDBPyConnection, settings: Settings, where: str = "true"
) -> Iterator[dict[str, Any]]:
    fields = rep.COVERAGE_FIELDS
    src = f"(SELECT * FROM reviewed WHERE {where})"
    con.execute(f"CREATE OR REPLACE TEMP VIEW review_set AS SELECT * FROM {src}")
    main_cols = ", ".join(
        [
            "count(*) AS n",
            *(f'avg(CASE WHEN {p} THEN 1.0 ELSE 0.0 END) AS "cov:{f}"' for f, p in fields.items()),
            *(f'sum(CASE WHEN {p} THEN 1 ELSE 0 END) AS "set:{f}"' for f, p in fields.items()),
            "count(*) FILTER (WHERE len(coalesce(tools_used, [])) > 0) AS with_tools",
            "min(length(coalesce(agent_response, ''))) AS l_min",
            "quantile_cont(length(coalesce(agent_response, '')), 0.5) AS l_p50",
            "quantile_cont(length(coalesce(agent_response, '')), 0.9) AS l_p90",
            "quantile_cont(length(coalesce(agent_response, '')), 0.99) AS l_p99",
            "max(length(coalesce(agent_response, ''))) AS l_max",
            "avg(length(coalesce(agent_response, ''))) AS l_mean",
            "quantile_cont(latency_ms, 0.5) AS lat_p50",
            "quantile_cont(latency_ms, 0.9) AS lat_p90",
            "max(latency_ms) AS lat_max",
        ]
    )
    main = _grouped(con, f"SELECT {KEY}, {main_cols} FROM review_set {GROUP} ORDER BY 1, 2")
    # "Fully enriched" needs the core fields plus every wired field the pair sets at all.
    wired = rep.WIRED_ENRICHMENT
    per_pair = ", ".join(
        f'sum(CASE WHEN {fields[f]} THEN 1 ELSE 0 END) AS "w{i}"' for i, f in enumerate(wired)
    )
    cond = " AND ".join(
        [
            *(f"({fields[f]})" for f in rep.CORE_ENRICHMENT),
            *(f'(s."w{i}" = 0 OR ({fields[f]}))' for i, f in enumerate(wired)),
        ]
    )
    fully = _grouped(
        con,
        f"WITH s AS (SELECT day, agent_id, {per_pair} FROM review_set GROUP BY 1, 2) "
        f"SELECT CAST(r.day AS VARCHAR) AS d, r.agent_id AS a, count(*) AS fully "
        f"FROM review_set r JOIN s ON r.day = s.day AND r.agent_id = s.agent_id WHERE {cond} {GROUP}",
    )
    models = _grouped(
        con,
        f"SELECT {KEY}, coalesce(nullif(trim(model), ''), '(not recorded)') AS model, count(*) AS interactions, "
        "coalesce(sum(usage.input_tokens), 0) AS input_tokens, coalesce(sum(usage.output_tokens), 0) AS output_tokens, "
        "coalesce(sum(usage.cache_read_tokens), 0) AS cache_read_tokens, "
        "count(usage.input_tokens) AS with_usage "
        "FROM review_set GROUP BY 1, 2, 3 ORDER BY 1, 2, 4 DESC, 3",
    )
    buckets = list(rep.LENGTH_BUCKETS)
    bucket_sql = (
        "CASE "
        + " ".join(
            f"WHEN length(coalesce(agent_response, '')) < {hi} THEN {i}" for i, hi in enumerate(buckets[1:])
        )
        + f" ELSE {len(buckets) - 1} END"
    )
    hist = _grouped(con, f"SELECT {KEY}, {bucket_sql} AS b, count(*) AS c FROM review_set {GROUP}, 3")
    tools = _grouped(
        con,
        f"SELECT d, a, tool, count(*) AS uses FROM (SELECT {KEY}, unnest(tools_used) AS tool FROM review_set) "
        "GROUP BY 1, 2, 3 ORDER BY 1, 2, 4 DESC, 3",
    )
    approvals = _grouped(
        con,
        f"SELECT {KEY}, coalesce(nullif(trim(approval_status), ''), '(not recorded)') AS approval_status, "
        "count(*) AS n FROM review_set GROUP BY 1, 2, 3 ORDER BY 1, 2, 4 DESC, 3",
    )
    flag_cols = ", ".join(f"f_{f}" for f in rep.FLAGS)
    flagged = _grouped(
        con,
        f"SELECT {KEY}, event_id, ts, agent_response, length(coalesce(agent_response, '')) AS len, {flag_cols} "
        f"FROM review_set WHERE {' OR '.join(f'f_{f}' for f in rep.FLAGS)} ORDER BY 1, 2, ts, event_id",
    )
    ids = _grouped(con, f"SELECT {KEY}, event_id FROM review_set ORDER BY 1, 2, ts, event_id")
    for key, rows in main.items():
        yield _assemble(
            settings,
            key,
            rows[0],
            int(_one(fully, key).get("fully", 0)),
            models.get(key, []),
            {int(r["b"]): int(r["c"]) for r in hist.get(key, [])},
            tools.get(key, []),
            approvals.get(key, []),
            flagged.get(key, []),
            [r["event_id"] for r in ids.get(key, [])],
        )


def _assemble(
    settings: Settings,
    key: Key,
    m: dict[str, Any],
    fully: int,
    models: list[dict[str, Any]],
    hist: dict[int, int],
    tools: list[dict[str, Any]],
    approvals: list[dict[str, Any]],
    flag_rows: list[dict[str, Any]],
    event_ids: list[str],
) -> dict[str, Any]:
    day, agent = key
    n = int(m["n"])
    coverage = {f: round(float(m[f"cov:{f}"] or 0.0), 6) for f in rep.COVERAGE_FIELDS}
    set_counts = {f: int(m[f"set:{f}"] or 0) for f in rep.COVERAGE_FIELDS}
    required = [*rep.CORE_ENRICHMENT, *(f for f in rep.WIRED_ENRICHMENT if set_counts[f] > 0)]
    total_cost = 0.0
    unpriced = []
    for row in models:
        row["cost_usd"] = rep.cost_usd(
            settings,
            row["model"],
            int(row["input_tokens"]),
            int(row["output_tokens"]),
            int(row["cache_read_tokens"]),
        )
        if row["cost_usd"] is None:
            unpriced.append(row["model"])
        else:
            total_cost += row["cost_usd"]
    buckets = list(rep.LENGTH_BUCKETS)
    histogram = [
        {"from": lo, "to": buckets[i + 1] if i + 1 < len(buckets) else None, "count": hist.get(i, 0)}
        for i, lo in enumerate(buckets)
    ]
    flagged: dict[str, list[dict[str, Any]]] = {flag: [] for flag in rep.FLAGS}
    for r in flag_rows:
        item = {
            "event_id": r["event_id"],
            "ts": r["ts"].isoformat() if isinstance(r["ts"], datetime) else str(r["ts"]),
            "snippet": rep.snippet(r["agent_response"]),
            "response_length": int(r["len"]),
        }
        for flag in rep.FLAGS:
            if r[f"f_{flag}"]:
                flagged[flag].append(dict(item))
    length = {k: m[f"l_{k}"] for k in ("min", "p50", "p90", "p99", "max", "mean")}
    latency = {k: m[f"lat_{k}"] for k in ("p50", "p90", "max")}
    return {
        "day": day,
        "agent_id": agent,
        "interactions": n,
        "enrichment_coverage": coverage,
        "enrichment_set_counts": set_counts,
        "fully_enriched": fully,
        "fully_enriched_fraction": round(fully / n, 6) if n else 0.0,
        "fully_enriched_fields": required,
        "missing_fields": sorted(k for k, v in coverage.items() if v < 1.0),
        "tokens_by_model": models,
        "tokens": {
            "input": sum(int(r["input_tokens"]) for r in models),
            "output": sum(int(r["output_tokens"]) for r in models),
            "cache_read": sum(int(r["cache_read_tokens"]) for r in models),
        },
        "cost_usd": round(total_cost, 6),
        "unpriced_models": unpriced,
        "response_length": {k: (round(float(v), 1) if v is not None else None) for k, v in length.items()},
        "response_length_histogram": histogram,
        "tool_use": {"interactions_with_tools": int(m["with_tools"]), "by_tool": tools},
        "approval_status": approvals,
        "latency_ms": {k: (round(float(v), 1) if v is not None else None) for k, v in latency.items()},
        "flags": {flag: len(rows) for flag, rows in flagged.items()},
        "flagged": flagged,
        "flagged_interactions": len({r["event_id"] for r in flag_rows}),
        "event_ids": event_ids,
    }
