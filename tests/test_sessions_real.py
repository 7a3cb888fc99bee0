"""Session end through the real runtime, gap-fill and compressor: inline, and via a running scheduler."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from helpers_scheduler import QUIET_SCHEDULE, spawn, tiermem_cmd, wait_for, write_config
from tiermem.runtime.memory import end_session, open_memory, record_turn

from tiermem.app.jobs import read_run_log
from tiermem.app.scheduler import scheduler_running
from tiermem.app.sessions import SESSIONS_CONSUMER, handle_session_end
from tiermem.eventlog import Checkpoints, EventLog
from tiermem.ids import format_ts
from tiermem.settings import Settings, resolve_settings

START = datetime(2026, 2, 2, 10, 0, tzinfo=UTC)
TURNS = (
    (
        "My invoice for March shows a double charge of $49.",
        "I see the duplicate $49 charge; refund ticket #4471 is open.",
    ),
    ("Actually it was $59, not $49.", "Thanks for the correction: the duplicate charge is $59."),
    ("I prefer email, not phone calls.", "Noted: email only from now on."),
    ("The CSV export keeps timing out.", "Exports over 50k rows run in the background now."),
    ("Thanks, that's all for today.", "Glad to help, Alice."),
)


def _session(settings: Settings, session: str, n: int) -> None:
    with open_memory(
        settings,
        "support-bot",
        project_id="acme",
        user="alice",
        session_id=session,
        on_session_end=handle_session_end,
    ) as memory:
        for i in range(n):
            msg, resp = TURNS[i % len(TURNS)]
            record_turn(memory, msg, resp, ts=format_ts(START + timedelta(minutes=i)), channel="web-chat")
        end_session(memory, reason="user left")


def _episodes(settings: Settings) -> list[dict[str, Any]]:
    with EventLog(settings) as log:
        return [ev for _, _, ev in log.read("episodes") if ev["type"] == "episode"]


def test_end_session_processes_inline_without_a_scheduler(settings: Settings) -> None:
    _session(settings, "s-1", 30)  # over the limit: 20 to compress, 10 stay verbatim
    assert Checkpoints(settings).load(SESSIONS_CONSUMER)  # the consumer moved past the event
    eps = [e for e in _episodes(settings) if e.get("kind", "episode") == "episode"]
    assert eps, "the inline path compressed the agent that went over its limit"


@pytest.mark.slow
def test_end_session_is_left_to_a_running_scheduler(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_config(data, QUIET_SCHEDULE.replace("sessions_check_seconds = 3600", "sessions_check_seconds = 1"))
    settings = resolve_settings(data_dir=data, env={})
    proc = spawn(tiermem_cmd(data, "schedule"))
    try:
        wait_for(lambda: scheduler_running(settings) or proc.poll() is not None, 60, "the scheduler")
        assert proc.poll() is None
        _session(settings, "s-2", 30)
        # end_session returned without processing: the scheduler's sessions job does it.
        run = wait_for(
            lambda: [
                r
                for r in read_run_log(settings)
                if r["job"] == "sessions" and r["status"] == "ok" and r["summary"]["sessions"] >= 1
            ],
            120,
            "the scheduler's sessions job to process the ended session",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    processed = run[0]["summary"]["processed"]
    assert [(p["agent_id"], p["session_id"]) for p in processed] == [("support-bot", "s-2")]
    assert _episodes(settings)
