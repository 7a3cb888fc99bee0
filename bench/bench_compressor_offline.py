"""Offline compression throughput (target >= 5,000 interactions/s).

    .venv/bin/python bench/bench_compressor_offline.py [--agents 20] [--per-agent 2510]

Seeds a temporary data root with realistic turns (names, dates, preferences,
emotion, small talk) through EventLog.append_many, then times `run_compress`
exactly as `tiermem compress` runs it (default durable fsync policy, taking
in the log since the checkpoint, scoring, grouping, appends, checkpoints,
relationships). Prints wall-clock and this process's CPU seconds.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tiermem.compressor.job import run_compress

from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import resolve_settings

NAMES = ["Ava", "Ben", "Chloe", "Dev", "Emma", "Finn", "Grace", "Hugo"]
PLACES = ["Boston", "Lisbon", "Kyoto", "Oslo", "Denver", "Cairo"]
USER = [
    "I went to {place} last week with my sister {name} and it was amazing!",
    "My favorite food is ramen, I could eat it every day.",
    "Actually, I meant {place}, not Paris.",
    "I'm so worried about the exam on {day} May.",
    "ok thanks",
    "Hey! How are you?",
    "I started a new job at a bakery in {place} yesterday.",
    "Do you remember what {name} said about the concert?",
]
AGENT = [
    "That sounds wonderful. What did you like most about {place}?",
    "Noted: ramen is your favorite.",
    "Thanks for the correction.",
    "You will do great, you prepared a lot.",
    "You're welcome!",
    "Hi! I'm well, thanks.",
    "Congratulations on the new job!",
    "{name} said the concert was on a Friday.",
]


def seed(settings_dir: Path, agents: int, per_agent: int) -> int:
    settings = resolve_settings(data_dir=settings_dir, env={}, fsync="none")
    rng = random.Random(7)
    start = datetime(2025, 1, 6, 9, tzinfo=UTC)
    n = 0
    with EventLog(settings) as log:
        for a in range(agents):
            records = []
            for i in range(per_agent):
                k = rng.randrange(len(USER))
                fill = {"place": rng.choice(PLACES), "name": rng.choice(NAMES), "day": rng.randrange(1, 28)}
                ts = start + timedelta(minutes=7 * i + a)
                records.append(
                    {
                        "type": "interaction",
                        "event_id": derived_event_id(ts, "bench", str(a), str(i)),
                        "ts": format_ts(ts),
                        "agent_id": f"agent-{a}",
                        "user": NAMES[(i // 40 + a) % len(NAMES)],
                        "session_id": f"s{i // 40}",
                        "user_message": USER[k].format(**fill),
                        "agent_response": AGENT[k].format(**fill),
                    }
                )
            n += log.append_many(records).accepted
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--per-agent", type=int, default=2510)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "data"
        t0 = time.perf_counter()
        n = seed(root, args.agents, args.per_agent)
        print(f"seeded {n:,} interactions in {time.perf_counter() - t0:.1f}s")
        settings = resolve_settings(data_dir=root, env={})
        settings = type(settings)(**{**settings.__dict__, "anthropic_api_key": None})
        t0, c0 = time.perf_counter(), time.process_time()
        info = run_compress(settings, progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"compressed {info.interactions_scored:,} interactions of {info.agents} agents in {wall:.2f}s "
            f"-> {info.interactions_scored / wall:,.0f} interactions/s (scorer {info.scorer}, fsync {settings.fsync})"
        )
        print(
            f"process CPU time {cpu:.2f}s -> {info.interactions_scored / cpu:,.0f} interactions per CPU-second"
        )
        print(
            f"episodes {info.episodes:,}, important {info.important:,}, proposals {info.proposals:,}, "
            f"relationships {info.relationships:,}"
        )
        t0 = time.perf_counter()
        again = run_compress(settings, progress=False)
        print(
            f"second run (nothing due): {time.perf_counter() - t0:.2f}s, appended {again.episodes + again.proposals}"
        )


if __name__ == "__main__":
    main()
