"""Batch jobs on Ray: the same events and reports as the local engine, a worker killed mid-job, the scheduler.

One local Ray (2 CPUs, no dashboard, offline) is started for the whole
module and stopped at its end; every test copies the same ingested demo
history, so the engines are compared on identical logs.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import ray
from tiermem.compressor.job import run_compress
from tiermem.compressor.offline_scorer import OfflineScorer
from tiermem.compressor.scoring import BatchResult, Interaction
from tiermem.compressor.selection import pending_counts
from tiermem.evolver.job import run_evolve
from tiermem.reviewer.job import review_dir, run_review

from tiermem.app import samples
from tiermem.app.cli import main
from tiermem.app.engines import RayEngine, open_engine
from tiermem.app.jobs import run_job
from tiermem.engine import LOCAL
from tiermem.eventlog import EventLog
from tiermem.registry import STREAMS
from tiermem.settings import Settings, resolve_settings

NOW = datetime(2026, 11, 24, 12, tzinfo=UTC)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        configure_logging=False,
        log_to_driver=False,
        logging_level="ERROR",
    )
    # The test's own scorer is sent by value: the workers do not have this folder on their path.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's generated history (2,000 turns, 5 days), ingested once; tests work on copies."""
    from tiermem.ingest.pipeline import ingest_file

    root = tmp_path_factory.mktemp("demo") / "data"
    settings = resolve_settings(data_dir=root, env={}, fsync="none")
    sample = root.parent / "sample.jsonl"
    samples.write_jsonl(sample, samples.generate(days=5, per_day=400, seed=7, end=date(2026, 11, 23)))
    ingest_file(settings, sample, progress=False)
    return root


def copy_of(demo_root: Path, dest: Path, **batch: Any) -> Settings:
    shutil.copytree(demo_root, dest)
    settings = resolve_settings(data_dir=dest, env={}, fsync="none")
    return replace(settings, batch=replace(settings.batch, **batch)) if batch else settings


def derived_events(settings: Settings) -> dict[str, dict[str, Any]]:
    """Every event the jobs appended (all but the ingested turns), by id; a repeated id fails the test."""
    out: dict[str, dict[str, Any]] = {}
    with EventLog(settings) as log:
        for stream in STREAMS:
            for _segment, _line, event in log.read(stream, {}):
                if event.get("type") == "interaction":
                    continue
                assert event["event_id"] not in out, f"duplicate {event['event_id']}"
                out[event["event_id"]] = event
    return out


def reports(settings: Settings) -> dict[str, bytes]:
    root = review_dir(settings)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def run_all(settings: Settings, engine: Any) -> tuple[Any, Any, Any]:
    compressed = run_compress(settings, progress=False, engine=engine)
    evolved = run_evolve(settings, now=NOW, progress=False, engine=engine)
    reviewed = run_review(settings, engine=engine)
    return compressed, evolved, reviewed


def test_ray_appends_the_same_events_and_writes_the_same_reports_as_local(
    ray_cluster: None, demo_root: Path, tmp_path: Path
) -> None:
    local = copy_of(demo_root, tmp_path / "local")
    # Small partitions and tasks, so the Ray run really is cut into many of each.
    on_ray = copy_of(demo_root, tmp_path / "ray", engine="ray", partition_agents=2, task_interactions=200)
    lc, le, lr = run_all(local, LOCAL)
    with open_engine(on_ray) as engine:
        assert isinstance(engine, RayEngine) and engine.workers == 2
        rc, re_, rr = run_all(on_ray, engine)
    assert rc.engine == "ray" and lc.engine == "local"
    assert lc.episodes > 100 and lc.proposals > 0 and le.decided > 0 and lr.reports > 10
    assert (rc.episodes, rc.proposals, rc.relationships) == (lc.episodes, lc.proposals, lc.relationships)
    assert (re_.decided, re_.created, re_.merged, re_.pending) == (
        le.decided,
        le.created,
        le.merged,
        le.pending,
    )
    local_events, ray_events = derived_events(local), derived_events(on_ray)
    assert len(local_events) > 200
    assert ray_events == local_events  # same ids, same contents
    assert rr.reports == lr.reports and reports(on_ray) == reports(local)


class GatedScorer(OfflineScorer):
    """The offline scorer, except that the first worker to score `agent` says so and waits to be killed."""

    def __init__(self, gate: Path, agent: str) -> None:
        self.gate, self.agent = gate, agent

    def score_batch(self, agent_id: str, batch: list[Interaction]) -> BatchResult:
        if agent_id == self.agent and not (self.gate / "released").exists():
            tmp = self.gate / f".started-{os.getpid()}"
            tmp.write_text(str(os.getpid()))
            tmp.rename(self.gate / f"started-{os.getpid()}")
            while not (self.gate / "released").exists():
                time.sleep(0.01)  # held here until the test kills this worker (or releases it)
        return super().score_batch(agent_id, batch)


def test_a_worker_killed_mid_job_is_retried_with_no_duplicate_and_no_gap(
    ray_cluster: None, demo_root: Path, tmp_path: Path
) -> None:
    local = copy_of(demo_root, tmp_path / "local")
    on_ray = copy_of(demo_root, tmp_path / "ray", engine="ray", task_interactions=200)
    gate = tmp_path / "gate"
    gate.mkdir()
    expected = run_compress(local, progress=False)
    victim = sorted(pending_counts(on_ray))[1]

    result: dict[str, Any] = {}

    def job() -> None:
        with open_engine(on_ray) as engine:
            result["info"] = run_compress(
                on_ray, progress=False, engine=engine, scorer=GatedScorer(gate, victim)
            )

    thread = threading.Thread(target=job)
    thread.start()
    deadline = time.monotonic() + 120
    while not list(gate.glob("started-*")):
        assert thread.is_alive() and time.monotonic() < deadline, "no worker reached the gate"
        time.sleep(0.01)
    pid = int(next(gate.glob("started-*")).read_text())
    os.kill(pid, signal.SIGKILL)  # a worker dies in the middle of its task
    (gate / "released").touch()  # the retry (on a fresh worker) may go through
    thread.join(timeout=300)
    assert not thread.is_alive()
    info = result["info"]
    assert info.interactions_scored == expected.interactions_scored
    assert (info.episodes, info.proposals) == (expected.episodes, expected.proposals)
    # Every interaction compressed once: no gap, no duplicate, the same events as an undisturbed run.
    assert derived_events(on_ray) == derived_events(local)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_scheduler_submits_its_batch_jobs_to_ray(
    ray_cluster: None, demo_root: Path, tmp_path: Path
) -> None:
    settings = copy_of(demo_root, tmp_path / "sched", engine="ray")
    record = run_job(settings, "compress", echo=open(os.devnull, "w"))  # noqa: SIM115
    assert record.status == "ok", record.error
    assert record.summary["engine"] == "ray" and record.summary["episodes"] > 100
    record = run_job(settings, "evolve", echo=open(os.devnull, "w"))  # noqa: SIM115
    assert record.status == "ok", record.error


def test_ray_missing_or_unknown_engine_is_a_one_line_error(tmp_path: Path) -> None:
    from tiermem.errors import ConfigError

    settings = resolve_settings(data_dir=tmp_path / "d", env={})
    with pytest.raises(ConfigError, match="unknown engine"), open_engine(settings, "spark"):
        pass
    with pytest.raises(ConfigError, match=r"batch\.engine"):
        resolve_settings(data_dir=tmp_path / "d", env={"TIERMEM_BATCH__ENGINE": "spark"})


def test_cli_engine_flag_and_json_summary_name_the_engine(demo_root: Path, tmp_path: Path) -> None:
    settings = copy_of(demo_root, tmp_path / "j")
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(
            [
                "--data-dir",
                str(settings.data_dir),
                "review",
                "--day",
                "2026-11-23",
                "--engine",
                "local",
                "--json",
            ]
        )
    assert code == 0
    summary = orjson.loads(out.getvalue())
    assert summary["engine"] == "local" and summary["reports"] > 0 and summary["resumed"] == 0
    with pytest.raises(SystemExit):  # argparse refuses an engine it does not know
        main(["--data-dir", str(settings.data_dir), "compress", "--engine", "spark"])
