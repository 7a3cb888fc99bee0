"""The batch jobs as one registry, the locks that keep them from overlapping, and their run log.

Every way a job can run goes through here: the scheduler's timers, `tiermem
schedule --once JOB`, the session-end path, and the manual commands
(`tiermem compress`, `seal`, `review`, `evolve`, and the same `Memory` calls from
Python, take the same lock in `tiermem.app.api.Memory`). A job holds an exclusive `flock` on
`<data>/locks/job-<lock>.lock` while it runs, so a scheduled run and a manual
run of the same job never overlap, across processes. The lock file carries the
holder's pid and start time so that whoever is refused can be told by whom.

Runs are appended to `<data>/scheduler/runs.jsonl` (one "started" and one
final record per run: ok | skipped | error) and echoed as one line on stderr.
A "started" record with no final record is a run that was killed; the jobs are
checkpointed and idempotent, so the next run completes what it left.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import orjson

from tiermem.errors import AlreadyRunningError, NotFoundError
from tiermem.ids import format_ts, parse_ts, utcnow
from tiermem.locks import job_lock
from tiermem.settings import Settings


@dataclass(frozen=True)
class JobSpec:
    """One batch job: what it calls (`module:function`, called with `settings`) and the lock it takes."""

    name: str
    target: str
    lock: str
    description: str


JOBS: dict[str, JobSpec] = {
    spec.name: spec
    for spec in (
        JobSpec(
            "threshold_check",
            "tiermem.app.jobs:compress_when_due",
            "compress",
            "compress every agent over its unprocessed-interaction limit",
        ),
        JobSpec("compress", "tiermem.app.jobs:compress_all", "compress", "compress all agents"),
        JobSpec(
            "sessions",
            "tiermem.app.sessions:process_pending_sessions",
            "sessions",
            "gap-fill (and compress when due) for every session_ended event since the checkpoint",
        ),
        JobSpec("evolve", "tiermem.app.jobs:evolve_all", "evolve", "decide pending knowledge proposals"),
        JobSpec(
            "project",
            "tiermem.runtime.projector:project",
            "project",
            "apply new log events (episodes, decisions) to the hot store the runtime reads",
        ),
        JobSpec("seal", "tiermem.log.seal:seal", "seal", "seal closed days of the log to Parquet"),
        JobSpec(
            "review",
            "tiermem.app.jobs:review_new_days",
            "review",
            "write the quality reports of the days since the last review (yesterday, after a normal night)",
        ),
    )
}

RUN_LOG_NAME = "runs.jsonl"


def scheduler_dir(settings: Settings) -> Path:
    return settings.data_dir / "scheduler"


def run_log_path(settings: Settings) -> Path:
    return scheduler_dir(settings) / RUN_LOG_NAME


def resolve_job(name: str) -> Callable[[Settings], Any]:
    """The function behind a job, imported on first use (a part that is missing fails only its job)."""
    spec = JOBS.get(name)
    if spec is None:
        raise NotFoundError(f"unknown job {name!r}; known: {', '.join(JOBS)}")
    module_name, func_name = spec.target.split(":")
    module = importlib.import_module(module_name)
    func: Callable[[Settings], Any] = getattr(module, func_name)
    return func


def summarize(result: Any) -> Any:
    """A JSON-able summary of whatever a job returned (dataclass, mapping, list, scalar)."""
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return dataclasses.asdict(result)
    if isinstance(result, Mapping):
        return {str(k): summarize(v) for k, v in result.items()}
    if isinstance(result, list | tuple):
        return [summarize(v) for v in result]
    if result is None or isinstance(result, str | int | float | bool):
        return result
    return repr(result)


@dataclass
class RunRecord:
    """One run of one job, as written to the run log."""

    job: str
    trigger: str  # scheduled | once | session_end | manual
    status: str  # started | ok | skipped | error
    started_at: str
    finished_at: str | None = None
    seconds: float | None = None
    summary: Any = None
    error: str | None = None
    pid: int = field(default_factory=os.getpid)

    def line(self) -> str:
        """The one-line human form for stderr."""
        head = f"[{self.finished_at or self.started_at}] {self.job} ({self.trigger}): {self.status}"
        if self.seconds is not None:
            head += f" in {self.seconds:.2f}s"
        if self.error:
            head += f": {self.error}"
        elif self.summary is not None:
            head += " " + short_summary(self.summary)
        return head


RUN_RECORD_FIELDS = frozenset(f.name for f in dataclasses.fields(RunRecord))


def short_summary(summary: Any, limit: int = 200) -> str:
    """The scalar fields of a summary on one line (nested lists/maps are left to the JSON log)."""
    if isinstance(summary, Mapping):
        parts = [
            f"{k}={v}" for k, v in summary.items() if isinstance(v, str | int | float | bool) or v is None
        ]
        text = " ".join(parts)
    else:
        text = str(summary)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def append_run_record(settings: Settings, record: RunRecord) -> None:
    """Append one record to the run log; a single O_APPEND write, so concurrent writers never interleave."""
    path = run_log_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = orjson.dumps(dataclasses.asdict(record), default=str) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read_run_log(settings: Settings) -> list[dict[str, Any]]:
    path = run_log_path(settings)
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue  # a line cut by a crash; the run it belonged to shows as started-only
    return out


def last_success(settings: Settings, job: str) -> datetime | None:
    """When `job` last finished successfully on this data root, from the run log."""
    latest: datetime | None = None
    for rec in read_run_log(settings):
        if rec.get("job") == job and rec.get("status") == "ok" and rec.get("finished_at"):
            ts = parse_ts(rec["finished_at"])
            latest = ts if latest is None or ts > latest else latest
    return latest


def has_run_before(settings: Settings, job: str) -> bool:
    return any(rec.get("job") == job for rec in read_run_log(settings))


RUN_LOG_MAX_BYTES = 16 * 1024 * 1024


def rotate_run_log(settings: Settings, max_bytes: int = RUN_LOG_MAX_BYTES) -> Path | None:
    """Move a run log over `max_bytes` aside (`runs-<ts>.jsonl`), carrying each job's latest records.

    The threshold check alone writes ~2,900 lines a day; the scheduler's plan
    needs only each job's last run and last success, which the fresh file
    starts with. Called by the scheduler at start (it holds the data root).
    """
    path = run_log_path(settings)
    if not path.exists() or path.stat().st_size <= max_bytes:
        return None
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for rec in read_run_log(settings):
        latest[(str(rec.get("job")), "ok" if rec.get("status") == "ok" else "any")] = rec
    stamp = format_ts(utcnow()).replace(":", "").replace("-", "")
    archived = path.with_name(f"runs-{stamp}.jsonl")
    os.replace(path, archived)
    carried = sorted(latest.values(), key=lambda r: str(r.get("finished_at") or r.get("started_at")))
    for rec in carried:
        append_run_record(settings, RunRecord(**{k: v for k, v in rec.items() if k in RUN_RECORD_FIELDS}))
    return archived


def run_job(
    settings: Settings,
    name: str,
    *,
    trigger: str = "once",
    func: Callable[[Settings], Any] | None = None,
    echo: TextIO | None = None,
) -> RunRecord:
    """Run one job now under its lock, log the run, and return its record. Never raises for a job failure.

    A lock held elsewhere makes the run "skipped" (the other run does the same
    work); an exception inside the job makes it "error" with the message. Both
    are recorded like a success, so the run log is the full history.
    """
    spec = JOBS.get(name)
    if spec is None:
        raise NotFoundError(f"unknown job {name!r}; known: {', '.join(JOBS)}")
    stream = echo if echo is not None else sys.stderr
    start_wall = utcnow()
    start = time.monotonic()
    record = RunRecord(job=name, trigger=trigger, status="started", started_at=format_ts(start_wall))
    try:
        with job_lock(settings, spec.lock, what=f"{trigger} {name}"):
            append_run_record(settings, record)
            try:
                target = func or resolve_job(name)
                result = target(settings)
            except Exception as exc:
                record = dataclasses.replace(record, status="error", error=f"{type(exc).__name__}: {exc}")
            else:
                record = dataclasses.replace(record, status="ok", summary=summarize(result))
    except AlreadyRunningError as exc:
        record = dataclasses.replace(record, status="skipped", error=str(exc))
    record.finished_at = format_ts(utcnow())
    record.seconds = round(time.monotonic() - start, 3)
    append_run_record(settings, record)
    print(record.line(), file=stream, flush=True)
    return record


# ------------------------------------------------------------- job adapters

MAX_REVIEW_CATCH_UP_DAYS = 7


# The scheduled batch jobs run on the engine `batch.engine` names: with "ray" and
# `batch.ray_address`, the scheduler submits their partitions to that cluster.


def compress_when_due(settings: Settings) -> Any:
    """The threshold check: the engine is opened only when some agent is due (it runs every minute)."""
    from tiermem.app.engines import open_engine
    from tiermem.compressor.job import compress_due, due_agents

    if settings.batch.engine == "local" or not due_agents(settings):
        return compress_due(settings)
    with open_engine(settings) as engine:
        return compress_due(settings, engine=engine)


def compress_all(settings: Settings) -> Any:
    from tiermem.app.engines import open_engine
    from tiermem.compressor.job import run_compress

    with open_engine(settings) as engine:
        return run_compress(settings, engine=engine)


def evolve_all(settings: Settings) -> Any:
    from tiermem.app.engines import open_engine
    from tiermem.evolver.job import run_evolve

    with open_engine(settings) as engine:
        return run_evolve(settings, engine=engine)


def review_new_days(settings: Settings) -> dict[str, Any]:
    """The nightly review: each closed day since the last successful review (at most a week), else yesterday.

    `run_review` without a day re-reviews the whole history, which grows every
    night; the scheduler only needs the days no report covers yet.
    """
    from tiermem.app.engines import open_engine
    from tiermem.reviewer.job import run_review

    yesterday = utcnow().date() - timedelta(days=1)
    last = last_success(settings, "review")
    first = (
        yesterday
        if last is None
        else max(last.date(), yesterday - timedelta(days=MAX_REVIEW_CATCH_UP_DAYS - 1))
    )
    days = [first + timedelta(days=i) for i in range((yesterday - first).days + 1)]
    out: dict[str, Any] = {
        "days": [d.isoformat() for d in days],
        "reports": 0,
        "interactions": 0,
        "files": 0,
        "engine": settings.batch.engine,
    }
    with open_engine(settings) as engine:
        for day in days:
            info = run_review(settings, day=day.isoformat(), engine=engine)
            out["reports"] += info.reports
            out["interactions"] += info.interactions
            out["files"] += len(info.files)
            out["path"] = info.path
    return out
