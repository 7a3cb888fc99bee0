"""The compress job: selection, thresholds, idempotency, relationships, crash safety (real processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers_compressor import log_lines, seed_interactions
from tiermem.compressor.job import compress_due, run_compress
from tiermem.compressor.offline_scorer import OfflineScorer
from tiermem.compressor.scoring import BatchResult, Interaction
from tiermem.compressor.selection import CompressorState, pending_counts

from tiermem.eventlog import EventLog
from tiermem.events import validate
from tiermem.settings import Settings, resolve_settings
from tiermem.sqlviews import open_catalog

REPO = Path(__file__).resolve().parents[1]


def _episodes(settings: Settings) -> list[tuple[str, list[str], bool]]:
    con = open_catalog(settings)
    try:
        rows = con.execute(
            "SELECT episode_id, source_event_ids, important FROM episodes ORDER BY episode_id"
        ).fetchall()
    finally:
        con.close()
    return [(r[0], list(r[1]), bool(r[2])) for r in rows]


def test_selection_leaves_the_newest_ten_per_agent_alone(settings: Settings, event_log: EventLog) -> None:
    a = seed_interactions(event_log, "agent-a", 40)
    b = seed_interactions(event_log, "agent-b", 23, user="bob")
    info = run_compress(settings)
    assert info.agents == 2 and info.interactions_scored == 30 + 13
    covered = {i for _, ids, _ in _episodes(settings) for i in ids}
    assert covered == {r["event_id"] for r in a[:30]} | {r["event_id"] for r in b[:13]}
    assert not covered & {r["event_id"] for r in a[30:] + b[13:]}  # working memory stays verbatim
    assert info.watermarks["agent-a"]["event_id"] == a[29]["event_id"]
    assert pending_counts(settings) == {"agent-a": 10, "agent-b": 10}


def test_an_agent_is_due_only_above_fifteen_pending(settings: Settings, event_log: EventLog) -> None:
    records = seed_interactions(event_log, "quiet", 15)
    assert run_compress(settings).interactions_scored == 0
    assert compress_due(settings).agents == 0
    event_log.append_many([{**records[-1], "event_id": "extra-1", "ts": "2025-03-02T10:00:00.000Z"}])
    info = compress_due(settings)
    assert info.agents == 1 and info.interactions_scored == 6


def test_second_run_appends_nothing(settings: Settings, event_log: EventLog) -> None:
    seed_interactions(event_log, "agent-a", 70)
    first = run_compress(settings)
    assert first.episodes > 0 and first.proposals > 0 and first.relationships == 1
    before = log_lines(settings.data_dir)
    second = run_compress(settings)
    assert (second.episodes, second.proposals, second.relationships, second.interactions_scored) == (
        0,
        0,
        0,
        0,
    )
    assert log_lines(settings.data_dir) == before


def test_importance_threshold_is_per_agent(settings: Settings, event_log: EventLog) -> None:
    seed_interactions(event_log, "reserved", 40)
    strict = replace(settings, compressor=replace(settings.compressor, agent_thresholds={"reserved": 11}))
    run_compress(strict)
    assert all(not important for _, _, important in _episodes(settings))


def test_relationships_are_produced_per_participant(settings: Settings, event_log: EventLog) -> None:
    seed_interactions(event_log, "agent-a", 40, user="alice")
    run_compress(settings)
    con = open_catalog(settings)
    rows = con.execute(
        "SELECT participant, summary, rapport, trust, last_spoke_ts FROM relationships_events"
    ).fetchall()
    con.close()
    assert len(rows) == 1
    participant, summary, rapport, trust, last_spoke = rows[0]
    assert participant == "alice"
    # A note a person would write, which does not start with the name (whoever shows it puts it first).
    assert summary.startswith("Talked with agent-a 40 times, most recently on 1 March 2025")
    assert not summary.lower().startswith("alice")
    # What is known is in the third person, not pasted quotes.
    assert "Known: alice" in summary and "(on " not in summary and " I " not in summary
    assert 0 <= rapport <= 1 and 0 <= trust <= 1 and last_spoke is not None


CHILD = r"""
import sys
from tiermem.settings import resolve_settings
from tiermem.compressor import job
from tiermem.compressor.offline_scorer import OfflineScorer

class Announcing(OfflineScorer):
    def score_batch(self, agent_id, batch):
        result = super().score_batch(agent_id, batch)
        print("batch", flush=True)
        return result

job.GROUP_BATCHES = 2
settings = resolve_settings(data_dir=sys.argv[1], env={})
job.run_compress(settings, scorer=Announcing())
print("done", flush=True)
"""


def _seed(data_dir: Path) -> Settings:
    s = resolve_settings(data_dir=data_dir, env={})
    with EventLog(s) as log:
        for agent in ("agent-a", "agent-b"):
            seed_interactions(log, agent, 1200)
    return s


def test_kill_9_mid_run_then_rerun_gives_the_clean_run_episode_ids(tmp_path: Path) -> None:
    clean = _seed(tmp_path / "clean")
    run_compress(clean)
    expected = _episodes(clean)

    crashed = _seed(tmp_path / "crashed")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(crashed.data_dir)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("batch")
        if seen == 45:  # mid-run: some groups committed, one in flight
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    partial = _episodes(crashed)
    assert 0 < len(partial) < len(expected)

    info = run_compress(crashed)
    assert info.interactions_scored > 0
    assert _episodes(crashed) == expected
    before = log_lines(crashed.data_dir)
    assert run_compress(crashed).episodes == 0
    assert log_lines(crashed.data_dir) == before


def test_cli_compress_json(settings: Settings, event_log: EventLog) -> None:
    seed_interactions(event_log, "agent-a", 40)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ANTHROPIC_API_KEY", None)
    out = subprocess.run(
        [sys.executable, "-m", "tiermem.app.cli", "--data-dir", str(settings.data_dir), "compress", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    summary = json.loads(out.stdout)
    assert summary["scorer"] == "offline"
    assert summary["interactions_scored"] == 30 and summary["episodes"] > 0
    for key in ("agents", "important", "proposals", "relationships", "elapsed_s"):
        assert key in summary


def test_episodes_reach_recall_through_the_projector(settings: Settings, event_log: EventLog) -> None:
    from tiermem.runtime.episode_search import search_episodes
    from tiermem.runtime.hotstore import connect
    from tiermem.runtime.projector import project
    from tiermem.runtime.visibility import Principal

    seed_interactions(event_log, "agent-a", 40, user="alice")
    run_compress(settings)
    project(settings)
    conn = connect(settings.hot_db)
    try:
        alice = Principal("agent-a", "alice")
        found = search_episodes(conn, alice, "the correction about Grindelwald", participant="alice")
        assert found and len(found) <= 3
        top = found[0]
        assert any("Grindelwald" in q["text"] for q in top["key_quotes"])
        assert "Grindelwald" in top["key_quotes"][0]["text"]  # best-matching quote first
        assert top["when"] == "1 March 2025" and top["start_ts"].startswith("2025-03-01")
        assert search_episodes(conn, alice, "Grindelwald", participant="bob") == []
        assert search_episodes(conn, Principal("agent-a", "bob"), "Grindelwald") == []
        assert search_episodes(conn, Principal("agent-a"), "Grindelwald") == []  # alice's, not agent-level
        assert search_episodes(conn, Principal("agent-b", "alice"), "Grindelwald") == []
    finally:
        conn.close()


def test_late_arrivals_with_older_timestamps_are_compressed_exactly_once(
    settings: Settings, event_log: EventLog
) -> None:
    recent = seed_interactions(event_log, "agent-a", 40)  # 1 March 2025
    assert run_compress(settings).interactions_scored == 30
    # A backfill of February's turns arrives after March was compressed.
    late = seed_interactions(event_log, "agent-a", 20, start=datetime(2025, 2, 1, 9, 0, tzinfo=UTC))
    with CompressorState(settings) as state:
        # Taking in reads only what was appended since the checkpoint, never compressed history.
        assert {e["event_id"] for _s, _l, e in state.new_interactions(event_log)} == {
            r["event_id"] for r in late
        }
    assert pending_counts(settings) == {"agent-a": 30}
    second = run_compress(settings)
    assert second.interactions_scored == 20 and second.episodes > 0
    uses = Counter(i for _, ids, _ in _episodes(settings) for i in ids)
    assert set(uses.values()) == {1}  # nothing compressed twice
    assert set(uses) == {r["event_id"] for r in recent[:30] + late}
    assert not set(uses) & {r["event_id"] for r in recent[30:]}  # the newest 10 stay verbatim
    before = log_lines(settings.data_dir)
    assert run_compress(settings).interactions_scored == 0
    assert log_lines(settings.data_dir) == before


def test_late_arrivals_into_a_sealed_day_are_picked_up(settings: Settings, event_log: EventLog) -> None:
    from tiermem.log.seal import seal

    seed_interactions(event_log, "agent-a", 40)
    run_compress(settings)
    event_log.close()
    seal(settings)
    assert list(settings.log_dir.rglob("*.parquet"))  # the March day is sealed
    with EventLog(settings) as log:
        late = seed_interactions(log, "agent-a", 12, start=datetime(2025, 3, 1, 8, 0, tzinfo=UTC))
    info = run_compress(settings)
    assert info.interactions_scored == 12  # 10 kept + 12 late: the 12 oldest are the late ones
    uses = Counter(i for _, ids, _ in _episodes(settings) for i in ids)
    assert set(uses.values()) == {1} and {r["event_id"] for r in late} <= set(uses)


def test_derived_events_are_stored_exactly_as_validation_would_store_them(
    settings: Settings, event_log: EventLog
) -> None:
    seed_interactions(event_log, "agent-a", 70)
    run_compress(settings)
    seen = Counter()
    for stream in ("episodes", "knowledge", "relationships"):
        for _segment, _line, event in event_log.read(stream):
            assert validate(event) == event
            assert next(iter(event)) == "event_id"
            seen[event["type"]] += 1
    assert seen["episode"] and seen["knowledge_proposed"] and seen["relationship_updated"]


class _CountingModel(OfflineScorer):
    """Stands in for a model: not deterministic, so the job must keep its answers."""

    deterministic = False

    def __init__(self) -> None:
        self.calls = 0

    def score_batch(self, agent_id: str, batch: list[Interaction]) -> BatchResult:
        self.calls += 1
        return super().score_batch(agent_id, batch)


def test_a_model_answer_is_never_asked_twice_after_a_crash_before_the_checkpoint(
    settings: Settings, event_log: EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_interactions(event_log, "agent-a", 40)
    real = CompressorState.mark_compressed

    def crash(self: CompressorState, done: dict[str, list[str]]) -> None:
        raise KeyboardInterrupt("killed between the append and the checkpoint")

    monkeypatch.setattr(CompressorState, "mark_compressed", crash)
    first = _CountingModel()
    with pytest.raises(KeyboardInterrupt):
        run_compress(settings, scorer=first)
    assert first.calls == 2 and list((settings.checkpoints_dir / "compressor-pending").glob("*.json"))
    monkeypatch.setattr(CompressorState, "mark_compressed", real)
    again = _CountingModel()
    info = run_compress(settings, scorer=again)
    assert again.calls == 0 and info.replayed_pending == 1 and info.interactions_scored == 0
    assert pending_counts(settings) == {"agent-a": 10}
    uses = Counter(i for _, ids, _ in _episodes(settings) for i in ids)
    assert len(uses) == 30 and set(uses.values()) == {1}


def test_events_built_off_schema_are_appended_in_their_validated_form() -> None:
    from tiermem.compressor.job import _Prepared

    from tiermem.errors import TiermemError

    good = validate(
        {
            "type": "relationship_updated",
            "event_id": "r1",
            "ts": "2025-03-01T09:00:00.000Z",
            "agent_id": "a",
            "participant": "alice",
            "summary": "s",
        }
    )
    prepared = _Prepared()
    assert prepared.check([good]) == [good] and "relationship_updated" in prepared.trusted
    # A None (dropped by validation) or a NUL (rejected) is caught even once the type is trusted.
    with_none = {**good, "event_id": "r2", "trust": None}
    assert prepared.check([with_none]) == [{**good, "event_id": "r2"}]
    with pytest.raises(TiermemError):
        prepared.check([{**good, "event_id": "r3", "summary": "bad\x00"}])


def test_a_threshold_check_with_nothing_due_takes_in_what_was_appended(
    settings: Settings, event_log: EventLog
) -> None:
    records = seed_interactions(event_log, "quiet", 12)
    assert compress_due(settings).agents == 0
    with CompressorState(settings) as state:
        assert list(state.new_interactions(event_log)) == []  # taken in: the next check reads nothing old
        assert len(state.pending_refs()["quiet"]) == 12
    event_log.append_many(
        [{**records[0], "event_id": f"more-{i}", "ts": f"2025-03-02T10:0{i}:00.000Z"} for i in range(5)]
    )
    info = compress_due(settings)
    assert info.agents == 1 and info.interactions_scored == 7


def test_a_data_root_of_the_first_version_is_migrated(settings: Settings, event_log: EventLog) -> None:
    from tiermem.eventlog import Checkpoints

    a = seed_interactions(event_log, "agent-a", 40)
    b = seed_interactions(event_log, "agent-b", 40, user="bob")
    # First version: agent-a compressed up to turn 19 (watermark); agent-b's group up to turn 29
    # was appended but its watermark never moved (a pending file was left).
    Checkpoints(settings).save(
        "compressor", {"agents": {"agent-a": {"ts": a[19]["ts"], "event_id": a[19]["event_id"]}}}
    )
    legacy = settings.checkpoints_dir / "compressor-pending" / "agent-b.json"
    legacy.parent.mkdir(parents=True, exist_ok=True)
    legacy.write_bytes(
        json.dumps(
            {"agent_id": "agent-b", "mark": {"ts": b[29]["ts"], "event_id": b[29]["event_id"]}, "events": []}
        ).encode()
    )
    info = run_compress(settings)
    assert info.replayed_pending == 1 and not legacy.exists()
    covered = {i for _, ids, _ in _episodes(settings) for i in ids}
    assert covered == {r["event_id"] for r in a[20:30]}  # only what the first version had not done
    assert pending_counts(settings) == {"agent-a": 10, "agent-b": 10}
