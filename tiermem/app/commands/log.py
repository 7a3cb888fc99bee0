"""CLI for the log: `tiermem seal` and `tiermem sql` (thin wrappers over `Memory.seal`, `Memory.query`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_json_flag, command
from tiermem.output import emit_json, format_table


def _seal(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.seal(before=args.before)
    if args.json:
        emit_json(dataclasses.asdict(info))
        return 0
    print(
        f"sealed {info.sealed_segments} segment(s), {info.sealed_rows:,} rows of days before {info.before} "
        f"in {info.elapsed_s:.2f}s ({info.jsonl_bytes:,} B JSONL -> {info.parquet_bytes:,} B Parquet); "
        f"{info.already_sealed} already sealed, {info.skipped_open} open segment(s) of today left as JSONL"
    )
    if info.erased_events or info.scrubbed_records:
        print(
            f"erasure: {info.erased_events} event(s) removed from {info.erased_files_rewritten} file(s), "
            f"{info.scrubbed_records} reject/quarantine record(s) scrubbed"
        )
    if info.cold_url:
        print(
            f"object store {info.cold_url}: {info.cold_segments} segment(s), {info.cold_rows:,} rows committed, "
            f"{info.cold_already} already there; {info.cold_deleted_rows} erased row(s) deleted, "
            f"{info.cold_files_removed} old file(s) vacuumed"
        )
    print(f"manifest: {info.manifest}")
    return 0


def _sql(args: argparse.Namespace, memory: Memory) -> int:
    from tiermem.log.sql import plain, to_csv

    query = args.query if args.query != "-" else sys.stdin.read()
    result = memory.query(query, timeout=args.timeout)
    if args.json:
        emit_json(result.records())
    elif args.csv:
        sys.stdout.write(to_csv(result))
    else:
        rows: list[list[Any]] = [[plain(v) for v in r] for r in result.rows]
        print(format_table(result.columns, rows))
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''}, {result.elapsed_s * 1000:.0f} ms)")
    return 0


def register(sub: Any) -> None:
    p = command(
        sub,
        "seal",
        _seal,
        "seal closed days (before today UTC) to zstd Parquet, applying pending erasures",
        "  tiermem seal\n  tiermem seal --before 2026-03-01 --json\n",
    )
    p.add_argument("--before", help="seal days before this date (YYYY-MM-DD; default: today UTC)")
    add_json_flag(p)
    p = command(
        sub,
        "sql",
        _sql,
        "run one read-only SQL query over the log's views (events, interactions, episodes, ...)",
        '  tiermem sql "SELECT agent_id, count(*) AS turns FROM interactions GROUP BY 1"\n'
        '  tiermem sql --csv "SELECT * FROM interactions WHERE ts >= now() - INTERVAL 1 DAY"\n'
        '  tiermem sql --json "SELECT model, sum(usage.output_tokens) AS out FROM interactions GROUP BY 1"\n'
        "  echo 'SHOW TABLES' | tiermem sql -\n",
    )
    p.add_argument("query", help="a SELECT statement ('-' reads it from stdin)")
    p.add_argument(
        "--timeout",
        type=float,
        help="stop the query after this many seconds (default: [sql] timeout_seconds, 60)",
    )
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="CSV with a header row")
    fmt.add_argument("--json", action="store_true", help="a JSON array of row objects")
