"""CLI for the runtime: context, recall, facts, identity, rebuild, chat.

Each command first runs the projector, so it serves what the log holds now,
then calls one library function and prints JSON (`--json`) or text.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from tiermem.app.cli import add_json_flag, command
from tiermem.errors import NotFoundError
from tiermem.output import emit_json, format_table
from tiermem.settings import Settings


def _memory(args: argparse.Namespace, settings: Settings, **extra: Any) -> Any:
    from tiermem.app.sessions import handle_session_end
    from tiermem.runtime.memory import open_memory
    from tiermem.runtime.projector import project

    project(settings)
    return open_memory(
        settings,
        args.agent,
        agent_type=getattr(args, "agent_type", None),
        project_id=getattr(args, "project", None),
        on_session_end=handle_session_end,
        **extra,
    )


def _scope_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent-type", help="the agent's type (reads the agent_type scope)")
    p.add_argument("--project", help="the agent's project (reads the project scope)")


# ---------------------------------------------------------------- context / recall


def _context(args: argparse.Namespace, settings: Settings) -> int:
    from tiermem.runtime.context import assemble_context

    with _memory(args, settings) as memory:
        ctx = assemble_context(memory, user=args.user, level=args.level, query=args.query, budget=args.budget)
    if args.json:
        emit_json(ctx.to_json())
        return 0
    for s in ctx.sections:
        print(f"── {s.name} ({s.tokens} tokens, {len(s.item_ids)} item(s))")
        print(s.text)
        print()
    print(
        f"level {ctx.level}, {ctx.total_tokens} of {ctx.cap} tokens"
        + (f", dropped {len(ctx.dropped)}" if ctx.dropped else "")
    )
    return 0


def _recall(args: argparse.Namespace, settings: Settings) -> int:
    import orjson

    from tiermem.runtime.episode_search import search_episodes
    from tiermem.tokens import count_tokens

    keys = (
        "episode_id",
        "name",
        "summary",
        "key_quotes",
        "participants",
        "start_ts",
        "end_ts",
        "importance",
        "score",
    )
    with _memory(args, settings) as memory:
        found = search_episodes(memory.conn, memory.agent_id, args.query, args.participant, args.limit)
        results = [
            {**{k: e.get(k) for k in keys}, "emotional_context": e.get("emotional_context")} for e in found
        ]
        if found:
            memory.record_retrieval(
                "cli_recall",
                args.query,
                [e["episode_id"] for e in found],
                [float(e["score"]) for e in found],
                count_tokens(orjson.dumps(results).decode()),
                reason="tiermem recall",
                participant=args.participant,
            )
    if args.json:
        emit_json({"results": results})
        return 0
    if not results:
        print("no matching episodes")
    for r in results:
        print(
            f"{r['name']}  [{r['episode_id']}]  {str(r['start_ts'])[:10]}  importance {r['importance']}  score {r['score']:.3f}"
        )
        print(f"  {r['summary']}")
        for q in (r["key_quotes"] or [])[:3]:
            print(f'  "{q.get("text", "") if isinstance(q, dict) else q}"')
    return 0


# ---------------------------------------------------------------- facts


_FACT_ID_PREFIXES = ("fact:", "kv:")


def _revise_fact(args: argparse.Namespace, settings: Settings) -> int:
    """`facts edit|remove AGENT FACT_ID`: an operator's revision, recorded with who and why."""
    from tiermem.evolver.revise import edit_fact, remove_fact

    if args.action == "edit":
        if args.value is None:
            raise NotFoundError("tiermem facts edit needs FACT_ID CONTENT")
        out = edit_fact(settings, args.agent, args.key, args.value, by=args.by, reason=args.reason)
    else:
        out = remove_fact(settings, args.agent, args.key, by=args.by, reason=args.reason)
    if args.json:
        emit_json(out)
    else:
        print(
            f"{out['action']} {out['fact_id']} (by {out['decided_by']}): {out['before']!r} -> {out['after']!r}"
        )
    return 0


def _facts(args: argparse.Namespace, settings: Settings) -> int:
    from tiermem.runtime.scopes import list_facts

    if args.action == "edit" or (args.action == "remove" and (args.key or "").startswith(_FACT_ID_PREFIXES)):
        if not (args.key or "").startswith(_FACT_ID_PREFIXES):
            raise NotFoundError("tiermem facts edit needs a fact id (fact:... or kv:..., see `facts list`)")
        return _revise_fact(args, settings)
    with _memory(args, settings) as memory:
        if args.action == "list":
            rows = list_facts(memory.conn, memory.scope, limit=args.limit)
            facts = [
                {
                    k: r[k]
                    for k in (
                        "fact_id",
                        "kind",
                        "scope",
                        "key",
                        "content",
                        "category",
                        "topic",
                        "source",
                        "updated_at",
                        "recall_count",
                    )
                }
                for r in rows
            ]
            if args.json:
                emit_json({"facts": facts})
            else:
                print(
                    format_table(
                        ["fact_id", "scope", "key", "content", "recalls"],
                        [
                            [f["fact_id"], f["scope"], f["key"] or "", f["content"], f["recall_count"]]
                            for f in facts
                        ],
                    )
                )
            return 0
        if not args.key:
            raise NotFoundError(f"tiermem facts {args.action} needs KEY")
        if args.action == "get":
            row = memory.get_fact(args.key)
            if row is None:
                raise NotFoundError(f"no fact {args.key!r} visible to agent {args.agent!r}")
            out = {
                "fact_id": row["fact_id"],
                "key": row["key"],
                "value": row["content"],
                "scope": row["scope"],
            }
            if args.json:
                emit_json(out)
            else:
                print(out["value"])
            return 0
        if args.action == "set":
            if args.value is None:
                raise NotFoundError("tiermem facts set needs KEY VALUE")
            fact_id = memory.store_fact(args.key, args.value, args.scope, source="user")
            out = {"fact_id": fact_id, "key": args.key, "value": args.value, "scope": args.scope or "agent"}
        else:
            fact_id = memory.remove_fact(args.key, args.scope, reason="removed by the user")
            out = {"fact_id": fact_id, "key": args.key, "removed": True}
    if args.json:
        emit_json(out)
    else:
        print(f"{args.action} {out['fact_id']}")
    return 0


# ---------------------------------------------------------------- identity


def _identity(args: argparse.Namespace, settings: Settings) -> int:
    with _memory(args, settings) as memory:
        if args.action == "set":
            content = sys.stdin.read().strip() if args.content in (None, "-") else args.content
            memory.set_identity(content, source="user")
        content = memory.identity()
    limit = settings.runtime.identity_max_chars
    if args.json:
        emit_json({"agent_id": args.agent, "content": content, "chars": len(content), "limit": limit})
    else:
        print(content or "(no identity set)")
        print(f"\n({len(content):,} of {limit:,} characters, {100 * len(content) // limit}% used)")
    return 0


# ---------------------------------------------------------------- rebuild


def _rebuild(args: argparse.Namespace, settings: Settings) -> int:
    from tiermem.runtime.projector import rebuild

    info = rebuild(settings)
    if args.json:
        emit_json(dataclasses.asdict(info))
    else:
        counts = ", ".join(f"{k} {v:,}" for k, v in info.counts.items() if v)
        print(
            f"rebuilt the hot store from the log in {info.seconds:.2f}s: {info.applied:,} event(s) applied, {info.refused:,} refused by erasures"
        )
        print(f"rows: {counts or 'none'}")
        print(f"digest: {info.digest}")
    return 0


# ---------------------------------------------------------------- chat


def _chat(args: argparse.Namespace, settings: Settings) -> int:
    from tiermem.ids import new_event_id
    from tiermem.runtime.memory import end_session
    from tiermem.runtime.turnloop import run_turn

    if not settings.claude_available:
        print(
            "tiermem chat: needs an Anthropic API key. Set ANTHROPIC_API_KEY (or anthropic_api_key in "
            "<data-dir>/tiermem.toml) and run again. Offline, use `tiermem context` and `tiermem recall`.",
            file=sys.stderr,
        )
        return 2
    session = args.session or "chat-" + new_event_id()
    with _memory(args, settings, user=args.user, session_id=session) as memory:
        print(
            f"chatting with {args.agent} as {args.user} (session {session}); Ctrl-D to end", file=sys.stderr
        )
        try:
            while True:
                try:
                    line = input("> ")
                except EOFError:
                    break
                if not line.strip():
                    continue
                result = run_turn(memory, line, model=args.model)
                print(result.text)
                if result.tools_used:
                    print(f"  (memory tools: {', '.join(result.tools_used)})", file=sys.stderr)
        finally:
            end_session(memory, reason="chat ended")
    return 0


def register(sub: Any) -> None:
    p = command(
        sub,
        "context",
        _context,
        "show the prompt context an agent would get now (sections in prompt order, with token counts)",
        "  tiermem context support-bot --user alice --query 'refund status'\n"
        "  tiermem context orchestrator --level project --budget 1500 --json\n",
    )
    p.add_argument("agent")
    p.add_argument("--user", help="the participant (relationship and their facts first)")
    p.add_argument("--level", choices=["global", "project", "task"], help="memory level (default: current)")
    p.add_argument("--query", help="the user's message: adds the <memory-context> retrieval")
    p.add_argument(
        "--budget", type=int, help="overall token cap (default: settings.runtime.total_budget_tokens)"
    )
    _scope_flags(p)
    add_json_flag(p)

    p = command(
        sub,
        "recall",
        _recall,
        "search an agent's episodic memory (what recall_memory returns)",
        "  tiermem recall support-bot 'the outage last week' --participant alice --json\n",
    )
    p.add_argument("agent")
    p.add_argument("query")
    p.add_argument("--participant", help="only episodes with this person")
    p.add_argument("--limit", type=int, default=3)
    add_json_flag(p)

    p = command(
        sub,
        "facts",
        _facts,
        "list, get, set or remove an agent's key-value facts (scope-resolved); edit or remove any fact by id",
        "  tiermem facts list support-bot\n"
        "  tiermem facts set support-bot deploy_branch main --scope project --project web\n"
        "  tiermem facts get support-bot deploy_branch --project web --json\n"
        "  tiermem facts remove support-bot deploy_branch --scope project --project web\n"
        "  tiermem facts edit support-bot fact:01JD... 'alice moved to Osaka in October 2026' --by dana\n"
        "  tiermem facts remove support-bot fact:01JD... --by dana --reason 'not true'\n",
    )
    p.add_argument("action", choices=["list", "get", "set", "remove", "edit"])
    p.add_argument("agent")
    p.add_argument("key", nargs="?")
    p.add_argument("value", nargs="?")
    p.add_argument("--scope", choices=["agent", "system", "agent_type", "project", "override"])
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--by", default="user", help="edit/remove by id: who makes the change (recorded)")
    p.add_argument("--reason", help="edit/remove by id: why (recorded)")
    _scope_flags(p)
    add_json_flag(p)

    p = command(
        sub,
        "identity",
        _identity,
        "show or set an agent's L0 identity (at most 1,000 characters)",
        "  tiermem identity show support-bot\n  echo 'I am a patient support agent.' | tiermem identity set support-bot -\n",
    )
    p.add_argument("action", choices=["show", "set"])
    p.add_argument("agent")
    p.add_argument("content", nargs="?", help="the new identity text, or - to read stdin")
    add_json_flag(p)

    p = command(
        sub,
        "rebuild",
        _rebuild,
        "delete the hot store and rebuild it from the log (same log, same content digest)",
        "  tiermem rebuild --json\n",
    )
    add_json_flag(p)

    p = command(
        sub,
        "chat",
        _chat,
        "talk to an agent through Claude with its memory tools (needs ANTHROPIC_API_KEY)",
        "  ANTHROPIC_API_KEY=... tiermem chat --agent support-bot --user alice\n",
    )
    p.add_argument("--agent", required=True)
    p.add_argument("--user", default="user")
    p.add_argument("--session", help="session id (default: a new one)")
    p.add_argument("--model", help="Claude model (default: settings.anthropic_model)")
    _scope_flags(p)
