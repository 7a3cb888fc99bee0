"""CLI for ingest: `tiermem ingest FILE|-` and `tiermem append` (thin wrappers over `Memory.ingest`, `Memory.append`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_json_flag, command
from tiermem.errors import ValidationError
from tiermem.output import emit_json
from tiermem.settings import FSYNC_POLICIES, LimitSettings


def _ingest(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.ingest(
        args.file, progress=None if not args.json else False, fsync=args.fsync, workers=args.workers
    )
    if args.json:
        emit_json(dataclasses.asdict(info))
    else:
        print(
            f"ingested {info.source}: {info.accepted:,} accepted, {info.duplicates:,} duplicate(s) skipped, "
            f"{info.rejected:,} rejected in {info.elapsed_s:.2f}s ({info.rate_per_s:,.0f} records/s, fsync={info.fsync})"
        )
        if info.rejected:
            fields = ", ".join(f"{f} ({n})" for f, n in info.reject_fields.items())
            print(f"rejected by field: {fields}")
            print(f"rejected records kept with their reasons in {info.rejects_path}")
    return info.exit_code


FLAG_FIELDS = {
    "agent": "agent_id",
    "agent_type": "agent_type",
    "user": "user",
    "message": "user_message",
    "response": "agent_response",
    "model": "model",
    "channel": "channel",
    "session": "session_id",
    "project": "project_id",
    "task": "task_id",
    "level": "memory_level",
    "selection_reason": "selection_reason",
    "approval_status": "approval_status",
    "event_id": "event_id",
    "ts": "ts",
}


def record_from_args(args: argparse.Namespace, limits: LimitSettings) -> dict[str, Any]:
    """One interaction from flags; JSON on stdin when no --message/--response is given."""
    if args.message is None and args.response is None:
        from tiermem.ingest.lines import decode_line

        # Read at most one byte past the limit: a huge input is refused, not held.
        raw = sys.stdin.buffer.read(limits.max_record_bytes + 1).strip()
        if not raw:
            raise ValidationError(
                "<stdin>", "no record: give --message/--response or one JSON object on stdin"
            )
        return decode_line(raw, limits)
    record: dict[str, Any] = {"type": "interaction"}
    for flag, name in FLAG_FIELDS.items():
        value = getattr(args, flag)
        if value is not None:
            record[name] = value
    record.setdefault("user_message", "")
    record.setdefault("agent_response", "")
    usage = {
        k: getattr(args, k)
        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "tool_calls")
        if getattr(args, k) is not None
    }
    if usage:
        record["usage"] = usage
    if args.tools is not None:
        record["tools_used"] = [t for t in args.tools.split(",") if t]
    if args.latency_ms is not None:
        record["latency_ms"] = args.latency_ms
    return record


def _append(args: argparse.Namespace, memory: Memory) -> int:
    result = memory.append(record_from_args(args, memory.settings.limits))
    if args.json:
        emit_json(dataclasses.asdict(result))
    elif result.duplicate:
        print(f"{result.event_id}: already in the log (duplicate, not appended)")
    else:
        print(f"appended {result.event_id} to {result.segment} line {result.line}")
    return 0


def register(sub: Any) -> None:
    p = command(
        sub,
        "ingest",
        _ingest,
        "bulk-load a JSONL file of turns (exit 0: all accepted; 3: some rejected and kept in _rejects/)",
        "  tiermem ingest turns.jsonl\n  cat turns.jsonl | tiermem ingest - --json\n"
        "  tiermem ingest replayable.jsonl --fsync none   # fastest; re-run it after a crash\n",
    )
    p.add_argument("file", help="JSONL file, or '-' for stdin")
    p.add_argument("--fsync", choices=FSYNC_POLICIES, help="durability for this load (default: settings)")
    p.add_argument(
        "--workers",
        type=int,
        help="encoding processes (default: one per core, up to 4; 0: all in one process)",
    )
    add_json_flag(p)
    p = command(
        sub,
        "append",
        _append,
        "append one turn from flags (or one JSON object on stdin)",
        '  tiermem append --agent support-bot --user alice --message "hi" --response "hello" --model claude-sonnet-4-5\n'
        '  echo \'{"type":"interaction","agent_id":"a","user_message":"q","agent_response":"r"}\' | tiermem append\n',
    )
    for flag in FLAG_FIELDS:
        p.add_argument("--" + flag.replace("_", "-"), dest=flag)
    for flag in ("input_tokens", "output_tokens", "cache_read_tokens", "tool_calls"):
        p.add_argument("--" + flag.replace("_", "-"), dest=flag, type=int)
    p.add_argument("--tools", help="comma-separated tools used")
    p.add_argument("--latency-ms", dest="latency_ms", type=float)
    add_json_flag(p)
