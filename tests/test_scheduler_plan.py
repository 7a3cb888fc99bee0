"""The schedule built from settings and the run log: catch-up after downtime, coalesced misfires."""

from __future__ import annotations

import io
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from apscheduler.triggers.interval import IntervalTrigger
from helpers_scheduler import wait_for

from tiermem.app.jobs import RunRecord, append_run_record
from tiermem.app.scheduler import PlannedJob, Scheduler, plan_jobs
from tiermem.ids import format_ts
from tiermem.settings import Settings, resolve_settings

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def _ok(settings: Settings, job: str, when: datetime) -> None:
    append_run_record(
        settings,
        RunRecord(
            job=job, trigger="scheduled", status="ok", started_at=format_ts(when), finished_at=format_ts(when)
        ),
    )


def test_fresh_root_runs_frequent_jobs_at_start_and_waits_for_the_rest(settings: Settings) -> None:
    plans = {p.name: p for p in plan_jobs(settings, NOW)}
    assert set(plans) == {"threshold_check", "sessions", "project", "compress", "evolve", "seal", "review"}
    assert plans["threshold_check"].first_run == NOW
    assert plans["sessions"].first_run == NOW
    assert plans["compress"].first_run == NOW + timedelta(minutes=settings.scheduler.compress_minutes)
    assert plans["seal"].first_run == datetime(2026, 3, 11, 0, 15, tzinfo=UTC)
    assert plans["review"].first_run == datetime(2026, 3, 11, 1, 0, tzinfo=UTC)


def test_downtime_catch_up_runs_each_missed_job_once(settings: Settings) -> None:
    # The last scheduler ran two days ago; it sealed and reviewed then.
    _ok(settings, "seal", NOW - timedelta(days=2))
    _ok(settings, "review", NOW - timedelta(days=2))
    _ok(settings, "compress", NOW - timedelta(hours=5))
    _ok(settings, "evolve", NOW - timedelta(minutes=10))
    plans = {p.name: p for p in plan_jobs(settings, NOW)}
    assert plans["seal"].first_run == NOW and "missed" in plans["seal"].reason
    assert plans["review"].first_run == NOW
    assert plans["compress"].first_run == NOW
    assert plans["evolve"].first_run == NOW - timedelta(minutes=10) + timedelta(minutes=60)


def test_no_catch_up_when_the_last_firing_was_done(settings: Settings) -> None:
    _ok(settings, "seal", datetime(2026, 3, 10, 0, 16, tzinfo=UTC))
    plans = {p.name: p for p in plan_jobs(settings, NOW)}
    assert plans["seal"].first_run == datetime(2026, 3, 11, 0, 15, tzinfo=UTC)


def test_settings_from_toml_and_env(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiermem.toml").write_text("[scheduler]\nthreshold_check_seconds = 5\nseal_hour_utc = 3\n")
    s = resolve_settings(data_dir=data, env={"TIERMEM_SCHEDULER__SESSIONS_CHECK_SECONDS": "7"})
    plans = {p.name: p for p in plan_jobs(s, NOW)}
    assert plans["threshold_check"].every == "every 5s"
    assert plans["sessions"].every == "every 7s"
    assert plans["seal"].every == "daily 03:15 UTC"


def test_misfired_runs_are_coalesced_into_one(settings: Settings) -> None:
    """A job whose trigger fired five times while the machine slept runs once, not five times."""
    settings = replace(settings, scheduler=replace(settings.scheduler, stop_grace_seconds=10))
    calls: list[int] = []
    sched = Scheduler(
        settings, echo=io.StringIO(), job_funcs={"evolve": lambda s: calls.append(1) or {"n": len(calls)}}
    )
    now = datetime.now(UTC)
    plan = PlannedJob(
        "evolve", IntervalTrigger(hours=1, timezone=UTC), "every 1 h", now - timedelta(hours=5), ""
    )
    sched.acquire()
    aps = sched.build([plan])
    aps.start()
    try:
        wait_for(lambda: calls, 30, "the coalesced run")
        wait_for(lambda: sched._idle.is_set(), 30, "the run to finish")
        job = aps.get_job("evolve")
        assert job.next_run_time > now  # no backlog of past firings left to run
    finally:
        aps.shutdown(wait=True)
        sched.release()
    assert calls == [1]


def test_stop_waits_for_the_running_job(settings: Settings) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(s: Settings) -> str:
        started.set()
        release.wait(30)
        return "done"

    out = io.StringIO()
    sched = Scheduler(settings, echo=out, job_funcs={"threshold_check": slow, "sessions": lambda s: None})
    runner = threading.Thread(target=lambda: infos.append(sched.run()))
    infos: list = []
    runner.start()
    assert started.wait(30)
    sched.stop("test")
    threading.Timer(0.3, release.set).start()
    runner.join(60)
    assert infos and not infos[0].forced_exit
    assert infos[0].runs.get("threshold_check") == 1
    assert "waiting up to" in out.getvalue()


def test_nightly_review_covers_the_days_since_the_last_one(settings: Settings) -> None:
    from tiermem.app.jobs import review_new_days
    from tiermem.ids import utcnow

    yesterday = utcnow().date() - timedelta(days=1)
    assert review_new_days(settings)["days"] == [yesterday.isoformat()]
    _ok(settings, "review", datetime.combine(yesterday - timedelta(days=2), datetime.min.time(), UTC))
    days = review_new_days(settings)["days"]
    assert days == [(yesterday - timedelta(days=n)).isoformat() for n in (2, 1, 0)]
    _ok(settings, "review", utcnow() - timedelta(days=30))
    _ok(settings, "review", utcnow())  # reviewed today already (yesterday is covered)
    assert review_new_days(settings)["days"] == []


def test_a_large_run_log_is_rotated_keeping_what_the_plan_needs(settings: Settings) -> None:
    from tiermem.app.jobs import read_run_log, rotate_run_log, run_log_path

    _ok(settings, "seal", NOW - timedelta(days=2))
    for i in range(300):
        _ok(settings, "threshold_check", NOW - timedelta(minutes=300 - i))
    before = plan_jobs(settings, NOW)
    archived = rotate_run_log(settings, max_bytes=1000)
    assert archived is not None and archived.exists()
    kept = read_run_log(settings)
    assert len(kept) == 2 and run_log_path(settings).stat().st_size < 1000
    assert [(p.name, p.first_run) for p in plan_jobs(settings, NOW)] == [
        (p.name, p.first_run) for p in before
    ]
    assert rotate_run_log(settings, max_bytes=1000) is None
