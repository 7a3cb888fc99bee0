"""Session-end processing: the inline path, the scheduler path, the checkpointed consumer.

The gap-fill and compressor calls are injected TEST DOUBLES here (they record
their calls) so that these tests pin down the routing; the real pipeline runs
in test_sessions_real.py and the demo test.
"""

from __future__ import annotations

from typing import Any

from tiermem.app.scheduler import scheduler_lock_path
from tiermem.app.sessions import SESSIONS_CONSUMER, handle_session_end, process_pending_sessions
from tiermem.errors import TransientError
from tiermem.eventlog import Checkpoints, EventLog
from tiermem.locks import job_lock, release_flock, try_flock
from tiermem.settings import Settings


class Recorder:
    """TEST DOUBLE for gap-fill and compression: records (agent, session) calls."""

    def __init__(self, fail_on: str | None = None, transient_on: str | None = None) -> None:
        self.gap_fills: list[tuple[str, str]] = []
        self.compressions: list[str] = []
        self.fail_on = fail_on
        self.transient_on = transient_on

    def gap_fill(self, settings: Settings, agent_id: str, session_id: str) -> dict[str, Any]:
        if session_id == self.transient_on:
            raise TransientError("model overloaded")
        if session_id == self.fail_on:
            raise ValueError("bad session")
        self.gap_fills.append((agent_id, session_id))
        return {"proposals": 1}

    def compress(self, settings: Settings, agent_id: str) -> dict[str, Any]:
        self.compressions.append(agent_id)
        return {"agents": 1}


def _end(log: EventLog, agent: str, session: str) -> None:
    log.append({"type": "session_ended", "agent_id": agent, "session_id": session, "reason": "closed"})


def test_inline_when_no_scheduler_runs(settings: Settings, event_log: EventLog) -> None:
    rec = Recorder()
    _end(event_log, "ada", "s0")  # an earlier session nobody processed
    _end(event_log, "ada", "s1")
    info = handle_session_end(settings, "ada", "s1", gap_fill=rec.gap_fill, compress_agent=rec.compress)
    assert info.path == "inline"
    assert info.outcome is not None and info.outcome.gap_fill == {"proposals": 1}
    assert info.outcome.compression == {"agents": 1}
    assert info.other_sessions == 1
    assert rec.gap_fills == [("ada", "s0"), ("ada", "s1")]
    assert rec.compressions == ["ada", "ada"]
    # The consumer moved past both: a scheduler started later does not redo them.
    again = process_pending_sessions(settings, gap_fill=rec.gap_fill, compress_agent=rec.compress)
    assert again.sessions == 0
    assert Checkpoints(settings).load(SESSIONS_CONSUMER)


def test_left_to_the_scheduler_when_one_holds_the_root(settings: Settings, event_log: EventLog) -> None:
    rec = Recorder()
    _end(event_log, "ada", "s1")
    fd = try_flock(scheduler_lock_path(settings), "tiermem schedule")  # what a running scheduler holds
    assert fd is not None
    try:
        info = handle_session_end(settings, "ada", "s1", gap_fill=rec.gap_fill, compress_agent=rec.compress)
    finally:
        release_flock(fd)
    assert info.path == "scheduler"
    assert "sessions job" in info.note
    assert rec.gap_fills == [] and rec.compressions == []
    # ... and the scheduler's job picks it up from the checkpoint.
    job = process_pending_sessions(settings, gap_fill=rec.gap_fill, compress_agent=rec.compress)
    assert [(o.agent_id, o.session_id) for o in job.processed] == [("ada", "s1")]


def test_session_without_event_is_processed_directly(settings: Settings) -> None:
    rec = Recorder()
    info = handle_session_end(settings, "bob", "lone", gap_fill=rec.gap_fill, compress_agent=rec.compress)
    assert info.path == "inline" and rec.gap_fills == [("bob", "lone")]


def test_transient_failure_stops_before_the_session_and_retries(
    settings: Settings, event_log: EventLog
) -> None:
    _end(event_log, "ada", "s1")
    _end(event_log, "ada", "s2")
    _end(event_log, "ada", "s3")
    flaky = Recorder(transient_on="s2")
    job = process_pending_sessions(settings, gap_fill=flaky.gap_fill, compress_agent=flaky.compress)
    assert [o.session_id for o in job.processed] == ["s1"]
    assert job.retry_later and "overloaded" in job.retry_later
    healthy = Recorder()
    job = process_pending_sessions(settings, gap_fill=healthy.gap_fill, compress_agent=healthy.compress)
    assert [o.session_id for o in job.processed] == ["s2", "s3"]


def test_a_failing_session_is_recorded_and_does_not_block_later_ones(
    settings: Settings, event_log: EventLog
) -> None:
    _end(event_log, "ada", "bad")
    _end(event_log, "ada", "good")
    rec = Recorder(fail_on="bad")
    job = process_pending_sessions(settings, gap_fill=rec.gap_fill, compress_agent=rec.compress)
    assert job.errors == 1
    assert job.processed[0].error and "bad session" in job.processed[0].error
    assert rec.gap_fills == [("ada", "good")]


def test_compression_skipped_while_a_compress_run_holds_the_lock(
    settings: Settings, event_log: EventLog
) -> None:
    _end(event_log, "ada", "s1")
    rec = Recorder()

    # The lock held by another thread stands for a manual `tiermem compress` elsewhere.
    import threading

    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with job_lock(settings, "compress"):
            held.set()
            release.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(30)
    try:
        info = handle_session_end(settings, "ada", "s1", gap_fill=rec.gap_fill, compress_agent=rec.compress)
    finally:
        release.set()
        t.join()
    assert info.outcome is not None and info.outcome.compression_skipped
    assert rec.gap_fills == [("ada", "s1")] and rec.compressions == []
