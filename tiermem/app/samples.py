"""A realistic, reproducible sample of agent turns: several agents, users, channels, days.

Used by the demo, the tests and the benchmarks. Records look like what a real
runtime logs: different agent types (a support bot, an RPG NPC, a coding
assistant), users who come back across days, sessions, channels, models with
token usage, tool use (including `recall_memory`), approval statuses and
latencies; and, so that a review has unenriched turns to find, a
share of records written by an older runtime that forgot the enrichment
fields (no model, no usage), some in the original v0 camelCase format.
Everything is seeded: the same arguments give the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from tiermem.ids import derived_event_id, format_ts, utcnow


@dataclass(frozen=True)
class AgentProfile:
    agent_id: str
    agent_type: str
    channels: tuple[str, ...]
    project_id: str
    topics: tuple[tuple[str, str], ...]  # (user message, agent response) templates


AGENTS: tuple[AgentProfile, ...] = (
    AgentProfile(
        "support-bot",
        "support",
        ("web-chat", "email", "support-escalation"),
        "acme-billing",
        (
            (
                "My invoice for {month} shows a double charge of ${amount}.",
                "I can see the duplicate ${amount} charge on your {month} invoice; I've opened refund ticket #{ticket}.",
            ),
            (
                "I moved to {city}, can you update my billing address?",
                "Done: your billing address is now in {city}. The next invoice will use it.",
            ),
            (
                "The export to CSV keeps timing out.",
                "Exports over 50k rows run in the background now; you'll get an email with the link.",
            ),
            (
                "Please cancel my {plan} plan at the end of the month.",
                "Your {plan} plan is set to end on the last day of the month. You keep access until then.",
            ),
            (
                "Is the outage on {day} fixed?",
                "Yes, the {day} outage was a failed database failover; it was fixed within the hour.",
            ),
            ("I prefer to be contacted by email, not phone.", "Noted: email only from now on."),
        ),
    ),
    AgentProfile(
        "nexus-npc",
        "rpg-npc",
        ("discord-tavern", "discord-dm"),
        "nexus-campaign",
        (
            (
                "I can't quite remember how I got to the Nexus.",
                "You don't have to remember everything to be here. The Nexus doesn't seem to require it.",
            ),
            (
                "Will you still be here when I wake up?",
                "I don't go anywhere. Sleep. The Nexus holds you while you do. I'll be here.",
            ),
            ("Hello.", "Hello."),
            (
                "Tell me about the {artifact}.",
                "The {artifact} was last seen in the eastern archive. Few who went looking came back unchanged.",
            ),
            (
                "My character {hero} wants to trade with you.",
                "{hero} has an honest face. I'll trade, but not the map.",
            ),
            (
                "Do you remember what happened in {city}?",
                "I remember the fire in {city}, and who carried the children out.",
            ),
        ),
    ),
    AgentProfile(
        "code-helper",
        "coding",
        ("ide", "slack-dev"),
        "platform-repo",
        (
            (
                "Why does test_{module} fail on CI but not locally?",
                "CI runs with TZ=UTC; test_{module} builds a naive datetime. Make it timezone-aware.",
            ),
            (
                "Refactor {module}.py to use dataclasses.",
                "Here is {module}.py with the three config classes turned into frozen dataclasses.",
            ),
            ("We use ruff, not flake8, in this repo.", "Understood, I'll suggest ruff rules from now on."),
            (
                "What's the p99 latency of the {module} endpoint?",
                "Last week's p99 for {module} was {latency} ms, up from 80 ms after the cache change.",
            ),
            (
                "Write a migration adding an index on users.email.",
                "Migration 0042 adds a unique index on users.email, created concurrently.",
            ),
        ),
    ),
    AgentProfile(
        "ops-agent",
        "ops",
        ("pagerduty", "slack-ops"),
        "infra",
        (
            ("Disk on db-{n} is at 91%.", "db-{n}: rotated WAL archives, now at 64%. I'll watch it."),
            ("Deploy {module} v2.{n} to staging.", "{module} v2.{n} is on staging; smoke tests passed."),
            ("Who is on call this weekend?", "Priya is primary and Jonas secondary this weekend."),
        ),
    ),
)

USERS = ("alice", "bob", "carol", "dmitri", "eve", "farah", "gus", "hana", "ivan", "jules", "kemal", "lin")
MODELS = (("claude-sonnet-4-5", 0.6), ("claude-haiku-4-5", 0.3), ("claude-opus-4-5", 0.1))
TOOLS = ("recall_memory", "memory_fact_recall", "search_docs", "create_ticket", "run_tests")
FILL = {
    "month": ("March", "April", "May", "June"),
    "amount": ("19.99", "49.00", "120.00"),
    "city": ("Lisbon", "Osaka", "Tampere", "Valparaíso"),
    "plan": ("Pro", "Team", "Starter"),
    "day": ("Monday", "Tuesday", "Friday"),
    "artifact": ("Lantern of Quiet", "Ninth Key", "Glass Compass"),
    "hero": ("Mira", "Tobin", "Sable"),
    "module": ("billing", "auth", "search", "ingest"),
    "latency": ("120", "240", "95"),
    "n": ("1", "2", "3", "7"),
    "ticket": ("4471", "5902", "6113"),
}


def _fill(template: str, rng: random.Random) -> str:
    out = template
    for key, options in FILL.items():
        token = "{" + key + "}"
        if token in out:
            out = out.replace(token, rng.choice(options))
    return out


def _model(rng: random.Random) -> str:
    x = rng.random()
    for name, share in MODELS:
        if x < share:
            return name
        x -= share
    return MODELS[0][0]


def generate(
    *,
    days: int = 5,
    per_day: int = 200,
    end: date | None = None,
    seed: int = 7,
    unenriched_share: float = 0.15,
    legacy_share: float = 0.03,
    with_ids: bool = False,
) -> Iterator[dict[str, Any]]:
    """Yield `days * per_day` turns ending on `end` (default today UTC), oldest first."""
    rng = random.Random(seed)
    now = utcnow()
    last = end or now.date()
    first = last - timedelta(days=days - 1)
    for day in range(days):
        base = datetime(first.year, first.month, first.day, tzinfo=UTC) + timedelta(days=day)
        # Today's turns happened before now, not later today.
        span = 86_400_000 if base.date() < now.date() else max(1, int((now - base).total_seconds() * 1000))
        offsets = sorted(rng.randrange(0, span) for _ in range(per_day))
        session_of: dict[tuple[str, str], str] = {}
        for i, ms in enumerate(offsets):
            agent = AGENTS[rng.randrange(len(AGENTS))]
            user = USERS[rng.randrange(len(USERS))]
            msg_t, resp_t = agent.topics[rng.randrange(len(agent.topics))]
            ts = base + timedelta(milliseconds=ms)
            key = (agent.agent_id, user)
            if key not in session_of or rng.random() < 0.1:
                session_of[key] = f"s-{base:%m%d}-{agent.agent_id[:4]}-{user}-{i}"
            user_message = _fill(msg_t, rng)
            response = _fill(resp_t, rng)
            level = rng.choices(("global", "project", "task"), (0.5, 0.35, 0.15))[0]
            rec: dict[str, Any] = {
                "type": "interaction",
                "ts": format_ts(ts),
                "agent_id": agent.agent_id,
                "agent_type": agent.agent_type,
                "project_id": agent.project_id,
                "session_id": session_of[key],
                "channel": rng.choice(agent.channels),
                "user": user,
                "memory_level": level,
                "user_message": user_message,
                "agent_response": response,
            }
            if level == "task":
                rec["task_id"] = f"task-{rng.randrange(1, 40)}"
            if rng.random() >= unenriched_share:
                tools = [t for t in TOOLS if rng.random() < 0.12]
                rec.update(
                    model=_model(rng),
                    usage={
                        "input_tokens": rng.randrange(800, 6000),
                        "output_tokens": rng.randrange(20, 600),
                        "cache_read_tokens": rng.randrange(0, 4000),
                        "tool_calls": len(tools),
                    },
                    tools_used=tools,
                    selection_reason=rng.choice(
                        ("direct_mention", "channel_default", "follow_up", "scheduled")
                    ),
                    approval_status=rng.choices(
                        ("auto_approved", "approved", "pending", "rejected"), (0.8, 0.1, 0.07, 0.03)
                    )[0],
                    latency_ms=round(rng.uniform(300, 9000), 1),
                    metadata={"client": rng.choice(("web", "discord", "vscode", "slack")), "turn": i},
                )
            if rng.random() < legacy_share:
                # The seed's original line format: camelCase, `timestamp`, no type.
                rec = {
                    "agentId": rec["agent_id"],
                    "timestamp": rec["ts"],
                    "channel": rec["channel"],
                    "user": user,
                    "user_message": user_message,
                    "agent_response": response,
                }
            if with_ids:
                rec["event_id"] = derived_event_id(ts, "sample", str(seed), str(day), str(i))
            yield rec


def write_jsonl(path: Path, records: Iterator[dict[str, Any]]) -> int:
    """Write records as JSONL; return how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "wb") as fh:
        buf: list[bytes] = []
        for rec in records:
            buf.append(orjson.dumps(rec))
            n += 1
            if len(buf) >= 10_000:
                fh.write(b"\n".join(buf) + b"\n")
                buf.clear()
        if buf:
            fh.write(b"\n".join(buf) + b"\n")
    return n
