"""Helpers for the compressor tests: realistic interactions appended through the public log API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts

TOPICS = [
    ("Hi there!", "Hello! Good to see you."),
    (
        "I went to the pottery class yesterday and made a bowl for my mom.",
        "That sounds lovely, how did it turn out?",
    ),
    (
        "I love hiking in the Alps, my favorite trail is near Zermatt.",
        "Zermatt is beautiful. When were you there?",
    ),
    ("Actually, I meant Grindelwald, not Zermatt.", "Thanks for the correction, Grindelwald it is."),
    (
        "I'm so excited, I got the job at Acme Robotics!",
        "Congratulations! That is wonderful news, you worked hard for it.",
    ),
    ("ok thanks", "You're welcome."),
    ("My sister Emma is visiting next week from Sweden.", "How long is Emma staying?"),
    ("I feel sad, my dog Rex passed away last month.", "I'm so sorry about Rex. He was part of your family."),
]


def interaction(agent: str, user: str, i: int, start: datetime, session: str | None = None) -> dict[str, Any]:
    msg, resp = TOPICS[i % len(TOPICS)]
    ts = start + timedelta(minutes=3 * i)
    return {
        "type": "interaction",
        "event_id": derived_event_id(ts, "test-turn", agent, str(i)),
        "ts": format_ts(ts),
        "agent_id": agent,
        "user": user,
        "session_id": session or f"s{i // 20}",
        "user_message": f"{msg} (turn {i})",
        "agent_response": resp,
    }


def seed_interactions(
    log: EventLog, agent: str, n: int, *, user: str = "alice", start: datetime | None = None
) -> list[dict[str, Any]]:
    start = start or datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
    records = [interaction(agent, user, i, start) for i in range(n)]
    result = log.append_many(records)
    assert not result.rejected
    return records


def log_lines(settings_data_dir: Any) -> int:
    """Total lines in every JSONL segment of the log: 'appends nothing' means this does not move."""
    from pathlib import Path

    return sum(p.read_bytes().count(b"\n") for p in Path(settings_data_dir, "log").rglob("*.jsonl"))
