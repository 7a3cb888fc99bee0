"""What telling a retry from a reused `event_id` costs: a repeated id in a large open segment.

    .venv/bin/python bench/bench_event_ids.py               # 100,000 turns in one day's segment
    .venv/bin/python bench/bench_event_ids.py --turns 400000 --repeats 50

Fills one agent's day with turns (fsync off for the fill), then times
`record_turn` of: a new turn (the ordinary path), the newest turn sent again
(a client's retry: its first copy is near the end of the segment, found by a
search from the end), the oldest turn sent again (the whole segment searched),
and another user's turn under the oldest id (refused: `EventIdConflictError`).
Wall and CPU time per call, median and max of `--repeats` calls each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tiermem.runtime.memory import TurnToRecord, record_turns

from tiermem.app.api import Memory
from tiermem.errors import EventIdConflictError
from tiermem.settings import resolve_settings

AGENT = "ids-bot"
BATCH = 2_000


def _timed(fn: Callable[[int], object], repeats: int) -> dict[str, float]:
    walls, cpus = [], []
    for i in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn(i)
        walls.append(1e3 * (time.perf_counter() - w))
        cpus.append(1e3 * (time.process_time() - c))
    return {
        "wall_p50_ms": round(statistics.median(walls), 3),
        "wall_max_ms": round(max(walls), 3),
        "cpu_p50_ms": round(statistics.median(cpus), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ids-") as tmp:
        fill = resolve_settings(data_dir=Path(tmp) / "data", env={"TIERMEM_FSYNC": "none"})
        with Memory(fill) as mem:
            memory = mem.agent(AGENT).runtime
            for start in range(0, args.turns, BATCH):
                record_turns(
                    [
                        TurnToRecord(
                            memory,
                            f"turn {i}: where is my order?",
                            "It ships tomorrow.",
                            {"user": "ann", "event_id": f"t-{i}"},
                        )
                        for i in range(start, min(start + BATCH, args.turns))
                    ]
                )
        size = sum(p.stat().st_size for p in (fill.log_dir / "interactions").rglob("*.jsonl"))
        settings = resolve_settings(data_dir=Path(tmp) / "data", env={})
        last = args.turns - 1
        with Memory(settings) as mem:
            agent = mem.agent(AGENT)

            def conflict(_i: int) -> None:
                try:
                    agent.record_turn(
                        "bob", "turn 0: where is my order?", "It ships tomorrow.", event_id="t-0"
                    )
                except EventIdConflictError:
                    return
                raise AssertionError("a reused id was accepted")

            results = {
                "new turn": _timed(lambda i: agent.record_turn("ann", f"new {i}", "ok"), args.repeats),
                "newest turn again": _timed(
                    lambda _i: agent.record_turn(
                        "ann", f"turn {last}: where is my order?", "It ships tomorrow.", event_id=f"t-{last}"
                    ),
                    args.repeats,
                ),
                "oldest turn again": _timed(
                    lambda _i: agent.record_turn(
                        "ann", "turn 0: where is my order?", "It ships tomorrow.", event_id="t-0"
                    ),
                    args.repeats,
                ),
                "another user's turn, oldest id (409)": _timed(conflict, args.repeats),
            }
    print(
        f"{args.turns:,} turns, segment {size / 1e6:.1f} MB, fsync {settings.fsync}; load {os.getloadavg()[0]:.1f}"
    )
    for name, r in results.items():
        print(
            f"  {name:40s} wall p50 {r['wall_p50_ms']:8.3f} ms  max {r['wall_max_ms']:8.3f} ms  CPU p50 {r['cpu_p50_ms']:8.3f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
