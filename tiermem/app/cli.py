"""The `tiermem` command: a thin layer over the public API (`tiermem.app.api.Memory`).

Each group of subcommands has a module with a `register` function
(`tiermem/app/commands/*.py`, and the scheduler, MCP server, demo and
benchmarks); every handler parses its arguments, makes one `Memory` call and
renders the result.

Errors become one line and an exit code here, at the edge, and nowhere else:
2 for a usage problem (bad arguments, bad config, a refused record or query),
1 for a failure (a missing file, a data root that does not exist or cannot be
written, a full disk, anything unexpected), 3 for a partial result (`ingest`
with rejected records). No input, argument, file or environment state prints
a traceback (`--traceback` shows one, for bug reports).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from tiermem import __version__
from tiermem.app.api import Memory
from tiermem.errors import DataRootNotFoundError, TiermemError, os_reason
from tiermem.settings import Settings, resolve_settings

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


# Commands that only read or derive from memory already there: pointed at a data
# root that does not exist, they say so instead of showing an empty memory (or
# "forgetting" nothing). The others create the data root. A set of actions
# limits the rule to those actions of the command.
NEEDS_EXISTING_DATA: dict[str, frozenset[str] | None] = {
    "sql": None,
    "seal": None,
    "compress": None,
    "review": None,
    "evolve": None,
    "proposals": None,
    "export": None,
    "forget": None,
    "context": None,
    "recall": None,
    "rebuild": None,
    "facts": frozenset({"list", "get"}),
    "identity": frozenset({"show"}),
    "keys": frozenset({"list", "revoke"}),
}


# Commands that serve requests for as long as they run: their reads never wait for the
# projector (the `runtime.catch_up` setting, "background" by default). Every other command
# answers once and exits, so it catches up with the whole log before its first read: a
# complete answer is worth the wait there, and no request queues behind it.
SERVING_COMMANDS = frozenset({"serve", "mcp"})


def command_settings(command: str, settings: Settings) -> Settings:
    """The settings a command's `Memory` runs with: one-shot commands catch up inline."""
    if command in SERVING_COMMANDS or settings.runtime.catch_up == "inline":
        return settings
    return dataclasses.replace(settings, runtime=dataclasses.replace(settings.runtime, catch_up="inline"))


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors as one line (and exit 2) instead of usage text."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="tiermem",
        description="Tiered, event-sourced memory for LLM agents.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tiermem {__version__}")
    parser.add_argument("--data-dir", help="data root (default: $TIERMEM_DATA_DIR or ./data)")
    parser.add_argument("--config", help="TOML settings file (default: <data-dir>/tiermem.toml)")
    parser.add_argument("--traceback", action="store_true", help=argparse.SUPPRESS)
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


def add_engine_flag(parser: argparse.ArgumentParser) -> None:
    """`--engine local|ray` for a batch job (default: the `batch.engine` setting)."""
    parser.add_argument(
        "--engine",
        choices=("local", "ray"),
        help="where the partitions run: this process, or Ray (batch.ray_address; default: batch.engine)",
    )


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


def one_line(exc: BaseException) -> str:
    """An error as one line: its message, or what an OS error means and on which file."""
    if isinstance(exc, OSError) and not isinstance(exc, TiermemError):
        reason = os_reason(exc)
        where = exc.filename if exc.filename is not None else None
        text = f"{where}: {reason}" if where is not None else reason
    elif isinstance(exc, TiermemError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return " ".join(text.split()) or type(exc).__name__


def check_data_root(args: argparse.Namespace, settings: Settings) -> None:
    """Read-only commands need an existing data root; a file in its place is an error for all."""
    root = settings.data_dir
    if root.exists() and not root.is_dir():
        raise DataRootNotFoundError(f"data root {root} is a file, not a directory")
    actions = NEEDS_EXISTING_DATA.get(args.command, frozenset())
    needs = actions is None or getattr(args, "action", None) in actions
    if needs and not root.exists():
        raise DataRootNotFoundError(
            f"data root {root} does not exist (nothing to read; check --data-dir or TIERMEM_DATA_DIR)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    name = f"tiermem {args.command}"
    try:
        settings = command_settings(
            args.command, resolve_settings(data_dir=args.data_dir, config_file=args.config)
        )
        check_data_root(args, settings)
        # The label names this command in a job lock, for whoever that lock refuses.
        with Memory(settings, label=f"tiermem {args.command}") as memory:
            code: int = args.handler(args, memory)
        return code
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the edge: whatever it is, one line and an exit code
        if args.traceback:
            raise
        code = exc.exit_code if isinstance(exc, TiermemError) else 1
        prefix = "" if isinstance(exc, TiermemError | OSError | sqlite3.Error) else "unexpected "
        print(f"{name}: {prefix}error: {one_line(exc)}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
