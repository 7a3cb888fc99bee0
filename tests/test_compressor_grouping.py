"""Offline episodes follow conversations: interleaved sessions, long pauses, whole batches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import duckdb
from helpers_compressor import interaction
from tiermem.compressor.job import run_compress
from tiermem.compressor.scoring import Interaction
from tiermem.compressor.work import conversation_batches

from tiermem.eventlog import EventLog
from tiermem.ids import parse_ts
from tiermem.settings import Settings

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


def _interleaved(users: list[str], per_user: int, step: timedelta) -> list[dict[str, object]]:
    """Several people talk to one agent at once: their sessions interleave turn by turn."""
    records = []
    for k in range(per_user):
        for j, user in enumerate(users):
            r = interaction("bot", user, k * len(users) + j, START, session=f"chat-{user}")
            r["ts"] = (START + step * (k * len(users) + j)).isoformat()
            records.append(r)
    return records


def _as_interactions(records: list[dict[str, object]]) -> list[Interaction]:
    return [
        Interaction(
            str(r["event_id"]), "bot", parse_ts(str(r["ts"])), str(r["user"]), str(r["session_id"]),
            "", "agent", str(r["user_message"]), str(r["agent_response"]),
        )
        for r in records
    ]  # fmt: skip


def test_batches_keep_each_conversation_whole_and_cut_a_suffix_as_the_whole_run_did() -> None:
    turns = _as_interactions(_interleaved(["ann", "ben", "cat", "dan"], 6, timedelta(minutes=5)))
    batches = conversation_batches(turns, 15)
    assert sorted(it.event_id for b in batches for it in b) == sorted(it.event_id for it in turns)
    for b in batches:
        assert len(b) <= 15
    # Four six-turn conversations in batches of 15: two per batch, none split.
    assert [sorted({it.user for it in b}) for b in batches] == [["ann", "ben"], ["cat", "dan"]]
    # After a committed first batch, the rest is cut exactly as before.
    rest = [it for it in turns if it.event_id not in {x.event_id for x in batches[0]}]
    assert conversation_batches(rest, 15) == batches[1:]


def test_a_long_conversation_fills_whole_batches() -> None:
    turns = _as_interactions(_interleaved(["ann"], 40, timedelta(minutes=1)))
    assert [len(b) for b in conversation_batches(turns, 15)] == [15, 15, 10]


def _episodes(settings: Settings) -> list[tuple[str, list[str], set[str]]]:
    con = duckdb.connect()
    try:
        rows = con.execute(
            "SELECT name, source_event_ids, participants FROM read_json_auto(?, format='newline_delimited',"
            " union_by_name=true) WHERE type = 'episode'",
            [str(settings.data_dir / "log" / "**" / "*.jsonl")],
        ).fetchall()
    finally:
        con.close()
    return [(str(r[0]), list(r[1]), set(r[2])) for r in rows]


def test_interleaved_sessions_become_a_few_episodes_each_not_one_per_turn(
    settings: Settings, event_log: EventLog
) -> None:
    # Three people, 12 turns each, 40 minutes between one person's turns (sessions named by the client).
    records = _interleaved(["ann", "ben", "cat"], 12, timedelta(minutes=40 / 3))
    assert not event_log.append_many(records).rejected
    info = run_compress(settings)
    assert info.interactions_scored == 36 - 10
    episodes = _episodes(settings)
    assert sorted(i for _, ids, _ in episodes for i in ids) == sorted(
        str(r["event_id"]) for r in records if r["event_id"] in {i for _, ids, _ in episodes for i in ids}
    )
    assert sum(len(ids) for _, ids, _ in episodes) == 26  # every compressed turn, once
    assert all(len(people) == 1 for _, _, people in episodes)  # one conversation each
    assert len(episodes) <= 26 / 3  # grouped: at least three turns per episode on average
    for name, _, _ in episodes:
        assert 0 < len(name.split()) <= 12 and name.count(",") < 2  # a phrase, not a keyword list


def test_a_pause_longer_than_the_session_gap_starts_a_new_episode(
    settings: Settings, event_log: EventLog
) -> None:
    records = [interaction("bot", "ann", i, START, session="chat") for i in range(30)]
    for i, r in enumerate(records):  # turns an hour apart, then a day's silence after the 10th
        r["ts"] = (START + timedelta(hours=i) + (timedelta(days=1) if i >= 10 else timedelta())).isoformat()
    assert not event_log.append_many(records).rejected
    run_compress(settings)
    episodes = _episodes(settings)
    assert sum(len(ids) for _, ids, _ in episodes) == 20
    before, after = str(records[9]["event_id"]), str(records[10]["event_id"])
    # An hour between turns keeps them together; the day of silence ends the episode.
    assert not any(before in ids and after in ids for _, ids, _ in episodes)
    assert any(
        str(records[0]["event_id"]) in ids and str(records[1]["event_id"]) in ids for _, ids, _ in episodes
    )
