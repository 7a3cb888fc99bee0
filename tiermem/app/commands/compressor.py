"""`tiermem compress`: a thin wrapper over `Memory.compress`."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_engine_flag, add_json_flag, command
from tiermem.output import emit_json

EXAMPLES = """  tiermem compress                      # every agent with more than 15 pending interactions
  tiermem compress --agent support-bot  # one agent
  tiermem compress --json               # summary with counts, scorer and timing
"""


def _compress(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.compress(args.agent, progress=None if not args.json else False, engine=args.engine)
    if args.json:
        emit_json(dataclasses.asdict(info))
        return 0
    print(
        f"compressed {info.interactions_scored} interactions of {info.agents} agent(s) "
        f"with the {info.scorer} scorer in {info.elapsed_s:.2f}s: {info.episodes} episodes "
        f"({info.important} important), {info.proposals} knowledge proposals, "
        f"{info.relationships} relationship updates"
        + (f", {info.duplicates} already present" if info.duplicates else "")
    )
    if info.scorer == "claude":
        print(f"claude: {info.requests} requests, {info.input_tokens} in / {info.output_tokens} out tokens")
    return 0


def register(sub: Any) -> None:
    p = command(
        sub, "compress", _compress, "derive importance-scored episodes and knowledge proposals", EXAMPLES
    )
    p.add_argument("--agent", help="compress only this agent (default: every due agent)")
    add_engine_flag(p)
    add_json_flag(p)
