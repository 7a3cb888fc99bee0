"""Property-based round trip of the schema: validate -> JSONL -> read, and -> Parquet -> read."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from tiermem.log.seal import seal

from tiermem.eventlog import EventLog
from tiermem.events import validate, validate_full
from tiermem.ids import format_ts
from tiermem.settings import resolve_settings

text = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)
ident = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=12)
# hypothesis takes naive bounds and attaches the timezone itself.
stamps = st.datetimes(
    min_value=datetime(2001, 1, 1),  # noqa: DTZ001
    max_value=datetime(2030, 12, 31),  # noqa: DTZ001
    timezones=st.just(UTC),
).map(lambda d: format_ts(d.replace(microsecond=d.microsecond // 1000 * 1000)))
json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
json_value = st.recursive(
    json_scalar,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(text, kids, max_size=3),
    max_leaves=8,
)
usage = st.dictionaries(
    st.sampled_from(["input_tokens", "output_tokens", "cache_read_tokens", "tool_calls"]),
    st.integers(0, 2**40),
)

OPTIONAL: dict[str, Any] = {
    "agent_type": ident,
    "project_id": ident,
    "task_id": ident,
    "session_id": ident,
    "channel": text,
    "user": text,
    "memory_level": st.sampled_from(["global", "project", "task"]),
    "model": ident,
    "usage": usage,
    "tools_used": st.lists(text, max_size=4),
    "selection_reason": text,
    "approval_status": text,
    "latency_ms": st.floats(0, 1e7, allow_nan=False) | st.integers(0, 10**6),
    "metadata": st.dictionaries(text, json_value, max_size=4),
}


@st.composite
def interactions(draw: st.DrawFn) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "type": "interaction",
        "event_id": draw(ident),
        "agent_id": draw(ident),
        "ts": draw(stamps),
        "user_message": draw(text),
        "agent_response": draw(text.filter(bool)),
    }
    for name, strat in OPTIONAL.items():
        if draw(st.booleans()):
            rec[name] = draw(strat)
    if draw(st.booleans()):
        rec["surprise_field"] = draw(json_value)  # unknown fields are kept in `extra`
    return rec


@hsettings(max_examples=150, deadline=None)
@given(interactions())
def test_fast_path_and_full_path_agree(record: dict[str, Any]) -> None:
    assert validate(record) == validate_full(record)


@hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(interactions(), min_size=1, max_size=12, unique_by=lambda r: r["event_id"]))
def test_round_trip_through_jsonl_and_parquet(records: list[dict[str, Any]]) -> None:
    expected = [validate(r) for r in records]
    with tempfile.TemporaryDirectory() as tmp:
        settings = resolve_settings(data_dir=Path(tmp), env={})
        with EventLog(settings) as log:
            batch = log.append_many(records)
            assert batch.accepted == len(records) and not batch.rejected
            from_jsonl = {ev["event_id"]: ev for _s, _l, ev in log.read("interactions")}
        assert from_jsonl == {ev["event_id"]: ev for ev in expected}
        info = seal(settings, before=format_ts(datetime.now(UTC) + timedelta(days=4000))[:10])
        assert info.sealed_rows == len(records)
        with EventLog(settings) as log:
            from_parquet = {ev["event_id"]: ev for _s, _l, ev in log.read("interactions")}
        assert from_parquet == from_jsonl
