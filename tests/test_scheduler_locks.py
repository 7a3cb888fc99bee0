"""One scheduler per data root, job locks across processes, SIGTERM handling (real subprocesses)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from helpers_scheduler import (
    QUIET_SCHEDULE,
    SLOW_STEPS,
    double_cmd,
    spawn,
    tiermem_cmd,
    wait_for,
    write_config,
)

from tiermem.app.jobs import read_run_log, run_job
from tiermem.app.scheduler import scheduler_running
from tiermem.errors import AlreadyRunningError
from tiermem.locks import job_lock
from tiermem.settings import Settings, resolve_settings


def _stop(proc: subprocess.Popen[str], timeout: float = 60) -> tuple[int, str, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_second_scheduler_on_same_root_refuses(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_config(data, QUIET_SCHEDULE)
    settings = resolve_settings(data_dir=data, env={})
    first = spawn(tiermem_cmd(data, "schedule", "--json"))
    try:
        wait_for(lambda: scheduler_running(settings) or first.poll() is not None, 60, "the first scheduler")
        assert first.poll() is None, first.communicate()
        second = subprocess.run(
            tiermem_cmd(data, "schedule"), capture_output=True, text=True, timeout=60, cwd=Path.cwd()
        )
        assert second.returncode == 1
        assert "a scheduler is already running" in second.stderr
        assert f"pid {first.pid}" in second.stderr
        # A scheduler on another data root is independent.
        other = tmp_path / "other"
        write_config(other, QUIET_SCHEDULE)
        third = spawn(tiermem_cmd(other, "schedule"))
        other_settings = resolve_settings(data_dir=other, env={})
        wait_for(lambda: scheduler_running(other_settings) or third.poll() is not None, 60, "the other root")
        assert third.poll() is None
        assert _stop(third)[0] == 0
        # Wait for the jobs that run at start, so the JSON stream has something to show.
        wait_for(
            lambda: len([r for r in read_run_log(settings) if r["status"] != "started"]) >= 3,
            60,
            "start jobs",
        )
    finally:
        code, out, err = _stop(first)
    assert code == 0, err
    assert "stopped (SIGTERM)" in err
    records = [orjson.loads(line) for line in out.splitlines()]  # JSON Lines: one run record per line
    assert {r["job"] for r in records} >= {"threshold_check", "sessions", "project"}
    assert all(r["status"] in ("ok", "error", "skipped") for r in records)
    assert not scheduler_running(settings)  # the lock goes with the process


def test_manual_job_refused_while_scheduled_run_holds_its_lock(settings: Settings) -> None:
    with job_lock(settings, "compress", what="scheduled compress"):
        # Another process: the CLI's manual compress must take the same lock.
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from tiermem.locks import job_lock; from tiermem.settings import resolve_settings;"
                f"s = resolve_settings(data_dir={str(settings.data_dir)!r}, env={{}});"
                "\ntry:\n with job_lock(s, 'compress'): sys.exit(0)\n"
                "except Exception as e:\n print(e); sys.exit(5)",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 5
        assert "already running" in proc.stdout and "scheduled compress" in proc.stdout
        # The scheduler's view of the same clash: the run is recorded as skipped, not run twice.
        other = threading.Thread(
            target=lambda: results.append(run_job(settings, "compress", func=lambda s: 1))
        )
        results: list = []
        other.start()
        other.join()
        assert results[0].status == "skipped"
    # Free again: a run goes through and is logged with its summary.
    record = run_job(settings, "compress", func=lambda s: {"agents": 2})
    assert record.status == "ok" and record.summary == {"agents": 2}
    statuses = [(r["job"], r["status"]) for r in read_run_log(settings)]
    assert statuses == [("compress", "skipped"), ("compress", "started"), ("compress", "ok")]


def test_job_lock_is_reentrant_for_its_thread_only(settings: Settings) -> None:
    with job_lock(settings, "seal"), job_lock(settings, "seal"):
        errors: list[Exception] = []

        def other() -> None:
            try:
                with job_lock(settings, "seal"):
                    pass
            except AlreadyRunningError as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join()
        assert len(errors) == 1
    with job_lock(settings, "seal"):
        pass


def test_job_error_is_logged_not_raised(settings: Settings) -> None:
    def boom(s: Settings) -> None:
        raise RuntimeError("disk on fire")

    record = run_job(settings, "review", func=boom)
    assert record.status == "error" and "disk on fire" in (record.error or "")
    assert read_run_log(settings)[-1]["status"] == "error"


@pytest.mark.slow
def test_sigterm_during_a_job_leaves_a_state_the_next_run_completes(tmp_path: Path) -> None:
    """Uses the slow TEST DOUBLE job; the real-compressor version is in test_scheduler_compress.py."""
    data = tmp_path / "data"
    write_config(data, QUIET_SCHEDULE + "stop_grace_seconds = 0.3\n")
    settings = resolve_settings(data_dir=data, env={})
    proc = spawn(double_cmd("slow_compress", data, "schedule"))
    try:
        wait_for(lambda: len(list((data / "double").glob("step-*"))) >= 3, 60, "the job to be mid-run")
    finally:
        code, _, err = _stop(proc)
    assert code == 0, err
    assert "exiting anyway" in err
    done_after_kill = len(list((data / "double").glob("step-*")))
    assert 0 < done_after_kill < SLOW_STEPS
    runs = read_run_log(settings)
    assert [r["status"] for r in runs if r["job"] == "threshold_check"] == ["started"]
    # The next run completes the work, without redoing what was done.
    rerun = subprocess.run(
        double_cmd("slow_compress", data, "schedule", "--once", "compress", "--json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rerun.returncode == 0, rerun.stderr
    record = orjson.loads(rerun.stdout)
    assert record["status"] == "ok"
    assert record["summary"]["done"] == SLOW_STEPS - done_after_kill
    assert len(list((data / "double").glob("step-*"))) == SLOW_STEPS


def test_manual_cli_compress_is_refused_while_the_job_runs(settings: Settings) -> None:
    with job_lock(settings, "compress", what="scheduled threshold_check"):
        proc = subprocess.run(
            tiermem_cmd(settings.data_dir, "compress", "--json"), capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 1
    assert "already running" in proc.stderr and "scheduled threshold_check" in proc.stderr
    proc = subprocess.run(
        tiermem_cmd(settings.data_dir, "compress", "--json"), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr


def test_a_second_signal_exits_without_waiting_for_the_job(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_config(data, QUIET_SCHEDULE + "stop_grace_seconds = 600\n")
    proc = spawn(double_cmd("slow_compress", data, "schedule"))
    try:
        wait_for(lambda: len(list((data / "double").glob("step-*"))) >= 2, 60, "the job to be mid-run")
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # let the first signal be handled before the second (the grace is 600 s)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert "second SIGTERM: exiting now" in err
    assert len(list((data / "double").glob("step-*"))) < SLOW_STEPS
