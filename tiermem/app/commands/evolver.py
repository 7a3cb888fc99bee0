"""CLI: `evolve`, `proposals list|show|approve|reject`, `export`, `forget` (thin wrappers over `Memory`)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from tiermem.app.api import Memory
from tiermem.app.cli import add_engine_flag, add_json_flag, command
from tiermem.output import emit_json, format_table

EVOLVE_EXAMPLES = """  tiermem evolve                 # decide every undecided proposal, then promote and archive
  tiermem evolve --agent support-bot --json
"""
PROPOSALS_EXAMPLES = """  tiermem proposals list                       # what waits for a person
  tiermem proposals list --status all --agent support-bot
  tiermem proposals show 01JD...               # source turns, and the diff if approved
  tiermem proposals approve 01JD...
  tiermem proposals reject 01JD... --reason "not true"
"""
EXPORT_EXAMPLES = """  tiermem export --user alice --format md --out alice.md
  tiermem export --agent support-bot > support-bot.json
"""
FORGET_EXAMPLES = """  tiermem forget --user alice --json     # everything about alice, now from views, at next seal from files
  tiermem forget --event 01JD...          # one turn and everything derived from it
  tiermem forget --agent old-bot
  tiermem forget --user alice --now       # also rewrite sealed Parquet now
"""


def _evolve(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.evolve(args.agent, progress=False if args.json else None, engine=args.engine)
    if args.json:
        emit_json(dataclasses.asdict(info))
        return 0
    print(
        f"evolved {info.decided} proposal(s) ({info.path} merge) in {info.elapsed_s:.2f}s: "
        f"{info.created} created, {info.touched} touched, {info.merged} merged, {info.superseded} superseded, "
        f"{info.corrected} corrected, {info.pending} pending review; {info.promoted} promoted, "
        f"{info.archived} archived. Facts: {info.active_facts} active, {info.inactive_facts} inactive, "
        f"{info.archived_facts} archived."
    )
    return 0


def _proposals(args: argparse.Namespace, memory: Memory) -> int:
    if args.action == "list":
        rows = memory.proposals(status=args.status, agent=args.agent)
        if args.json:
            emit_json(rows)
            return 0
        if not rows:
            print(f"no {args.status} proposals")
            return 0
        print(
            format_table(
                ["proposal_id", "agent", "status", "conf", "origin", "content"],
                [
                    (r["proposal_id"], r["agent_id"], r["status"], r["confidence"], r["origin"], r["content"])
                    for r in rows
                ],
            )
        )
        return 0
    if not args.proposal_id:
        print(f"tiermem proposals {args.action}: a PROPOSAL_ID is needed", file=sys.stderr)
        return 2
    if args.action == "show":
        shown = memory.proposal(args.proposal_id)
        if args.json:
            emit_json(shown)
        else:
            _print_show(shown)
        return 0
    if args.action == "approve":
        result = memory.approve(args.proposal_id, by=args.by)
    else:
        result = memory.reject(args.proposal_id, by=args.by, reason=args.reason)
    if args.json:
        emit_json(result)
    else:
        print(f"{args.proposal_id}: {result['action']} (decided by {result['decided_by']})")
    return 0


def _print_show(shown: dict[str, Any]) -> None:
    p = shown["proposal"]
    print(
        f"proposal {p['proposal_id']} [{shown['status']}] agent {p['agent_id']}, origin {p['origin']}, "
        f"confidence {p['confidence']}, importance {p['importance']}"
    )
    print(f"  {p['content']}")
    print("\nprovenance:")
    turns = shown["provenance"]["source_turns"]
    if not turns:
        print("  (no source turns in the log)")
    for t in turns:
        print(f"  {t['event_id']} {t['ts']} user {t['user'] or '-'}:")
        print(f"    > {t['user_message']}")
        print(f"    < {t['agent_response']}")
    for e in shown["provenance"]["evidence"]:
        print(f'  evidence ({e["event_id"] or "-"}): "{e["text"]}"')
    outcome = shown["if_approved"]
    print(
        f"\nif approved: {outcome['action']}"
        + (f" (similarity {outcome['similarity']:.2f})" if outcome["similarity"] else "")
    )
    for c in outcome["changes"]:
        print(f"  {c['fact_id']}: {c['decision']} -> {c['status']}: {c['content']}")
        if c.get("note"):
            print(f"    note: {c['note']}")
        if c.get("diff"):
            print("    " + c["diff"].replace("\n", "\n    "))


def _export(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.export(agent=args.agent, user=args.user, format=args.format, out=args.out, save=args.save)
    if info.out:
        print(f"exported {info.items} item(s) about {info.target_kind} {info.target} to {info.out}")
    else:
        sys.stdout.write(info.text)
    return 0


def _forget(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.forget(agent=args.agent, user=args.user, event=args.event, reason=args.reason, now=args.now)
    if args.json:
        emit_json(dataclasses.asdict(info))
        return 0
    print(
        f"erased {info.erased_events} event(s) about {info.target_kind} {info.target} "
        f"(erasure {info.erasure_event_id}); hot store {'updated' if info.projected else 'not installed'}; "
        f"{info.reports_regenerated} report(s) and {info.exports_regenerated} export(s) regenerated, "
        f"{info.reports_removed + info.exports_removed} removed; "
        + (
            "every file under the data root is rewritten now."
            if info.now
            else f"{info.cold_files_pending} sealed file(s) are rewritten at the next `tiermem seal` (or use --now)."
        )
    )
    return 0


def register(sub: Any) -> None:
    p = command(
        sub,
        "evolve",
        _evolve,
        "turn knowledge proposals into decisions (dedup, merge, correct, promote, archive)",
        EVOLVE_EXAMPLES,
    )
    p.add_argument("--agent", help="only this agent's proposals and facts")
    add_engine_flag(p)
    add_json_flag(p)

    p = command(
        sub,
        "proposals",
        _proposals,
        "the review queue: list, show, approve or reject proposals",
        PROPOSALS_EXAMPLES,
    )
    p.add_argument("action", choices=("list", "show", "approve", "reject"))
    p.add_argument("proposal_id", nargs="?", help="for show/approve/reject")
    p.add_argument("--agent", help="list: only this agent")
    p.add_argument(
        "--status",
        default="pending",
        choices=("pending", "new", "applied", "approved", "rejected", "all"),
        help="list: pending (default), new, applied, approved, rejected, all",
    )
    p.add_argument("--by", default="user", help="who decides (recorded in the decision)")
    p.add_argument("--reason", help="reject: why")
    add_json_flag(p)

    p = command(
        sub,
        "export",
        _export,
        "export everything held about an agent or a user, with sources",
        EXPORT_EXAMPLES,
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--agent")
    target.add_argument("--user")
    p.add_argument("--format", choices=("json", "md"), default="json")
    p.add_argument("--out", help="write to this file instead of stdout")
    p.add_argument(
        "--save", action="store_true", help="keep it under <data>/exports/ (forget scrubs saved exports too)"
    )

    p = command(
        sub,
        "forget",
        _forget,
        "erase an agent, a user or one event from every view, and from files at the next seal",
        FORGET_EXAMPLES,
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--agent")
    target.add_argument("--user")
    target.add_argument("--event")
    p.add_argument("--reason")
    p.add_argument(
        "--now",
        action="store_true",
        help="rewrite sealed Parquet files now too, not at the next seal",
    )
    add_json_flag(p)
