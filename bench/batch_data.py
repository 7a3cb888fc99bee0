"""A deterministic day of turns for the batch benchmarks: N agents x M turns, interleaved in time.

    .venv/bin/python bench/batch_data.py DATA_DIR [--agents 10000] [--turns 100] [--day 2026-11-23]

Every run with the same arguments writes the same log (same event ids, same
contents): the benchmarks of `review` and `compress` on the local and Ray
engines read identical data. Turns carry the enrichment a real runtime
records (model, usage, tools, latency, approval) with a few gaps and the
kinds of answer the review flags (empty, repeated, truncated, refusals), so
the review computes every section of its reports. Appended through
`EventLog.append_many` with fsync off (the data is a fixture, not a log to keep).
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

# The same conversation templates as the compressor's benchmark: the two measure comparable turns.
from bench_compressor_offline import AGENT, NAMES, PLACES, USER

from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import resolve_settings

ODD = ["", "I'm unable to help with that request.", "Let me check the schedule for you and..."]
MODELS = ["claude-sonnet-5", "claude-haiku-5", "gpt-5-mini"]
TOOLS = ["search", "calendar", "calculator"]
CHUNK = 50_000


def turn(rng: random.Random, day: date, agents: int, turns: int, a: int, i: int) -> dict[str, Any]:
    """Turn `i` of agent `a`: the same record for the same arguments."""
    k = rng.randrange(len(USER))
    fill = {"place": rng.choice(PLACES), "name": rng.choice(NAMES), "day": rng.randrange(1, 28)}
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    ts = start + timedelta(milliseconds=(i * agents + a) * (86_400_000 // (agents * turns)))
    roll = rng.random()
    response = ODD[int(roll * 1000) % len(ODD)] if roll < 0.03 else AGENT[k].format(**fill)
    rec: dict[str, Any] = {
        "type": "interaction",
        "event_id": derived_event_id(ts, "batchbench", str(a), str(i)),
        "ts": format_ts(ts),
        "agent_id": f"agent-{a:05d}",
        "user": NAMES[(i // 20 + a) % len(NAMES)],
        "session_id": f"s{a}-{i // 20}",
        "user_message": USER[k].format(**fill),
        "agent_response": response,
        "model": MODELS[a % len(MODELS)] if a % 17 else "",
        "latency_ms": float(200 + rng.randrange(2000)),
        "approval_status": "approved" if a % 5 == 0 else "",
    }
    if a % 11:
        rec["usage"] = {"input_tokens": 40 + rng.randrange(400), "output_tokens": 10 + rng.randrange(200)}
    if rng.random() < 0.2:
        rec["tools_used"] = [TOOLS[rng.randrange(len(TOOLS))]]
    return rec


def generate(data_dir: Path, agents: int, turns: int, day: date) -> int:
    """Append the day to the log under `data_dir`; returns how many were accepted."""
    settings = resolve_settings(data_dir=data_dir, env={}, fsync="none")
    rng = random.Random(f"{agents}/{turns}/{day}")
    n = 0
    with EventLog(settings) as log:
        batch: list[dict[str, Any]] = []
        for i in range(turns):
            for a in range(agents):
                batch.append(turn(rng, day, agents, turns, a, i))
                if len(batch) >= CHUNK:
                    n += log.append_many(batch).accepted
                    batch = []
        if batch:
            n += log.append_many(batch).accepted
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data_dir", type=Path)
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=100, help="turns per agent")
    ap.add_argument("--day", default="2026-11-23")
    args = ap.parse_args()
    t0 = time.perf_counter()
    n = generate(args.data_dir, args.agents, args.turns, date.fromisoformat(args.day))
    print(f"appended {n:,} interactions of {args.agents:,} agents in {time.perf_counter() - t0:.1f}s")


if __name__ == "__main__":
    main()
