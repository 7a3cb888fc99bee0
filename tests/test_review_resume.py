"""A review SIGKILLed mid-run resumes from its per-(day, agent) checkpoint: nothing finished is redone.

The compress job's own kill -9 test is in test_compressor_job.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from tiermem.reviewer.job import report_paths, review_dir, run_review
from tiermem.reviewer.progress import ReviewProgress

from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import Settings, resolve_settings

REPO = Path(__file__).resolve().parents[1]
AGENTS = 30
DAY = "2026-11-20"

# The child reviews one agent per partition and stops dead after writing the files of the
# fifth report, before its checkpoint: it waits on stdin until the test kills it.
CHILD = r"""
import sys
from dataclasses import replace
from tiermem.settings import resolve_settings
from tiermem.reviewer import job

written = 0
original = job.write_report

def announcing(settings, r, files=None):
    global written
    paths = original(settings, r, files)
    written += 1
    print("written", r["agent_id"], flush=True)
    if written == 5:
        sys.stdin.readline()
    return paths

job.write_report = announcing
settings = resolve_settings(data_dir=sys.argv[1], env={})
settings = replace(settings, batch=replace(settings.batch, partition_agents=1))
job.run_review(settings)
print("done", flush=True)
"""


def seed(data_dir: Path) -> Settings:
    settings = resolve_settings(data_dir=data_dir, env={}, fsync="none")
    start = datetime(2026, 11, 20, 8, tzinfo=UTC)
    records = []
    for a in range(AGENTS):
        for i in range(8):
            ts = start + timedelta(minutes=i * AGENTS + a)
            records.append(
                {
                    "type": "interaction",
                    "event_id": derived_event_id(ts, "resume-test", str(a), str(i)),
                    "ts": format_ts(ts),
                    "agent_id": f"agent-{a:02d}",
                    "user": "alice",
                    "user_message": f"question {i}",
                    "agent_response": "" if i == 3 else f"answer {i} of agent {a}",
                    "model": "claude-sonnet-5",
                    "usage": {"input_tokens": 10 + i, "output_tokens": 5 + a},
                }
            )
    with EventLog(settings) as log:
        assert log.append_many(records).accepted == len(records)
    return settings


def all_reports(settings: Settings) -> dict[str, bytes]:
    root = review_dir(settings)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_review_killed_mid_run_resumes_without_redoing_finished_agents(tmp_path: Path) -> None:
    killed = seed(tmp_path / "killed")
    clean = replace(killed, data_dir=tmp_path / "clean")
    shutil.copytree(killed.data_dir, clean.data_dir)
    run_review(clean)

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ANTHROPIC_API_KEY", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(killed.data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    written = [proc.stdout.readline().split()[1] for _ in range(5)]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL

    with ReviewProgress(killed) as progress:
        recorded = progress.recorded()
    # The first four were recorded; the fifth was written but killed before its checkpoint.
    assert sorted(a for _d, a in recorded) == written[:4]
    finished = {a: report_paths(killed, DAY, a)["json"].stat().st_mtime_ns for a in written[:4]}

    info = run_review(killed)
    assert info.resumed == 4 and info.reports == AGENTS
    assert len(info.files) == 3 * (AGENTS - 4)  # only the unfinished agents were computed and written
    for agent, mtime in finished.items():
        assert report_paths(killed, DAY, agent)["json"].stat().st_mtime_ns == mtime
    # No gap, no duplicate: the same files as a run that was never interrupted.
    assert all_reports(killed) == all_reports(clean)
    with ReviewProgress(killed) as progress:
        assert progress.recorded() == {}  # a finished run leaves nothing to resume
    again = run_review(killed)
    assert again.resumed == 0 and again.reports == AGENTS


class Crashing:
    """The local engine, except that the job dies after `n` partitions (as if killed)."""

    name = "local"
    workers = 1

    def __init__(self, n: int) -> None:
        self.n = n

    def map(self, fn: Any, items: Any, *shared: Any) -> Iterator[Any]:
        for done, item in enumerate(items):
            if done == self.n:
                raise KeyboardInterrupt("killed")
            yield fn(*shared, item)


def test_a_resumed_review_recomputes_an_agent_whose_turns_changed_since(tmp_path: Path) -> None:
    settings = seed(tmp_path / "d")
    settings = replace(settings, batch=replace(settings.batch, partition_agents=1))
    with pytest.raises(KeyboardInterrupt):
        run_review(settings, day=DAY, engine=Crashing(3))
    with EventLog(settings) as log:  # a late turn of a finished agent, before the resume
        log.append_many(
            [
                {
                    "type": "interaction",
                    "agent_id": "agent-00",
                    "ts": f"{DAY}T20:00:00.000Z",
                    "user_message": "late",
                    "agent_response": "late answer",
                }
            ]
        )
    info = run_review(settings, day=DAY)
    assert info.resumed == 2 and info.reports == AGENTS  # agent-01 and agent-02 kept, agent-00 redone
    report = orjson.loads(report_paths(settings, DAY, "agent-00")["json"].read_bytes())
    assert report["interactions"] == 9
