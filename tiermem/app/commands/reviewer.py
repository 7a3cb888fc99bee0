"""CLI: `tiermem review` (a thin wrapper over `Memory.review`)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_engine_flag, add_json_flag, command
from tiermem.output import emit_json

EXAMPLES = """  tiermem review                              # every day and agent in the log
  tiermem review --day 2026-11-20 --agent support-bot
  tiermem review --json | jq .enrichment_coverage   # catch "0% enriched" in CI
"""


def _review(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.review(day=args.day, agent=args.agent, engine=args.engine)
    if args.json:
        out = dataclasses.asdict(info)
        if not args.files:
            out.pop("files", None)
        emit_json(out)
        return 0
    if not info.reports:
        print(
            "no interactions to review"
            + (f" for {args.day}" if args.day else "")
            + (f" of {args.agent}" if args.agent else "")
        )
        return 0
    print(
        f"reviewed {info.interactions} interactions: {info.reports} report(s) under {memory.settings.reports_dir / 'review'} ({info.path})"
    )
    missing = {k: v for k, v in info.enrichment_coverage.items() if v < 1.0}
    print(
        f"fully enriched: {info.fully_enriched_fraction:.0%}"
        + ("; not always set: " + ", ".join(f"{k} {v:.0%}" for k, v in missing.items()) if missing else "")
    )
    print(
        f"tokens: {info.tokens.get('input', 0)} in / {info.tokens.get('output', 0)} out; est. cost ${info.cost_usd:.4f}"
    )
    print("flags: " + ", ".join(f"{k} {v}" for k, v in info.flags.items()))
    return 0


def register(sub: Any) -> None:
    p = command(
        sub,
        "review",
        _review,
        "quality reports per day and agent (enrichment coverage, cost, flags)",
        EXAMPLES,
    )
    p.add_argument("--day", help="YYYY-MM-DD (default: every day)")
    p.add_argument("--agent", help="only this agent")
    add_engine_flag(p)
    p.add_argument("--files", action="store_true", help="with --json: list the files written")
    add_json_flag(p)
