"""`tiermem demo`, stage 1: the permanent log end to end on a generated sample.

Generate a realistic multi-agent, multi-day sample (`tiermem.samples`), ingest
it, seal the closed days to Parquet, run two analyst queries, and say what
happened and where the files are. `run_demo` is a plain function so the full
end-to-end demo can build on it; `register` adds the CLI command.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tiermem.cli import add_json_flag, command
from tiermem.output import emit_json, format_table
from tiermem.settings import Settings

QUERIES: dict[str, str] = {
    "turns, tokens and enrichment by agent and model": """
        SELECT agent_id,
               coalesce(model, '(not enriched)') AS model,
               count(*) AS turns,
               count(DISTINCT "user") AS users,
               sum(usage.input_tokens + usage.output_tokens) AS tokens,
               round(avg(latency_ms)) AS avg_latency_ms
        FROM interactions
        GROUP BY ALL
        ORDER BY agent_id, turns DESC""",
    "daily activity and tool use (sealed days read from Parquet, today from JSONL)": """
        SELECT CAST(ts AS DATE) AS day,
               count(*) AS turns,
               count(*) FILTER (WHERE len(tools_used) > 0) AS with_tools,
               count(*) FILTER (WHERE list_contains(tools_used, 'recall_memory')) AS recalls,
               round(100.0 * count(model) / count(*), 1) AS pct_enriched
        FROM interactions
        GROUP BY ALL
        ORDER BY day""",
}


@dataclass
class DemoInfo:
    data_dir: str
    sample_file: str
    records: int
    ingest: dict[str, Any]
    seal: dict[str, Any]
    queries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    elapsed_s: float = 0.0


def run_demo(
    settings: Settings,
    *,
    days: int = 5,
    per_day: int = 400,
    seed: int = 7,
    say: Callable[[str], None] = print,
) -> DemoInfo:
    """Generate, ingest, seal, query; narrate through `say`. Re-running it is safe (idempotent)."""
    from tiermem import samples
    from tiermem.ingest.pipeline import ingest_file
    from tiermem.log.seal import seal
    from tiermem.log.sql import run_query

    started = time.perf_counter()
    sample = settings.data_dir / "demo" / "sample.jsonl"
    n = samples.write_jsonl(sample, samples.generate(days=days, per_day=per_day, seed=seed))
    say(
        f"1. generated {n:,} turns over {days} days ({len(samples.AGENTS)} agents, {len(samples.USERS)} users, "
        f"several channels and models; ~15% without enrichment, ~3% in the seed's old camelCase format)\n"
        f"   -> {sample}"
    )
    ing = ingest_file(settings, sample, progress=False)
    say(
        f"2. ingested: {ing.accepted:,} accepted, {ing.duplicates:,} already there (re-runs are idempotent), "
        f"{ing.rejected} rejected, {ing.rate_per_s:,.0f} records/s\n"
        f"   -> {settings.log_dir}/interactions/date=YYYY-MM-DD/seg-*.jsonl"
    )
    sealed = seal(settings)
    say(
        f"3. sealed the closed days (before {sealed.before}): {sealed.sealed_segments} segment(s), "
        f"{sealed.sealed_rows:,} rows, {sealed.jsonl_bytes:,} B of JSONL -> {sealed.parquet_bytes:,} B of zstd Parquet; "
        f"today stays JSONL until tomorrow's seal\n   -> manifest {sealed.manifest}"
    )
    info = DemoInfo(
        data_dir=str(settings.data_dir),
        sample_file=str(sample),
        records=n,
        ingest=dataclasses.asdict(ing),
        seal=dataclasses.asdict(sealed),
    )
    for i, (title, sql) in enumerate(QUERIES.items(), start=4):
        result = run_query(settings, sql)
        info.queries[title] = result.records()
        say(f"{i}. {title}  ({result.elapsed_s * 1000:.0f} ms)")
        say(format_table(result.columns, [list(r.values()) for r in result.records()]))
    info.elapsed_s = round(time.perf_counter() - started, 2)
    say(
        f"done in {info.elapsed_s}s. Try: tiermem --data-dir {settings.data_dir} sql "
        '"SELECT channel, count(*) FROM interactions GROUP BY 1"'
    )
    return info


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    if args.json:
        info = run_demo(settings, days=args.days, per_day=args.per_day, say=lambda _text: None)
        emit_json(dataclasses.asdict(info))
    else:
        run_demo(settings, days=args.days, per_day=args.per_day)
    return 0


def register(sub: Any) -> None:
    p = command(
        sub,
        "demo",
        _demo,
        "generate a multi-agent, multi-day sample, ingest it, seal closed days, run analyst queries",
        "  tiermem demo\n  tiermem --data-dir /tmp/tm demo --days 7 --per-day 1000\n",
    )
    p.add_argument("--days", type=int, default=5)
    p.add_argument("--per-day", dest="per_day", type=int, default=400)
    add_json_flag(p)
