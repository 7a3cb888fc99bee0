"""Evolver throughput: decide 100k knowledge proposals.

    .venv/bin/python bench/bench_evolver_throughput.py [--proposals 100000] [--agents 50]

Generates proposals for `--agents` agents from a vocabulary of subjects and
attributes, with about a third restating an earlier fact (exact duplicates,
rewordings with one more detail, and changed values that contradict), appends
them to a fresh data root (fsync none: a bulk load), then times one
`run_evolve` over all of them and a second (no-op) run. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiermem.evolver.job import run_evolve

from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import resolve_settings

SUBJECTS = [
    f"{a} {b}"
    for a in (
        "green",
        "red",
        "old",
        "new",
        "small",
        "large",
        "quiet",
        "busy",
        "north",
        "south",
        "blue",
        "wooden",
        "shared",
        "remote",
        "local",
        "public",
        "private",
        "spare",
    )
    for b in (
        "garden",
        "laptop",
        "project",
        "office",
        "bicycle",
        "kitchen",
        "server",
        "notebook",
        "camera",
        "library",
        "studio",
        "repository",
        "phone",
        "calendar",
        "printer",
        "car",
        "desk",
        "account",
    )
]
VERBS = [
    "prefers",
    "uses",
    "maintains",
    "mentioned",
    "likes",
    "cleans",
    "updates",
    "checks",
    "shares",
    "plans",
]
SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "da", "fe", "gu", "hi", "jo", "bre"]
NAMES = [
    a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES
]  # "kalomi": an identifier, not a number
WHEN = ["every morning", "on weekends", "twice a week", "after work", "before meetings", "each month"]


def make_proposals(n: int, agents: int, seed: int = 7) -> list[dict[str, object]]:
    rng = random.Random(seed)
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    facts: dict[str, list[str]] = {f"agent-{a}": [] for a in range(agents)}
    out: list[dict[str, object]] = []
    for i in range(n):
        agent = f"agent-{rng.randrange(agents)}"
        known = facts[agent]
        roll = rng.random()
        if known and roll < 0.12:
            content = rng.choice(known)  # exact restatement
        elif known and roll < 0.24:
            content = rng.choice(known) + " " + rng.choice(WHEN)  # one more detail
        elif known and roll < 0.30:
            base = rng.choice(known)
            content = base.replace(
                base.split()[2], rng.choice(VERBS), 1
            )  # another verb: maybe a contradiction
        else:
            content = f"The user {rng.choice(VERBS)} the {rng.choice(SUBJECTS)} {rng.choice(NAMES)}"
            known.append(content)
        ts = t0 + timedelta(seconds=i)
        out.append(
            {
                "type": "knowledge_proposed",
                "event_id": derived_event_id(ts, "bench", str(i)),
                "ts": format_ts(ts),
                "agent_id": agent,
                "content": content,
                "category": "user",
                "confidence": 0.9,
                "importance": 5,
                "origin": "compressor",
                "source_event_ids": [f"T{i}"],
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proposals", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = resolve_settings(data_dir=Path(tmp) / "data", env={}, fsync="none")
        records = make_proposals(args.proposals, args.agents)
        started = time.perf_counter()
        log = EventLog(settings)
        for i in range(0, len(records), 20_000):
            log.append_many(records[i : i + 20_000])
        log.close()
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        info = run_evolve(settings, progress=False)
        evolve_s = time.perf_counter() - started
        started = time.perf_counter()
        again = run_evolve(settings, progress=False)
        rerun_s = time.perf_counter() - started
        print(
            json.dumps(
                {
                    "proposals": args.proposals,
                    "agents": args.agents,
                    "load_s": round(load_s, 2),
                    "evolve_s": round(evolve_s, 2),
                    "proposals_per_s": round(args.proposals / evolve_s),
                    "decisions": {
                        k: getattr(info, k) for k in ("created", "touched", "merged", "superseded", "pending")
                    },
                    "events_appended": info.events_appended,
                    "active_facts": info.active_facts,
                    "inactive_facts": info.inactive_facts,
                    "rerun_s": round(rerun_s, 2),
                    "rerun_appended": again.events_appended,
                    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
