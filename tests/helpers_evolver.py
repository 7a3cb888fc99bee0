"""Builders for evolver, reviewer and forget tests: real events in a real log."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tiermem.eventlog import EventLog
from tiermem.ids import format_ts, new_event_id

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def at(minutes: float, base: datetime = T0) -> str:
    return format_ts(base + timedelta(minutes=minutes))


def proposal(
    content: str,
    *,
    agent: str = "agent-1",
    minute: float = 0,
    confidence: float = 0.9,
    origin: str = "compressor",
    **fields: Any,
) -> dict[str, Any]:
    ts = fields.pop("ts", None) or at(minute)
    return {
        "type": "knowledge_proposed",
        "event_id": fields.pop("event_id", None)
        or new_event_id(datetime.fromisoformat(ts.replace("Z", "+00:00"))),
        "ts": ts,
        "agent_id": agent,
        "content": content,
        "confidence": confidence,
        "importance": fields.pop("importance", 5),
        "origin": origin,
        "category": fields.pop("category", "user"),
        **fields,
    }


def interaction(
    user_message: str,
    agent_response: str,
    *,
    agent: str = "agent-1",
    minute: float = 0,
    user: str = "alice",
    enriched: bool = True,
    **fields: Any,
) -> dict[str, Any]:
    ts = fields.pop("ts", None) or at(minute)
    record: dict[str, Any] = {
        "type": "interaction",
        "ts": ts,
        "agent_id": agent,
        "user": user,
        "session_id": fields.pop("session_id", "s1"),
        "user_message": user_message,
        "agent_response": agent_response,
    }
    if enriched:
        record.update(
            model="claude-sonnet-4-5",
            usage={"input_tokens": 1000, "output_tokens": 200, "tool_calls": 0},
            selection_reason="direct_mention",
            approval_status="auto_approved",
            latency_ms=850.0,
        )
    record.update(fields)
    return record


def append_all(log: EventLog, records: list[dict[str, Any]]) -> list[str]:
    result = log.append_many(records)
    assert not result.rejected, result.rejected
    return [r.event_id for r in result.results]
