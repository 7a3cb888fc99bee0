"""`tiermem schedule`: the daemon that runs the batch jobs so nobody has to remember to.

The compressor runs automatically, from a post-session hook or a threshold
trigger when an agent exceeds its interaction limit (docs/operations.md).
The scheduler runs, per data root:

- threshold_check  every `threshold_check_seconds`: compress any agent over its limit
- sessions         every `sessions_check_seconds`: gap-fill + compress for ended sessions
- compress         every `compress_minutes`
- evolve           every `evolve_minutes`
- project          every `project_seconds`: apply new derived events to the hot store
- seal             daily at `seal_hour_utc:seal_minute_utc`
- review           daily at `review_hour_utc:review_minute_utc`

Design decisions:

- The jobs are rebuilt from settings at every start (APScheduler memory job
  store). A pickled job store would outlive the code and settings that made it.
- Exactly one scheduler per data root: it holds an exclusive flock on
  `<data>/locks/scheduler.lock` for its lifetime; a second one gets
  AlreadyRunningError (exit 1). The kernel drops the lock when the process
  dies, so a crashed scheduler never leaves a stale lock behind.
- One worker thread: the scheduler's own jobs never overlap each other; the
  per-job flocks (tiermem.app.jobs) keep them from overlapping manual runs.
- coalesce=True, max_instances=1, misfire_grace_time: after a sleep, a job
  that missed several firings runs once. Downtime is read from the run log:
  a daily job whose last firing passed while no scheduler ran runs once at
  start, and interval jobs resume from their last successful run.
- SIGTERM/SIGINT: stop firing, let the running job finish for up to
  `stop_grace_seconds`, then exit. Jobs are checkpointed and idempotent, so if
  the grace runs out the process exits anyway and the next run completes the
  work (no duplicates, no gaps); the run log shows the run as started-only.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import orjson
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from tiermem.app.api import Memory
from tiermem.app.jobs import (
    JOBS,
    RunRecord,
    has_run_before,
    last_success,
    rotate_run_log,
    run_job,
)
from tiermem.errors import AlreadyRunningError
from tiermem.ids import format_ts, utcnow
from tiermem.locks import lock_is_held, read_lock_holder, release_flock, try_flock
from tiermem.output import emit_json, format_table
from tiermem.settings import Settings

SCHEDULER_LOCK_NAME = "scheduler.lock"


def scheduler_lock_path(settings: Settings) -> Path:
    return settings.locks_dir / SCHEDULER_LOCK_NAME


def scheduler_running(settings: Settings) -> bool:
    """True when a scheduler holds this data root (session ends are then left to it)."""
    return lock_is_held(scheduler_lock_path(settings))


@dataclass(frozen=True)
class PlannedJob:
    """One job as the scheduler will run it: its trigger and its first run time."""

    name: str
    trigger: BaseTrigger
    every: str  # human form of the trigger
    first_run: datetime
    reason: str  # why the first run is when it is


def _daily_previous_fire(now: datetime, hour: int, minute: int) -> datetime:
    today = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return today if today <= now else today - timedelta(days=1)


def plan_jobs(settings: Settings, now: datetime | None = None) -> list[PlannedJob]:
    """The schedule for this data root, from settings and the run log (pure: nothing runs)."""
    now = now or utcnow()
    sched = settings.scheduler
    plans: list[PlannedJob] = []

    frequent = (
        ("threshold_check", sched.threshold_check_seconds),
        ("sessions", sched.sessions_check_seconds),
        ("project", sched.project_seconds),
    )
    for name, seconds in frequent:
        plans.append(
            PlannedJob(
                name,
                IntervalTrigger(seconds=seconds, timezone=UTC),
                f"every {seconds}s",
                now,
                "at start, then on the interval",
            )
        )

    periodic = (("compress", sched.compress_minutes), ("evolve", sched.evolve_minutes))
    for name, minutes in periodic:
        interval = timedelta(minutes=minutes)
        last = last_success(settings, name)
        if last is None:
            first, reason = now + interval, "one interval after start (no earlier run)"
        elif last + interval <= now:
            first, reason = now, f"at start: last run {format_ts(last)} is more than one interval ago"
        else:
            first, reason = last + interval, f"one interval after the last run {format_ts(last)}"
        plans.append(
            PlannedJob(
                name, IntervalTrigger(minutes=minutes, timezone=UTC), f"every {minutes} min", first, reason
            )
        )

    daily = (
        ("seal", sched.seal_hour_utc, sched.seal_minute_utc),
        ("review", sched.review_hour_utc, sched.review_minute_utc),
    )
    for name, hour, minute in daily:
        trigger = CronTrigger(hour=hour, minute=minute, timezone=UTC)
        fire = trigger.get_next_fire_time(None, now)
        assert fire is not None  # a daily cron always has a next firing
        previous = _daily_previous_fire(now, hour, minute)
        last = last_success(settings, name)
        missed = has_run_before(settings, name) and (last is None or last < previous)
        if missed:
            first, reason = now, f"at start: the {format_ts(previous)} run was missed (downtime), run once"
        else:
            first, reason = fire, "next daily firing"
        plans.append(PlannedJob(name, trigger, f"daily {hour:02d}:{minute:02d} UTC", first, reason))
    return plans


@dataclass
class SchedulerInfo:
    """What a scheduler did between start and stop."""

    data_dir: str
    pid: int
    started_at: str
    stopped_at: str | None = None
    stop_reason: str | None = None
    runs: dict[str, int] = field(default_factory=dict)  # job -> runs finished
    errors: int = 0
    forced_exit: bool = False  # the grace ran out with a job still running


class Scheduler:
    """One data root's scheduler. `run()` blocks until `stop()` (or SIGTERM/SIGINT via `install_signals`)."""

    def __init__(
        self,
        settings: Settings,
        *,
        echo: TextIO | None = None,
        json_out: TextIO | None = None,
        job_funcs: Mapping[str, Callable[[Settings], Any]] | None = None,
    ) -> None:
        self.settings = settings
        self.echo = echo if echo is not None else sys.stderr
        self.json_out = json_out
        self.job_funcs = dict(job_funcs or {})
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        # Held while a job passes from "may start" to "running", so that a stop never
        # misses a job that checked the stop flag just before it was set.
        self._gate = threading.Lock()
        self._current: str | None = None
        self._lock_fd: int | None = None
        self.info = SchedulerInfo(str(settings.data_dir), os.getpid(), format_ts(utcnow()))

    # ----------------------------------------------------------------- lock
    def acquire(self) -> None:
        path = scheduler_lock_path(self.settings)
        fd = try_flock(path, "tiermem schedule")
        if fd is None:
            raise AlreadyRunningError(
                f"a scheduler is already running on {self.settings.data_dir} ({read_lock_holder(path)}); "
                "only one may run per data root: stop it first (SIGTERM) or use another --data-dir"
            )
        self._lock_fd = fd

    def release(self) -> None:
        if self._lock_fd is not None:
            release_flock(self._lock_fd)
            self._lock_fd = None

    # ----------------------------------------------------------------- jobs
    def _run(self, name: str) -> None:
        with self._gate:
            if self._stop.is_set():
                return  # queued behind a job that was running when the stop came
            self._idle.clear()
            self._current = name
        try:
            record = run_job(
                self.settings, name, trigger="scheduled", func=self.job_funcs.get(name), echo=self.echo
            )
        finally:
            self._current = None
            self._idle.set()
        self._count(record)

    def _count(self, record: RunRecord) -> None:
        if record.status in ("ok", "error"):
            self.info.runs[record.job] = self.info.runs.get(record.job, 0) + 1
        if record.status == "error":
            self.info.errors += 1
        if self.json_out is not None:
            # One compact object per line (JSON Lines), so a consumer can follow the stream.
            self.json_out.write(orjson.dumps(asdict(record), default=str).decode() + "\n")
            self.json_out.flush()

    def build(self, plans: list[PlannedJob]) -> BackgroundScheduler:
        grace = self.settings.scheduler.misfire_grace_seconds
        aps = BackgroundScheduler(
            jobstores={"default": MemoryJobStore()},
            executors={"default": ThreadPoolExecutor(max_workers=1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": grace},
            timezone=UTC,
            daemon=True,
        )
        for plan in plans:
            aps.add_job(
                self._run,
                plan.trigger,
                args=(plan.name,),
                id=plan.name,
                name=plan.name,
                next_run_time=plan.first_run,
                replace_existing=True,
            )
        return aps

    # ------------------------------------------------------------ lifecycle
    def stop(self, reason: str = "stop requested") -> None:
        if not self._stop.is_set():
            self.info.stop_reason = reason
            self._stop.set()

    def install_signals(self) -> None:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            name = signal.Signals(signum).name
            if self._stop.is_set():
                # A second signal while waiting for a job: the operator wants out now. Safe, because
                # every job is checkpointed and idempotent (the next run completes it).
                self.say(f"second {name}: exiting now without waiting for {self._current or 'the job'}")
                sys.stderr.flush()
                os._exit(1)
            self.stop(name)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def say(self, text: str) -> None:
        print(f"[{format_ts(utcnow())}] scheduler: {text}", file=self.echo, flush=True)

    def run(self) -> SchedulerInfo:
        """Hold the data root, run the jobs until stopped, and return what happened.

        Sets `info.forced_exit` when a job was still running at the end of the
        grace period; the caller should then end the process without waiting
        for that thread (see `main_exit`).
        """
        if self._lock_fd is None:
            self.acquire()
        try:
            archived = rotate_run_log(self.settings)
            if archived is not None:
                self.say(f"run log moved aside to {archived} (each job's latest runs carried over)")
            plans = plan_jobs(self.settings)
            aps = self.build(plans)
            self.say(f"pid {os.getpid()} holds {self.settings.data_dir}; jobs:")
            for plan in plans:
                self.say(
                    f"  {plan.name:<16} {plan.every:<22} first {format_ts(plan.first_run)} ({plan.reason})"
                )
            self.say("stop with SIGTERM or Ctrl-C")
            aps.start()
            # A bounded wait keeps the main thread responsive to signals on every platform.
            while not self._stop.wait(0.5):
                pass
            aps.shutdown(wait=False)
            with self._gate:
                pass  # from here on, no job can start: the running one (if any) is the last
            grace = self.settings.scheduler.stop_grace_seconds
            running = self._current
            if running is not None:
                self.say(f"{self.info.stop_reason}: waiting up to {grace:g}s for {running} to finish")
            if not self._idle.wait(grace):
                self.info.forced_exit = True
                self.say(
                    f"{running} still running after {grace:g}s; exiting anyway: the job is checkpointed "
                    "and idempotent, its next run completes the work"
                )
            self.info.stopped_at = format_ts(utcnow())
            self.say(f"stopped ({self.info.stop_reason}); runs: {self.info.runs or 'none'}")
            return self.info
        finally:
            self.release()


def run_scheduler(settings: Settings, *, json_out: TextIO | None = None) -> SchedulerInfo:
    """Run the scheduler in this process until SIGTERM/SIGINT (library entry point of `tiermem schedule`)."""
    scheduler = Scheduler(settings, json_out=json_out)
    scheduler.acquire()
    scheduler.install_signals()
    return scheduler.run()


def main_exit(info: SchedulerInfo) -> int:
    """Exit code for a stopped scheduler, ending the process at once if a job thread is still busy."""
    if info.forced_exit:
        # The worker thread is non-daemon (concurrent.futures joins it at exit);
        # leaving now is safe because every job is checkpointed and idempotent.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


# ---------------------------------------------------------------------- CLI


def _cmd_schedule(args: argparse.Namespace, memory: Memory) -> int:
    # The daemon runs the jobs on the data root's settings (tiermem.app.jobs), one lock per job.
    settings = memory.settings
    if args.list:
        plans = plan_jobs(settings)
        rows = [
            {
                "job": p.name,
                "every": p.every,
                "first_run": format_ts(p.first_run),
                "reason": p.reason,
                "description": JOBS[p.name].description,
            }
            for p in plans
        ]
        if args.json:
            emit_json({"scheduler_running": scheduler_running(settings), "jobs": rows})
        else:
            print(
                format_table(
                    ["job", "every", "next", "why"],
                    [[r["job"], r["every"], r["first_run"], r["reason"]] for r in rows],
                    max_width=80,
                )
            )
            state = "running" if scheduler_running(settings) else "not running"
            print(f"\nscheduler on {settings.data_dir}: {state}")
        return 0
    if args.once:
        record = run_job(settings, args.once, trigger="once")
        if args.json:
            emit_json(asdict(record))
        return 0 if record.status == "ok" else (5 if record.status == "skipped" else 1)
    info = run_scheduler(settings, json_out=sys.stdout if args.json else None)
    return main_exit(info)


EXAMPLES = """  tiermem schedule                          # run the daemon in the foreground (SIGTERM/Ctrl-C stops it)
  tiermem schedule --list                   # the jobs, their intervals and next run times
  tiermem schedule --once compress --json   # run one job now, under its lock, and print its run record
  tiermem schedule --json > runs.jsonl      # the daemon, one JSON run record per line on stdout
  TIERMEM_SCHEDULER__THRESHOLD_CHECK_SECONDS=10 tiermem schedule
run log: <data>/scheduler/runs.jsonl; intervals: [scheduler] in tiermem.toml or TIERMEM_SCHEDULER__*
jobs: """ + ", ".join(JOBS)


def register(sub: Any) -> None:
    from tiermem.app.cli import add_json_flag, command

    p = command(
        sub,
        "schedule",
        _cmd_schedule,
        "run the batch jobs on a schedule (one scheduler per data root)",
        EXAMPLES,
    )
    p.add_argument("--once", metavar="JOB", choices=sorted(JOBS), help="run one job now and exit")
    p.add_argument("--list", action="store_true", help="show the schedule and exit")
    add_json_flag(p)


__all__ = [
    "PlannedJob",
    "Scheduler",
    "SchedulerInfo",
    "plan_jobs",
    "run_scheduler",
    "scheduler_lock_path",
    "scheduler_running",
]
