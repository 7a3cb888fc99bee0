"""CLI for the runtime: context, recall, facts, identity, rebuild, chat (thin wrappers over `Memory`).

Each command opens the agent through `Memory.agent`, which first brings the hot
store up to date with the log, so it serves what the log holds now; then it
makes one call and prints JSON (`--json`) or text.

Reads are made for one user (`--user`; for `recall`, `--participant` too):
without one, only the agent-level and wider memory is shown, never every
user's (see docs/visibility.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from tiermem.app.api import AgentMemory, Memory
from tiermem.app.cli import add_json_flag, command
from tiermem.errors import NotFoundError, ValidationError
from tiermem.output import emit_json, format_table


def _agent(args: argparse.Namespace, memory: Memory, **extra: Any) -> AgentMemory:
    return memory.agent(
        args.agent,
        agent_type=getattr(args, "agent_type", None),
        project_id=getattr(args, "project", None),
        **extra,
    )


def _scope_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent-type", help="the agent's type (reads the agent_type scope)")
    p.add_argument("--project", help="the agent's project (reads the project scope)")


# ---------------------------------------------------------------- context / recall


def _context(args: argparse.Namespace, memory: Memory) -> int:
    with _agent(args, memory) as agent:
        ctx = agent.context(user=args.user, query=args.query, level=args.level, budget=args.budget)
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


def _recall(args: argparse.Namespace, memory: Memory) -> int:
    with _agent(args, memory) as agent:
        found = agent.recall(
            args.query, args.participant, user=args.user, limit=args.limit, reason="tiermem recall"
        )
    if args.json:
        emit_json(found.to_json())
        return 0
    if not found:
        print("no matching episodes")
    for e in found.episodes:
        print(
            f"{e.name}  [{e.episode_id}]  {str(e.start_ts)[:10]}  importance {e.importance}  score {e.score:.3f}"
        )
        print(f"  {e.summary}")
        for q in e.quotes[:3]:
            print(f'  "{q}"')
    return 0


# ---------------------------------------------------------------- facts


_FACT_ID_PREFIXES = ("fact:", "kv:")


def _revise_fact(args: argparse.Namespace, memory: Memory) -> int:
    """`facts edit|remove AGENT FACT_ID`: an operator's revision, recorded with who and why."""
    if args.action == "edit":
        if args.value is None:
            raise ValidationError("CONTENT", "tiermem facts edit needs FACT_ID CONTENT")
        out = memory.edit_fact(args.agent, args.key, args.value, by=args.by, reason=args.reason)
    else:
        out = memory.remove_fact(args.agent, args.key, by=args.by, reason=args.reason)
    if args.json:
        emit_json(out)
    else:
        print(
            f"{out['action']} {out['fact_id']} (by {out['decided_by']}): {out['before']!r} -> {out['after']!r}"
        )
    return 0


def _facts(args: argparse.Namespace, memory: Memory) -> int:
    by_id = (args.key or "").startswith(_FACT_ID_PREFIXES)
    if args.action == "edit" and not by_id:
        raise ValidationError(
            "FACT_ID", "tiermem facts edit needs a fact id (fact:... or kv:..., see `facts list`)"
        )
    if by_id and args.action in ("edit", "remove"):
        return _revise_fact(args, memory)
    with _agent(args, memory, user=args.user) as agent:
        if args.action == "list":
            facts = agent.facts.list(limit=args.limit)
            if args.json:
                emit_json({"facts": [f.to_json() for f in facts]})
            else:
                print(
                    format_table(
                        ["fact_id", "scope", "key", "content", "recalls"],
                        [[f.fact_id, f.scope, f.key or "", f.content, f.recall_count] for f in facts],
                    )
                )
            return 0
        if not args.key:
            raise ValidationError("KEY", f"tiermem facts {args.action} needs a KEY")
        if args.action == "get":
            fact = agent.facts.get(args.key)
            if fact is None:
                raise NotFoundError(f"no fact {args.key!r} visible to agent {args.agent!r}")
            if args.json:
                emit_json(
                    {"fact_id": fact.fact_id, "key": fact.key, "value": fact.value, "scope": fact.scope}
                )
            else:
                print(fact.value)
            return 0
        if args.action == "set":
            if args.value is None:
                raise ValidationError("VALUE", "tiermem facts set needs KEY VALUE")
            done = agent.facts.set(args.key, args.value, args.scope)
        else:
            done = agent.facts.remove(args.key, args.scope, reason="removed by the user")
    if args.json:
        emit_json(done.to_json())
    else:
        print(f"{args.action} {done.fact_id}")
    return 0


# ---------------------------------------------------------------- identity


def _identity(args: argparse.Namespace, memory: Memory) -> int:
    with _agent(args, memory) as agent:
        if args.action == "set":
            content = sys.stdin.read().strip() if args.content in (None, "-") else args.content
            agent.set_identity(content)
        content = agent.identity
    limit = memory.settings.runtime.identity_max_chars
    if args.json:
        emit_json({"agent_id": args.agent, "content": content, "chars": len(content), "limit": limit})
    else:
        print(content or "(no identity set)")
        print(f"\n({len(content):,} of {limit:,} characters, {100 * len(content) // limit}% used)")
    return 0


# ---------------------------------------------------------------- rebuild


def _rebuild(args: argparse.Namespace, memory: Memory) -> int:
    info = memory.rebuild()
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


def _chat(args: argparse.Namespace, memory: Memory) -> int:
    from tiermem.ids import new_event_id

    if not memory.settings.llm_available:
        print(
            "tiermem chat: needs a model. Set ANTHROPIC_API_KEY (or anthropic_api_key in "
            '<data-dir>/tiermem.toml), or [llm] provider = "openai" with base_url and model for an '
            "OpenAI-compatible server, and run again. Offline, use `tiermem context` and `tiermem recall`.",
            file=sys.stderr,
        )
        return 2
    session = args.session or "chat-" + new_event_id()
    with _agent(args, memory, user=args.user, session_id=session) as agent:
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
                result = agent.chat(line, model=args.model)
                print(result.text)
                if result.tools_used:
                    print(f"  (memory tools: {', '.join(result.tools_used)})", file=sys.stderr)
        finally:
            agent.end_session(reason="chat ended")
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
    p.add_argument("--participant", help="only episodes with this person (read as that user)")
    p.add_argument("--user", help="read as this user (default: the participant; none: agent-level only)")
    p.add_argument("--limit", type=int, default=3)
    _scope_flags(p)
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
    p.add_argument("--user", help="the user the facts are about (none: agent-level and wider facts)")
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
        "talk to an agent through Claude or an OpenAI-compatible server with its memory tools",
        "  ANTHROPIC_API_KEY=... tiermem chat --agent support-bot --user alice\n",
    )
    p.add_argument("--agent", required=True)
    p.add_argument("--user", default="user")
    p.add_argument("--session", help="session id (default: a new one)")
    p.add_argument("--model", help="model name (default: llm.model, else anthropic_model)")
    _scope_flags(p)
