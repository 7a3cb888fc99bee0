"""Helpers for the scheduler, session and MCP tests: real `tiermem` subprocesses and polling.

Run as a script, this module is `tiermem` with one job replaced by a TEST DOUBLE
(`python tests/helpers_scheduler.py slow_compress -- <tiermem args>`), for tests
of the scheduler's own mechanics (locks, signals) that must not depend on how
long the real compressor takes. Tests of the real pipeline use the real jobs.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()


def tiermem_cmd(data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "tiermem.app.cli", "--data-dir", str(data_dir), *args]


def double_cmd(double: str, data_dir: Path, *args: str) -> list[str]:
    return [sys.executable, str(HERE), double, "--", "--data-dir", str(data_dir), *args]


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without TIERMEM_*/ANTHROPIC_* (tests are offline and explicit)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIERMEM_", "ANTHROPIC_"))}
    env.update(extra)
    return env


def spawn(cmd: list[str], **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=clean_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll until `predicate()` is truthy; fail the test with `what` after a generous `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def write_config(data_dir: Path, text: str) -> None:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "tiermem.toml").write_text(text, encoding="utf-8")


QUIET_SCHEDULE = """
[scheduler]
threshold_check_seconds = 3600
sessions_check_seconds = 3600
compress_minutes = 600
evolve_minutes = 600
project_seconds = 3600
"""


# --------------------------------------------------------------- TEST DOUBLES

SLOW_STEPS = 40


@dataclasses.dataclass
class SlowInfo:
    done: int
    path: str = "offline"


def slow_compress(settings: Any) -> SlowInfo:
    """TEST DOUBLE for a long, checkpointed, idempotent job: one marker file per step, 0.1 s each.

    Each step's output is created atomically and skipped when it exists, the
    shape every real job has (derived ids + checkpoint), so a run killed at any
    point is completed, without duplicates, by the next.
    """
    out = settings.data_dir / "double"
    out.mkdir(parents=True, exist_ok=True)
    (out / "started").write_text(str(os.getpid()))
    done = 0
    for i in range(SLOW_STEPS):
        marker = out / f"step-{i:03d}"
        if marker.exists():
            continue
        time.sleep(0.1)
        tmp = out / f".step-{i:03d}.tmp"
        tmp.write_text(str(os.getpid()))
        os.replace(tmp, marker)
        done += 1
    return SlowInfo(done)


def _main() -> int:
    double, sep, *rest = sys.argv[1:]
    assert sep == "--", "usage: helpers_scheduler.py DOUBLE -- <tiermem args>"
    sys.path.insert(0, str(REPO))
    from tiermem.app import jobs
    from tiermem.app.cli import main

    if double == "slow_compress":
        # The threshold check runs at scheduler start, so a test can catch it mid-run.
        for name in ("compress", "threshold_check"):
            jobs.JOBS[name] = dataclasses.replace(jobs.JOBS[name], target="__main__:slow_compress")
    else:
        raise SystemExit(f"unknown double {double!r}")
    return main(rest)


if __name__ == "__main__":
    sys.exit(_main())
