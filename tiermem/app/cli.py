"""The `tiermem` command: a thin layer over the public API (`tiermem.app.api.Memory`).

Each group of subcommands has a module with a `register` function
(`tiermem/app/commands/*.py`, and the scheduler, MCP server, demo and
benchmarks); every handler parses its arguments, makes one `Memory` call and
renders the result. Library errors (tiermem.errors) become one-line messages
and exit codes here, at the edge, and nowhere else.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tiermem import __version__
from tiermem.app.api import Memory
from tiermem.errors import TiermemError
from tiermem.settings import resolve_settings

# Modules whose `register(subparsers)` adds commands, in --help order.
COMMAND_MODULES = (
    "tiermem.app.commands.ingest",
    "tiermem.app.commands.log",
    "tiermem.app.commands.compressor",
    "tiermem.app.commands.reviewer",
    "tiermem.app.commands.evolver",
    "tiermem.app.commands.runtime",
    "tiermem.app.mcp_server",
    "tiermem.app.commands.serve",
    "tiermem.app.scheduler",
    "tiermem.app.demo",
    "tiermem.app.benchmarks",
)

Handler = Callable[[argparse.Namespace, Memory], int]

EPILOG = """examples:
  tiermem demo                                  # the whole pipeline on a generated sample
  tiermem ingest turns.jsonl --json             # bulk-load a JSONL file of turns
  tiermem sql "SELECT agent_id, count(*) FROM interactions GROUP BY 1"
  tiermem compress --json                       # derive episodes for every due agent
  tiermem context support-bot --user alice --query "refund status"
  tiermem recall support-bot "the outage last week" --participant alice
  tiermem serve                                 # HTTP API and memory panel on 127.0.0.1:8765

data root: --data-dir, else $TIERMEM_DATA_DIR, else ./data
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tiermem",
        description="Tiered, event-sourced memory for LLM agents.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tiermem {__version__}")
    parser.add_argument("--data-dir", help="data root (default: $TIERMEM_DATA_DIR or ./data)")
    parser.add_argument("--config", help="TOML settings file (default: <data-dir>/tiermem.toml)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that part has no commands yet
                continue
            raise
        module.register(sub)
    return parser


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON on stdout")


def command(sub: Any, name: str, handler: Handler, help: str, examples: str = "") -> argparse.ArgumentParser:
    """Add a subcommand whose --help shows examples; `handler(args, memory) -> exit code`."""
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=help,
        epilog=("examples:\n" + examples) if examples else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(handler=handler)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        settings = resolve_settings(data_dir=args.data_dir, config_file=args.config)
        # The label names this command in a job lock, for whoever that lock refuses.
        with Memory(settings, label=f"tiermem {args.command}") as memory:
            code: int = args.handler(args, memory)
        return code
    except TiermemError as exc:
        print(f"tiermem {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"tiermem {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
