"""An `event_id` reused for another turn is refused (`EventIdConflictError`), the same turn sent
again is answered as recorded, wherever the first copy is: this process's unindexed tail,
another process's (indexed) segment, a sealed Parquet segment, or erased."""

from __future__ import annotations

import pytest
from tiermem.runtime.memory import RecordedTurn, TurnToRecord, record_turns

from tiermem.app.api import Memory
from tiermem.errors import EventIdConflictError
from tiermem.settings import Settings

AGENT = "id-bot"
OTHER = "other-bot"
CANARY = "canary-EVE-4417"
OLD_TS = "2026-01-05T10:00:00+00:00"  # a closed day: it can be sealed


def _first(settings: Settings, **fields: str) -> None:
    """The first copy, written by a Memory that is then closed (its tail goes to the id index)."""
    with Memory(settings) as mem:
        mem.agent(AGENT).record_turn("eve", f"My PIN is {CANARY}.", "Noted.", event_id="e-1", **fields)


def _check(settings: Settings) -> None:
    with Memory(settings) as mem:
        again = mem.agent(AGENT).record_turn("eve", f"My PIN is {CANARY}.", "Noted.", event_id="e-1")
        assert again.event_id == "e-1"
        with pytest.raises(EventIdConflictError) as other_user:
            mem.agent(AGENT).record_turn("mallory", f"My PIN is {CANARY}.", "Noted.", event_id="e-1")
        with pytest.raises(EventIdConflictError) as other_agent:
            mem.agent(OTHER).record_turn("eve", f"My PIN is {CANARY}.", "Noted.", event_id="e-1")
        with pytest.raises(EventIdConflictError) as other_words:
            mem.agent(AGENT).record_turn("eve", "something else", "Noted.", event_id="e-1")
    # Each refused turn is quarantined with its reason (the sender's own record, never lost).
    quarantined = b"".join(p.read_bytes() for p in settings.rejects_dir.rglob("*.jsonl"))
    assert quarantined.count(b"already used by another record") == 3 and b"mallory" in quarantined
    messages = {str(e.value) for e in (other_user, other_agent, other_words)}
    assert len(messages) == 1 and CANARY not in messages.pop()
    assert other_user.value.field == "event_id"
    with Memory(settings) as mem:
        rows = mem.query("SELECT agent_id, user, user_message FROM interactions WHERE event_id = 'e-1'")
        assert [tuple(r) for r in rows.rows] == [(AGENT, "eve", f"My PIN is {CANARY}.")]


def test_first_copy_in_another_processes_indexed_segment(settings: Settings) -> None:
    _first(settings)
    _check(settings)


def test_first_copy_in_this_processes_own_tail(settings: Settings) -> None:
    with Memory(settings) as mem:
        here = mem.agent(AGENT).runtime
        elsewhere = mem.agent(OTHER).runtime
        # One batch: the second is a duplicate of the first, written by this same append.
        first, second, third = record_turns(
            [
                TurnToRecord(here, f"My PIN is {CANARY}.", "Noted.", {"user": "eve", "event_id": "t-1"}),
                TurnToRecord(here, f"My PIN is {CANARY}.", "Noted.", {"user": "eve", "event_id": "t-1"}),
                TurnToRecord(elsewhere, "hi", "hello", {"user": "eve", "event_id": "t-1"}),
            ]
        )
        assert isinstance(first, RecordedTurn) and isinstance(second, RecordedTurn)
        assert isinstance(third, EventIdConflictError)
        (later,) = record_turns([TurnToRecord(elsewhere, "hi", "hello", {"user": "eve", "event_id": "t-1"})])
        assert isinstance(later, EventIdConflictError)


def test_first_copy_sealed_to_parquet(settings: Settings) -> None:
    _first(settings, ts=OLD_TS)
    with Memory(settings) as mem:
        assert mem.seal().sealed_segments  # the day is closed: its segment is Parquet now
    _check(settings)


def test_an_erased_first_copy_is_never_taken_for_the_same_turn(settings: Settings) -> None:
    _first(settings)
    with Memory(settings) as mem:
        mem.forget(event="e-1", reason="test")
        with pytest.raises(EventIdConflictError):
            mem.agent(AGENT).record_turn("eve", f"My PIN is {CANARY}.", "Noted.", event_id="e-1")


def test_the_id_quoted_in_a_later_records_field_is_not_taken_for_the_first_copy(settings: Settings) -> None:
    with Memory(settings) as mem:
        agent = mem.agent(AGENT)
        agent.record_turn("eve", "first words", "ok", event_id="q-1")
        # A later line of the same segment mentions the id as a field of its own.
        agent.record_turn("eve", "later words", "ok", metadata={"event_id": "q-1"})
        assert agent.record_turn("eve", "first words", "ok", event_id="q-1").event_id == "q-1"
        with pytest.raises(EventIdConflictError):
            agent.record_turn("eve", "later words", "ok", event_id="q-1")


def test_one_sealed_event_is_found_by_its_id_as_the_whole_read_gives_it(settings: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The first copy in a sealed day is decoded from its row group alone: every row, in a file of
    # several row groups, must come back exactly as reading the whole segment gives it.
    import pyarrow.parquet as pq

    from tiermem.sealed import parquet_event, parquet_events

    with Memory(settings) as mem:
        for i in range(10):
            mem.agent(AGENT).record_turn("eve", f"turn {i} {CANARY}", "ok", event_id=f"s-{i}", ts=OLD_TS)
        mem.forget(event="s-4", reason="test")
        assert mem.seal().sealed_segments
    (sealed,) = settings.log_dir.rglob("*.parquet")
    regrouped = tmp_path / sealed.parent.parent.name / sealed.parent.name / sealed.name
    regrouped.parent.mkdir(parents=True)
    pq.write_table(pq.read_table(sealed), regrouped, row_group_size=3)
    assert pq.ParquetFile(regrouped).num_row_groups == 4
    whole = {e["event_id"]: e for e in parquet_events(regrouped, keep_erased=True)}
    assert len(whole) == 10
    for event_id, event in whole.items():
        assert parquet_event(regrouped, event_id) == event
    assert parquet_event(regrouped, "s-99") is None
