"""`tiermem bench ...`: benchmark commands that users and CI can run (currently `bench locomo`)."""

from __future__ import annotations

import argparse
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_json_flag, command
from tiermem.output import emit_json
from tiermem.settings import RERANK_MODES

LOCOMO_EXAMPLES = """  tiermem bench locomo --data ../shared/bench/locomo_dev.json --budget 500
  tiermem bench locomo --data ../shared/bench/locomo_dev.json --budget 500 --json
  tiermem bench locomo --data ../shared/bench/locomo_dev.json --budget 500 --recall-share 0.8
"""


def _locomo(args: argparse.Namespace, memory: Memory) -> int:
    # runs in its own temporary data roots: the command's data root is not used
    from tiermem.app.locomo import format_report, run_locomo

    result = run_locomo(
        args.data,
        args.budget,
        limit_conversations=args.conversations,
        captions=not args.no_captions,
        notes=not args.no_notes,
        recall_share=args.recall_share,
        retrieval=args.retrieval,
        rerank=args.rerank,
    )
    if args.json:
        emit_json(result)
    else:
        print(format_report(result))
    return 0


def register(sub: Any) -> None:
    bench = sub.add_parser("bench", help="run a benchmark (see subcommands)", description="benchmarks")
    bench_sub = bench.add_subparsers(dest="bench_command", metavar="BENCH", required=True)
    p = command(
        bench_sub,
        "locomo",
        _locomo,
        "LoCoMo budget protocol: tiermem vs BM25 over dated turns, in a temporary data root",
        LOCOMO_EXAMPLES,
    )
    p.add_argument("--data", required=True, help="path to a LoCoMo JSON file (never copied into the repo)")
    p.add_argument("--budget", type=int, default=500, help="memory token budget per question (default 500)")
    p.add_argument(
        "--no-captions", action="store_true", help="ingest turns without their images' captions (ablation)"
    )
    p.add_argument("--no-notes", action="store_true", help="compress without derived notes (ablation)")
    p.add_argument("--conversations", type=int, default=None, help="use only the first N conversations")
    p.add_argument(
        "--recall-share",
        type=float,
        default=None,
        help="share of the budget the recalled turns take before the assembled context "
        "(default: runtime.recall_share, 0.9)",
    )
    p.add_argument(
        "--retrieval",
        choices=("lexical", "dense", "hybrid"),
        default=None,
        help="retrieval.mode for the run (default: the setting's default; docs/retrieval.md)",
    )
    p.add_argument(
        "--rerank",
        choices=RERANK_MODES,
        default=None,
        help="retrieval.rerank for the run (default: the setting's default, words; docs/retrieval.md)",
    )
    add_json_flag(p)
