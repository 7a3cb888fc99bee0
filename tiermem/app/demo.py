"""`tiermem demo`: the whole system on a multi-day, multi-agent story, told by the system itself.

1. The permanent log (stage 1): a generated background history of several
   agents and users (`tiermem.app.samples`, ending four days ago) is ingested,
   its closed days sealed to Parquet, and queried with SQL.
2. The story (`tiermem.app.demo_story`): three days of scripted conversations
   recorded through the runtime (`record_turn`, `end_session` and its
   session-end hook), the log queried again, the batch jobs a scheduler runs
   (compress, evolve, review, project), and today's turns: the assembled
   context tier by tier with its token cost, and a `recall_memory` answer.

Offline by default (deterministic scorer, merger and reviewer; well under a
minute); with ANTHROPIC_API_KEY set the batch jobs take their Claude paths and
the background history is kept small to bound the number of requests. The
summary says which path ran. `--json` prints the summary as one object.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_json_flag, command
from tiermem.ids import utcnow
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

# With Claude, every 15 background turns cost a scoring request: keep the history small.
CLAUDE_PER_DAY = 30
# The background history ends this many days before today; the story fills the days after it.
HISTORY_ENDS_DAYS_AGO = 4


@dataclass
class DemoInfo:
    data_dir: str
    sample_file: str
    records: int
    ingest: dict[str, Any]
    seal: dict[str, Any]
    path: str = "offline"  # "claude" when ANTHROPIC_API_KEY is set
    queries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    story: dict[str, Any] = field(default_factory=dict)
    report_files: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


def run_demo(
    settings: Settings,
    *,
    days: int = 5,
    per_day: int | None = None,
    seed: int = 7,
    say: Callable[[str], None] = print,
    story: bool = False,
    history_ends_days_ago: int = 0,
) -> DemoInfo:
    """Generate, ingest, seal, query, then (with `story`) play the story; narrate through `say`. Safe to re-run.

    Without `story` this is stage 1, the log alone, with a history ending today.
    `tiermem demo` ends the history `HISTORY_ENDS_DAYS_AGO` days ago and plays
    the story on the days after it.
    """
    from tiermem.app import samples
    from tiermem.ingest.pipeline import ingest_file
    from tiermem.log.seal import seal
    from tiermem.log.sql import run_query

    started = time.perf_counter()
    path = "claude" if settings.claude_available else "offline"
    if per_day is None:
        per_day = CLAUDE_PER_DAY if path == "claude" else 400
    say(
        f"tiermem demo: {path} path"
        + (
            " (ANTHROPIC_API_KEY is set: compression, merging and review judging call Claude)"
            if path == "claude"
            else " (no ANTHROPIC_API_KEY: deterministic offline scorer, merger and reviewer; set a key for Claude)"
        )
        + f"\ndata root: {settings.data_dir}"
    )
    say("\n== The permanent log: a generated history, ingested, sealed, queried ==")
    history_end = utcnow().date() - timedelta(days=history_ends_days_ago)
    sample = settings.data_dir / "demo" / "sample.jsonl"
    n = samples.write_jsonl(sample, samples.generate(days=days, per_day=per_day, seed=seed, end=history_end))
    say(
        f"1. generated {n:,} turns over {days} days up to {history_end} ({len(samples.AGENTS)} agents, "
        f"{len(samples.USERS)} users, several channels and models; ~15% without enrichment, ~3% in the "
        f"seed's old camelCase format)\n   -> {sample}"
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
        f"{sealed.sealed_rows:,} rows, {sealed.jsonl_bytes:,} B of JSONL -> {sealed.parquet_bytes:,} B of zstd "
        f"Parquet; today stays JSONL until tomorrow's seal\n   -> manifest {sealed.manifest}"
    )
    info = DemoInfo(
        data_dir=str(settings.data_dir),
        sample_file=str(sample),
        records=n,
        ingest=dataclasses.asdict(ing),
        seal=dataclasses.asdict(sealed),
        path=path,
    )
    for i, (title, sql) in enumerate(QUERIES.items(), start=4):
        result = run_query(settings, sql)
        info.queries[title] = result.records()
        say(f"{i}. {title}  ({result.elapsed_s * 1000:.0f} ms)")
        say(format_table(result.columns, [list(r.values()) for r in result.records()]))

    if story:
        from tiermem.app.demo_story import run_story

        told = run_story(settings, say)
        info.story = dataclasses.asdict(told)
        info.report_files, info.charts = told.report_files, told.charts
    info.elapsed_s = round(time.perf_counter() - started, 2)
    _where(settings, info, say)
    return info


def _where(settings: Settings, info: DemoInfo, say: Callable[[str], None]) -> None:
    paths = info.story.get("paths") or {}
    ran = ", ".join(f"{job} {p}" for job, p in paths.items()) or info.path
    say(f"\n== Done in {info.elapsed_s}s ({ran}) ==")
    say(f"  the log (JSONL + Parquet, Hive layout):  {settings.log_dir}")
    say(f"  the hot store the runtime reads:         {settings.hot_db}")
    if info.report_files:
        markdown = [f for f in info.report_files if f.endswith(".md")]
        say(
            f"  quality reports:                         {len(info.report_files)} Markdown + JSON files, e.g."
        )
        for path in _story_first(markdown)[:2]:
            say(f"                                           {path}")
    if info.charts:
        say(f"  charts:                                  {len(info.charts)} PNG files, e.g.")
        for path in _story_first(info.charts)[:2]:
            say(f"                                           {path}")
    d = f"--data-dir {settings.data_dir} "
    say("  try:")
    say(f'    tiermem {d}sql "SELECT agent_id, count(*) FROM episodes GROUP BY 1"')
    say(f'    tiermem {d}context support-bot --user alice --query "refund"')
    say(f'    tiermem {d}recall nexus-npc "the night I could not sleep" --participant mira')
    say(f"    tiermem {d}mcp --agent support-bot        # the memory tools over MCP (stdio)")
    say(f"    tiermem {d}schedule                       # the jobs above, on their own, until Ctrl-C")


def _story_first(paths: list[str]) -> list[str]:
    """Newest day first and, within a day, the story's agents first: what a reader of the demo opens."""

    def key(path: str) -> tuple[str, bool]:
        day = path.split("date=")[-1][:10] if "date=" in path else ""
        return day, "support-bot" in path or "nexus-npc" in path

    return sorted(paths, key=key, reverse=True)


def _demo(args: argparse.Namespace, memory: Memory) -> int:
    # The demo is a program over the whole data root, not one memory call: it gets the settings.
    settings = memory.settings
    kwargs: dict[str, Any] = {"days": args.days, "per_day": args.per_day}
    if not args.log_only:
        kwargs.update(story=True, history_ends_days_ago=HISTORY_ENDS_DAYS_AGO)
    if args.json:
        info = run_demo(settings, say=lambda _text: None, **kwargs)
        emit_json(dataclasses.asdict(info))
    else:
        run_demo(settings, **kwargs)
    return 0


def register(sub: Any) -> None:
    p = command(
        sub,
        "demo",
        _demo,
        "the whole system on a multi-day, multi-agent story: log, SQL, runtime, compression, evolution, "
        "review, context and recall",
        "  tiermem demo\n"
        "  tiermem --data-dir /tmp/tm demo --json > summary.json\n"
        "  tiermem --data-dir /tmp/tm demo --log-only --days 7 --per-day 1000   # stage 1 only: the log\n",
    )
    p.add_argument("--days", type=int, default=5, help="days of generated background history (default 5)")
    p.add_argument(
        "--per-day",
        dest="per_day",
        type=int,
        default=None,
        help=f"background turns per day (default 400 offline, {CLAUDE_PER_DAY} with Claude)",
    )
    p.add_argument("--log-only", action="store_true", help="stop after the log part (no runtime story)")
    add_json_flag(p)
