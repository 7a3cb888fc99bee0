"""Durable appends: one caller with fsync each, and group commit from 8 concurrent callers.

    .venv/bin/python bench/bench_log_append.py

Targets: one at a time >= 4,000/s (>= 80% of the fsync limit);
group commit, 8 callers: >= 100,000/s with p99 append latency <= 2 ms.
Group commit is measured twice: callers appending one record per call, and
callers appending small batches (append_validated of 32 records per call).
"""

from __future__ import annotations

import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from tiermem.eventlog import EventLog
from tiermem.events import validate
from tiermem.settings import resolve_settings

ROOT = Path(__file__).resolve().parent.parent / "data"


def record(i: int, who: str = "a") -> dict[str, object]:
    return {
        "type": "interaction",
        "agent_id": f"agent-{who}",
        "user": "alice",
        "event_id": f"{who}-{i}",
        "ts": "2026-03-01T10:00:00.000Z",
        "user_message": "What did we decide about the refund for order 4471?",
        "agent_response": "We refunded the duplicate $49.00 charge; ticket #4471 is closed.",
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 2100, "output_tokens": 340, "tool_calls": 1},
        "tools_used": ["recall_memory"],
        "latency_ms": 812.5,
    }


def pct(lat: list[float], q: float) -> float:
    lat = sorted(lat)
    return lat[min(len(lat) - 1, int(len(lat) * q))] * 1e3


def one_at_a_time(n: int = 4000) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        settings = resolve_settings(data_dir=tmp, env={}, fsync="always")
        lat = []
        with EventLog(settings) as log:
            log.append(record(-1))  # open the segment and the index
            start = time.perf_counter()
            for i in range(n):
                t = time.perf_counter()
                log.append(record(i))
                lat.append(time.perf_counter() - t)
            elapsed = time.perf_counter() - start
    print(
        f"durable appends, one caller, fsync each: {n / elapsed:,.0f}/s  p50 {pct(lat, 0.5):.3f} ms  p99 {pct(lat, 0.99):.3f} ms  (n={n})"
    )


def group(threads: int = 8, per_thread: int = 3000, batch: int = 1) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        settings = replace(resolve_settings(data_dir=tmp, env={}), fsync="group")
        lat: list[float] = []
        lock = threading.Lock()
        with EventLog(settings) as log:
            log.append(record(-1))
            prepared = {t: [validate(record(i, f"t{t}")) for i in range(per_thread)] for t in range(threads)}
            barrier = threading.Barrier(threads + 1)

            def worker(t: int) -> None:
                mine: list[float] = []
                events = prepared[t]
                barrier.wait()
                for k in range(0, per_thread, batch):
                    s = time.perf_counter()
                    if batch == 1:
                        log.append(record(k, f"t{t}"))
                    else:
                        log.append_validated(events[k : k + batch])
                    mine.append(time.perf_counter() - s)
                with lock:
                    lat.extend(mine)

            pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
            for th in pool:
                th.start()
            barrier.wait()
            start = time.perf_counter()
            for th in pool:
                th.join()
            elapsed = time.perf_counter() - start
        total = threads * per_thread
        what = (
            "one record per call (validate included)"
            if batch == 1
            else f"{batch} pre-validated records per call"
        )
        print(
            f"group commit, {threads} concurrent callers, {what}: {total / elapsed:,.0f} records/s  "
            f"call latency p50 {pct(lat, 0.5):.3f} ms  p99 {pct(lat, 0.99):.3f} ms  (n={total})"
        )


if __name__ == "__main__":
    one_at_a_time()
    group(batch=1)
    group(batch=32, per_thread=32 * 400)
