"""The demo's story: a few days in the life of two agents, told by the system itself.

Stage 1 of `tiermem demo` (tiermem/demo.py) fills the permanent log with a
generated background history that ends four days ago. This module then plays
a scripted story on the three days after it, through the runtime exactly as a
live agent would: for every turn the context is assembled (so the logged
usage is the real prompt size), the reply is recorded with `record_turn`, and
every session ends with `end_session`, whose hook (tiermem.app.sessions) gap-fills
the session and compresses the agent when it went over its limit — inline,
because no scheduler runs during the demo. Then the batch jobs a scheduler
would run (compress, evolve, review, project), and finally a new turn today:
what each tier of the assembled context holds and costs, and what
`recall_memory` brings back.

The replies are scripted (the demo must run offline and give the same story
every time); with ANTHROPIC_API_KEY set, the batch jobs take their Claude
paths (scoring, merging, judging) and the summary says so.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from tiermem.ids import derived_event_id, format_ts, utcnow
from tiermem.output import format_table
from tiermem.settings import Settings

Say = Callable[[str], None]
# A scheduler may be running one of the jobs on the same data root: wait for it rather than fail.
JOB_WAIT_SECONDS = 300.0


@dataclass(frozen=True)
class Turn:
    user_message: str
    agent_response: str
    tools_used: tuple[str, ...] = ()


@dataclass(frozen=True)
class Session:
    """One conversation: an agent, a participant, a channel, and its turns (two minutes apart)."""

    day: int  # 1..3: days after the background history
    hour: int
    agent_id: str
    agent_type: str
    project_id: str
    user: str
    channel: str
    headline: str
    turns: tuple[Turn, ...]


T = Turn
STORY: tuple[Session, ...] = (
    Session(
        1,
        9,
        "support-bot",
        "support",
        "acme-billing",
        "alice",
        "web-chat",
        "Alice finds a double charge, asks for email only, and mentions her move",
        (
            T(
                "Hi, my March invoice shows a double charge of $49.",
                "I'm sorry, Alice. I can see two $49 charges on your March invoice; I've opened refund ticket #4471.",
                ("create_ticket",),
            ),
            T(
                "How long does a refund usually take?",
                "Refunds reach your card in 5 to 7 business days. I'll write when it's processed.",
            ),
            T(
                "Please contact me by email, I prefer not to get phone calls.",
                "Noted: email only from now on.",
            ),
            T("Also, I moved to Osaka last month.", "Thanks, I've updated your billing address to Osaka."),
            T(
                "Can I get the March invoice as a PDF?",
                "Of course: the PDF of the March invoice is on its way to your inbox.",
            ),
            T("ok thanks", "You're welcome!"),
            T("Hello?", "Still here, Alice."),
            T("That's all for today.", "Have a good day, Alice."),
        ),
    ),
    Session(
        1,
        21,
        "nexus-npc",
        "rpg-npc",
        "nexus-campaign",
        "mira",
        "discord-tavern",
        "Mira arrives in the Nexus, lost, and asks the keeper to stay",
        (
            T("Hello.", "Hello."),
            T(
                "I can't quite remember how I got to the Nexus.",
                "You don't have to remember everything to be here. The Nexus doesn't seem to require it. But in my experience, the things people can't quite remember are usually the things they're not quite ready to look at yet.",
            ),
            T(
                "Tell me about the Lantern of Quiet.",
                "The Lantern of Quiet was last seen in the eastern archive. Few who went looking came back unchanged.",
            ),
            T(
                "I'm scared of the dark corridors here.",
                "Fear is sensible here. Walk beside me; I know these halls.",
            ),
            T(
                "Will you still be here when I wake up?",
                "I don't go anywhere. Sleep. The Nexus holds you while you do. I've never understood how — but it does. I'll be here.",
            ),
            T("Goodnight.", "Goodnight, Mira."),
        ),
    ),
    Session(
        2,
        10,
        "support-bot",
        "support",
        "acme-billing",
        "alice",
        "email",
        "Alice corrects the amount; the refund is approved",
        (
            T(
                "Actually the double charge was $59, not $49 — I checked my bank statement.",
                "Thank you for checking, Alice. I've corrected refund ticket #4471 to $59.",
            ),
            T("Any news on the refund?", "It's approved: $59 should be back on your card by Friday."),
            T(
                "My colleague Bob will contact you about moving us to the Team plan.",
                "Great, I'll look out for Bob's message about the Team plan.",
            ),
            T("thanks", "Anytime."),
            T(
                "Is the invoice address Osaka now?",
                "Yes, every invoice from now on goes to your Osaka address.",
            ),
            T("Perfect.", "Glad it's sorted."),
        ),
    ),
    Session(
        2,
        14,
        "support-bot",
        "support",
        "acme-billing",
        "bob",
        "web-chat",
        "Bob asks about the outage and the Team plan",
        (
            T(
                "Is the outage on Monday fixed?",
                "Yes, Monday's outage was a failed database failover; it was fixed within the hour.",
            ),
            T(
                "We'd like to move Alice's company to the Team plan.",
                "I can do that: the Team plan starts with your next billing cycle.",
            ),
            T("Do we keep our invoices history?", "Yes, all past invoices stay available after the switch."),
            T("ok", "Anything else, Bob?"),
            T("No, thanks.", "Have a good afternoon."),
        ),
    ),
    Session(
        2,
        22,
        "nexus-npc",
        "rpg-npc",
        "nexus-campaign",
        "mira",
        "discord-tavern",
        "Mira comes back with Tobin; the keeper remembers the fire",
        (
            T("You were still here. Thank you.", "I told you I would be. Did you sleep?"),
            T(
                "My character Tobin wants to trade with you.",
                "Tobin has an honest face. I'll trade, but not the map.",
            ),
            T(
                "Do you remember what happened in Valparaíso?",
                "I remember the fire in Valparaíso, and who carried the children out. It was you, Mira, though you don't remember it yet.",
            ),
            T("What? That was me?", "Some memories come back when they're ready. That one will."),
            T("Hello.", "Hello."),
            T("I'll rest now.", "Rest. I'll keep the lantern lit."),
        ),
    ),
    Session(
        3,
        11,
        "support-bot",
        "support",
        "acme-billing",
        "alice",
        "web-chat",
        "Alice checks in on Friday",
        (
            T(
                "It's Friday — did the refund arrive?",
                "Yes: the $59 refund for ticket #4471 was processed this morning.",
            ),
            T("Great, thank you!", "My pleasure, Alice."),
            T("Please close the ticket.", "Ticket #4471 is closed. I'll email you the confirmation."),
            T("Bye!", "Bye, Alice."),
        ),
    ),
    Session(
        3,
        20,
        "nexus-npc",
        "rpg-npc",
        "nexus-campaign",
        "mira",
        "discord-dm",
        "A quiet evening: Mira asks about the Ninth Key",
        (
            T(
                "Have you heard of the Ninth Key?",
                "The Ninth Key opens the door no one admits exists. I've heard it hums when someone lies near it.",
            ),
            T("Can we look for it together?", "Together. Not tonight — the archive shifts after dark."),
            T("Hello.", "Hello."),
            T("Tomorrow then.", "Tomorrow, Mira."),
        ),
    ),
)

# Today: who comes back, what they say, and what the agent might reach for.
TODAY: tuple[tuple[str, str, str, str, str, str], ...] = (
    # agent, agent_type, project, user, message, recall query
    (
        "support-bot",
        "support",
        "acme-billing",
        "alice",
        "Hi again! About that double charge — is everything settled?",
        "refund ticket 4471",
    ),
    (
        "nexus-npc",
        "rpg-npc",
        "nexus-campaign",
        "mira",
        "Do you remember what you told me the night I couldn't sleep?",
        "sleep wake here",
    ),
)


@dataclass
class StoryInfo:
    """What the story part of the demo did (the `--json` summary's `story` field)."""

    first_day: str = ""
    turns_recorded: int = 0
    sessions: list[dict[str, Any]] = field(default_factory=list)
    compress: dict[str, Any] = field(default_factory=dict)
    evolve: dict[str, Any] = field(default_factory=dict)
    review: dict[str, Any] = field(default_factory=dict)
    project: dict[str, Any] = field(default_factory=dict)
    queries: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    contexts: list[dict[str, Any]] = field(default_factory=list)
    recalls: list[dict[str, Any]] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)  # Claude's answers (the Claude path only)
    paths: dict[str, str] = field(default_factory=dict)  # job -> offline | claude
    report_files: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0


def story_start(today: date | None = None) -> date:
    """Day 1 of the story: three days before today (the background history ends the day before)."""
    return (today or utcnow().date()) - timedelta(days=3)


def _ts(first: date, day: int, hour: int, minute: int) -> datetime:
    return datetime(first.year, first.month, first.day, hour, tzinfo=UTC) + timedelta(
        days=day - 1, minutes=minute
    )


def _asdict(obj: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return dict(obj) if isinstance(obj, dict) else {"value": repr(obj)}


def _path(info: dict[str, Any]) -> str:
    return str(info.get("path") or info.get("scorer") or "offline")


def play_sessions(settings: Settings, info: StoryInfo, say: Say) -> None:
    """Record every scripted turn through the runtime and end each session (which runs its hook)."""
    from tiermem.app.sessions import handle_session_end
    from tiermem.runtime.context import assemble_context
    from tiermem.runtime.memory import end_session, open_memory, record_turn
    from tiermem.tokens import count_tokens

    first = story_start()
    info.first_day = first.isoformat()
    outcomes: list[Any] = []

    def capture(s: Settings, agent_id: str, session_id: str) -> None:
        outcomes.append(handle_session_end(s, agent_id, session_id))

    # The demo wants each session-end result to narrate it: its hook records the outcome.
    current_day = 0
    for sess in STORY:
        if sess.day != current_day:
            current_day = sess.day
            day = first + timedelta(days=sess.day - 1)
            say(f"\n  Day {sess.day} — {day:%A %d %B %Y}")
        session_id = f"story-{first:%m%d}-d{sess.day}-{sess.agent_id}-{sess.user}"
        with open_memory(
            settings,
            sess.agent_id,
            agent_type=sess.agent_type,
            project_id=sess.project_id,
            user=sess.user,
            session_id=session_id,
        ) as memory:
            prompt_tokens: list[int] = []
            for i, turn in enumerate(sess.turns):
                ts = _ts(first, sess.day, sess.hour, 2 * i)
                ctx = assemble_context(memory, user=sess.user, query=turn.user_message)
                prompt = ctx.total_tokens + count_tokens(turn.user_message)
                prompt_tokens.append(prompt)
                record_turn(
                    memory,
                    turn.user_message,
                    turn.agent_response,
                    event_id=derived_event_id(ts, "demo-story", session_id, str(i)),
                    ts=format_ts(ts),
                    channel=sess.channel,
                    model="claude-sonnet-4-5",
                    usage={
                        "input_tokens": prompt,
                        "output_tokens": count_tokens(turn.agent_response),
                        "cache_read_tokens": 0,
                        "tool_calls": len(turn.tools_used),
                    },
                    tools_used=list(turn.tools_used),
                    selection_reason="direct_mention",
                    approval_status="auto_approved",
                    latency_ms=float(900 + 40 * len(turn.agent_response) // 10),
                    response_length=len(turn.agent_response),
                    metadata={"demo": "scripted reply"},
                )
                info.turns_recorded += 1
            end_session(memory, reason="conversation over", on_session_end=capture)
        end = outcomes[-1]
        outcome = end.outcome
        gap = _asdict(outcome.gap_fill) if outcome is not None and outcome.gap_fill is not None else {}
        comp = _asdict(outcome.compression) if outcome is not None and outcome.compression is not None else {}
        record = {
            "day": sess.day,
            "agent_id": sess.agent_id,
            "user": sess.user,
            "session_id": session_id,
            "turns": len(sess.turns),
            "prompt_tokens_avg": round(sum(prompt_tokens) / len(prompt_tokens)),
            "session_end_path": end.path,
            "gap_fill": gap,
            "compression": comp,
            "error": outcome.error if outcome is not None else end.note,
        }
        info.sessions.append(record)
        say(f"    {sess.agent_id} × {sess.user} ({sess.channel}, {len(sess.turns)} turns): {sess.headline}")
        say(
            f"      prompts assembled per turn: ~{record['prompt_tokens_avg']} tokens;"
            f" session end ({end.path}): " + _session_end_line(gap, comp, record["error"])
        )


def _session_end_line(gap: dict[str, Any], comp: dict[str, Any], error: str | None) -> str:
    parts = []
    if gap:
        found = {k: v for k, v in gap.items() if isinstance(v, int) and not isinstance(v, bool) and v}
        parts.append("gap-fill " + (", ".join(f"{k}={v}" for k, v in found.items()) or "nothing missed"))
    if comp:
        if comp.get("agents"):
            parts.append(
                f"over the limit -> compressed {comp.get('interactions_scored', 0)} turns into "
                f"{comp.get('episodes', 0)} episodes, {comp.get('proposals', 0)} fact proposals"
            )
        else:
            parts.append("under the limit, nothing to compress")
    if error:
        parts.append(f"note: {error}")
    return "; ".join(parts) or "nothing to do"


STORY_QUERIES: dict[str, str] = {
    "the story in the log: one row per session (DuckDB over the raw JSONL, today's open files included)": """
        SELECT CAST(ts AS DATE) AS day, agent_id, "user", channel, count(*) AS turns,
               sum(usage.input_tokens) AS prompt_tokens, list_distinct(flatten(list(tools_used))) AS tools
        FROM interactions WHERE session_id LIKE 'story-%'
        GROUP BY ALL ORDER BY min(ts)""",
    "what compression made of it: the story's episodes, most important first": """
        SELECT agent_id, CAST(start_ts AS DATE) AS day, importance, name,
               coalesce(TRY(json_extract_string(key_quotes, '$[0].text')), '') AS first_key_quote
        FROM episodes
        WHERE start_ts >= CAST($first_day AS DATE) AND agent_id IN ('support-bot', 'nexus-npc')
        ORDER BY importance DESC, start_ts LIMIT 8""",
}


KNOWLEDGE_QUERIES: dict[str, str] = {
    "what support-bot now knows about alice (the knowledge view: evolver decisions, newest first)": """
        SELECT status, decision, source, content
        FROM knowledge
        WHERE agent_id = 'support-bot' AND participant = 'alice' AND status IN ('active', 'inactive')
        ORDER BY updated_at DESC LIMIT 8""",
}


def run_queries(settings: Settings, info: StoryInfo, say: Say, queries: dict[str, str] | None = None) -> None:
    from tiermem.log.sql import run_query

    for title, sql in (STORY_QUERIES if queries is None else queries).items():
        try:
            result = run_query(settings, sql.replace("$first_day", f"'{info.first_day}'"))
        except Exception as exc:  # a view another part has not shipped yet must not end the demo
            say(f"\n  {title}: unavailable ({type(exc).__name__}: {str(exc).splitlines()[0]})")
            continue
        rows = result.records()
        info.queries[title] = rows
        say(f"\n  {title}  ({result.elapsed_s * 1000:.0f} ms)")
        say(_indent(format_table(result.columns, [list(r.values()) for r in rows], max_width=70)))


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def run_batch_jobs(settings: Settings, info: StoryInfo, say: Say) -> None:
    """What a scheduler runs: compress, evolve, review, project (each under its job lock)."""
    from tiermem.compressor.job import run_compress
    from tiermem.evolver.job import run_evolve
    from tiermem.locks import job_lock
    from tiermem.reviewer.job import run_review
    from tiermem.runtime.projector import project

    with job_lock(settings, "compress", what="tiermem demo", wait_seconds=JOB_WAIT_SECONDS):
        comp = _asdict(run_compress(settings, progress=False))
    info.compress, info.paths["compress"] = comp, _path(comp)
    say(
        f"  compress ({_path(comp)}): {comp.get('agents', 0)} more agent(s) over the limit (those with no "
        f"session end in the story): {comp.get('interactions_scored', 0)} turns -> {comp.get('episodes', 0)} "
        f"episodes, {comp.get('proposals', 0)} fact proposals, {comp.get('relationships', 0)} relationship summaries"
    )
    with job_lock(settings, "evolve", what="tiermem demo", wait_seconds=JOB_WAIT_SECONDS):
        evo = _asdict(run_evolve(settings))
    info.evolve, info.paths["evolve"] = evo, _path(evo)
    say(
        f"  evolve ({_path(evo)}): {evo.get('decided', 0)} proposals decided: created {evo.get('created', 0)}, "
        f"touched {evo.get('touched', 0)}, merged {evo.get('merged', 0)}, superseded {evo.get('superseded', 0)}, "
        f"corrected {evo.get('corrected', 0)}, waiting for a person {evo.get('pending', 0)}; "
        f"{evo.get('active_facts', 0)} active facts"
    )
    # The last day of the generated history (old runtimes that forgot enrichment) and the
    # story's last day (every turn enriched by the runtime); `tiermem review` does every day.
    today = utcnow().date()
    for day, what in ((today - timedelta(days=4), "generated history"), (today - timedelta(days=1), "story")):
        with job_lock(settings, "review", what="tiermem demo", wait_seconds=JOB_WAIT_SECONDS):
            rev = _asdict(run_review(settings, day=day.isoformat()))
        info.review[day.isoformat()] = rev
        info.paths["review"] = _path(rev)
        files = [str(f) for f in rev.get("files", [])]
        info.report_files += [f for f in files if not f.endswith(".png")]
        info.charts += [f for f in files if f.endswith(".png")]
        coverage = rev.get("enrichment_coverage") or {}
        say(
            f"  review ({_path(rev)}) of {day} ({what}): {rev.get('reports', 0)} report(s), "
            f"{rev.get('interactions', 0)} interactions, ${rev.get('cost_usd', 0):.2f}, "
            f"{rev.get('flagged_interactions', 0)} flagged; turns enriched with model and usage: "
            f"{coverage.get('model', 0):.0%}"
        )
    proj = _asdict(project(settings))
    info.project = proj
    say(f"  project: {proj.get('applied', 0)} new events applied to the hot store the runtime reads")


def new_turn(settings: Settings, info: StoryInfo, say: Say, claude_client: Any | None = None) -> None:
    """Today's turns: the assembled context tier by tier, and what recall_memory brings back."""
    from tiermem.runtime.context import assemble_context
    from tiermem.runtime.memory import open_memory
    from tiermem.runtime.tools import call_tool

    for agent_id, agent_type, project_id, user, message, query in TODAY:
        with open_memory(
            settings, agent_id, agent_type=agent_type, project_id=project_id, user=user
        ) as memory:
            ctx = assemble_context(memory, user=user, query=message, record=True)
            say(f'\n  {user} -> {agent_id}: "{message}"')
            say(
                f"  the prompt {agent_id} would send: {ctx.total_tokens} of {ctx.cap} tokens, by tier, in prompt order"
            )
            rows = []
            for s in ctx.sections:
                first_line = next(
                    (
                        ln
                        for ln in s.text.splitlines()
                        if ln and not ln.startswith(("## ", "<memory-context"))
                    ),
                    "",
                )
                rows.append([s.name, s.tokens, len(s.item_ids), first_line])
            say(_indent(format_table(["tier", "tokens", "items", "first item"], rows, max_width=78)))
            say(
                f"    (assembled in {ctx.elapsed_ms:.1f} ms from the hot store; the cold log is never read here)"
            )
            info.contexts.append(ctx.to_json())
            recalled = call_tool(memory, "recall_memory", {"query": query, "participant": user})
            results = list(recalled.get("memories") or recalled.get("results") or [])
            info.recalls.append({"agent_id": agent_id, "query": query, "participant": user, **recalled})
            say(f'  {agent_id} reaches for a memory: recall_memory("{query}", participant="{user}") ->')
            if not results:
                say("    (nothing comes to mind)")
            for r in results[:3]:
                quotes = [
                    q.get("text", q) if isinstance(q, dict) else q for q in (r.get("key_quotes") or [])
                ][:2]
                when = r.get("when") or str(r.get("start_ts", ""))[:10]
                say(f"    * {r.get('name')} (importance {r.get('importance')}, {when})")
                say(f"      {r.get('summary')}")
                for q in quotes:
                    say(f'      "{q}"')
                if r.get("emotional_context"):
                    say(f"      felt: {r.get('emotional_context')}")
            if settings.claude_available or claude_client is not None:
                info.replies.append(_claude_turn(memory, message, claude_client, say))
            else:
                say(
                    "  (offline: no model call; with ANTHROPIC_API_KEY set, Claude answers here using these tools)"
                )


def _claude_turn(memory: Any, message: str, client: Any, say: Say) -> dict[str, Any]:
    """The Claude path: one real agent turn with the memory tools offered, recorded like any other."""
    from tiermem.errors import TiermemError
    from tiermem.runtime.turnloop import run_turn

    try:
        result = run_turn(memory, message, client, selection_reason="demo")
    except TiermemError as exc:
        say(f"  Claude turn failed: {exc}")
        return {"agent_id": memory.agent_id, "error": str(exc)}
    say(
        f"  {memory.agent_id} ({result.model}, {result.latency_ms:.0f} ms, tools used: "
        f"{', '.join(result.tools_used) or 'none'}, {result.usage.get('input_tokens', 0)} tokens in):"
    )
    for line in result.text.strip().splitlines():
        say(f"    {line}")
    return {
        "agent_id": memory.agent_id,
        "text": result.text,
        "model": result.model,
        "tools_used": result.tools_used,
        "usage": result.usage,
        "event_id": result.event_id,
    }


def run_story(settings: Settings, say: Say, *, claude_client: Any | None = None) -> StoryInfo:
    """Play the story and the batch jobs, then today's turns; narrate through `say`."""
    started = time.perf_counter()
    info = StoryInfo()
    say("\n== The story: three days, two agents, three people — recorded through the runtime ==")
    play_sessions(settings, info, say)
    say("\n== The log, queried with SQL ==")
    run_queries(settings, info, say)
    say("\n== The batch jobs a scheduler runs (`tiermem schedule` does this on its own) ==")
    run_batch_jobs(settings, info, say)
    run_queries(settings, info, say, KNOWLEDGE_QUERIES)
    say("\n== Today: two of them come back ==")
    new_turn(settings, info, say, claude_client)
    info.elapsed_s = round(time.perf_counter() - started, 2)
    return info
