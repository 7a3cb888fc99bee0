"""Fixed inputs for the compressor and what it derived from them, to pin its output byte for byte.

Three inputs, all deterministic: the offline benchmark's generated turns (names,
places, dates, corrections, small talk), the demo's sample history (several
agents, users, projects and sessions, a fixed end date, ids derived from the
seed) and a set of edge cases (`EDGE_USER`, `EDGE_AGENT`). `derived_lines` runs `run_compress` on a data root and returns every
derived event the log holds, serialised, in log order, per stream.

    .venv/bin/python tests/compress_golden.py OUT_DIR [--agents 20 --per-agent 2510 --demo-days 5 --per-day 400 --edge-turns 600]

writes the derived streams of both inputs to OUT_DIR (one JSONL per input and
stream) and prints their digests: run it on two versions of the code and
compare the files.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import tempfile
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_compressor_offline import seed as seed_bench_turns
from tiermem.compressor.job import run_compress

from tiermem.app import samples
from tiermem.eventlog import EventLog
from tiermem.events import STREAMS
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import Settings, resolve_settings

DEMO_END = date(2025, 3, 14)
# Turns that reach the less travelled paths: every kind of relative date, questions
# after statements, corrections, requests, "you/your" reports, plans and hedges,
# characters outside ASCII (the four that case-fold to ASCII letters among them),
# curly apostrophes, dashes, several sentences, attachments and empty sides.
EDGE_USER = [
    "I moved to İstanbul last month, can you update my address?",
    "Actually, I meant the café on Rue Oberkampf — not the one near the station.",
    "My daughter Zoë turned 6 three weeks ago and we had a party last weekend.",
    "I’ve been running for 3 years now; I think I’ll do a marathon next spring.",
    "Please remember that I’m allergic to peanuts. My doctor said so last Tuesday.",
    "We went camping the other day with my brother Kai and his dog.",
    "I'm so worried, my mom was diagnosed with cancer in early March.",
    "Tell me about the ſtrange thing I said yesterday?",
    "Maybe I'll visit Oslo next week, or maybe not, haha.",
    "I hate mornings. I prefer working at night, since last year anyway.",
    "",
    "Thanks!! 😊 See you tomorrow.",
    "I started a new job at Acme on Monday and my boss Ömer is great. I work in Oslo.",
    "Correction: my birthday is on 12 May, not 21 May.",
    "I've never been to Kyoto but I plan to go this coming Friday for 2 weeks.",
]
EDGE_AGENT = [
    "Done, your address is now in İstanbul.",
    "Noted — the café on Rue Oberkampf. I remember you like their croissants.",
    "Happy birthday to Zoë! How was the party?",
    "That is impressive. Your plan sounds great.",
    "I will keep that in mind: no peanuts.",
    "I grew up near a campsite, I always loved the smell of pine.",
    "I'm so sorry to hear that. I'm here for you.",
    "You said the \u212aelvin scale was strange, a few days ago.",
    "Oslo is lovely in spring.",
    "Night owls unite! I'm a night person too.",
    "Here is the photo you asked for.",
    "See you tomorrow!",
    "Congratulations on the new job at Acme! Your boss sounds kind.",
    "Thanks for the correction, 12 May it is.",
    "Kyoto in spring is wonderful; you will love it.",
]


def _settings(root: Path) -> Settings:
    return replace(resolve_settings(data_dir=root, env={}, fsync="none"), anthropic_api_key=None)


def seed_demo(root: Path, days: int, per_day: int) -> int:
    """The demo's sample history (no legacy-format lines: those are the ingest's concern), appended as is."""
    records = list(
        samples.generate(days=days, per_day=per_day, end=DEMO_END, seed=7, legacy_share=0.0, with_ids=True)
    )
    with EventLog(_settings(root)) as log:
        return log.append_many(records).accepted


def seed_edge(root: Path, turns: int) -> int:
    """Two agents' turns from `EDGE_USER`/`EDGE_AGENT`, shuffled by a fixed seed, some with attachments."""
    rng = random.Random(11)
    start = datetime(2025, 5, 8, 9, tzinfo=UTC)
    records = []
    for i in range(turns):
        k = rng.randrange(len(EDGE_USER))
        ts = start + timedelta(minutes=rng.randrange(1, 600) + 600 * (i // 7))
        rec: dict[str, Any] = {
            "type": "interaction",
            "event_id": derived_event_id(ts, "golden", str(i)),
            "ts": format_ts(ts),
            "agent_id": f"edge-{i % 2}",
            "user": ("alice", "bob", "chloé")[i // 11 % 3],
            "session_id": f"e{i // 9}",
            "user_message": EDGE_USER[k],
            "agent_response": EDGE_AGENT[(k + (i % 5 == 0)) % len(EDGE_AGENT)],
        }
        if i % 6 == 0:
            rec["attachments"] = [
                {"kind": "image", "caption": f"photo of {('Oslo', 'a bowl', 'Zoë')[i % 3]}"}
            ]
        if i % 4 == 0:
            rec["project_id"] = "proj-a"
        if i % 5 == 0:
            rec["metadata"] = {"agent_name": "Nova"}
        records.append(rec)
    with EventLog(_settings(root)) as log:
        return log.append_many(records).accepted


def derived_lines(root: Path) -> dict[str, list[bytes]]:
    """Run the compress job on `root`; every derived event of the log, serialised, per stream in log order."""
    settings = _settings(root)
    run_compress(settings, progress=False)
    out: dict[str, list[bytes]] = {}
    with EventLog(settings) as log:
        for stream in STREAMS:
            if stream == "interactions":
                continue
            lines = [orjson.dumps(event) for _segment, _line, event in log.read(stream)]
            if lines:
                out[stream] = lines
    return out


def digest(lines: list[bytes]) -> str:
    return hashlib.sha256(b"\n".join(lines)).hexdigest()


def bench_output(tmp: Path, agents: int, per_agent: int) -> dict[str, list[bytes]]:
    root = tmp / "bench"
    seed_bench_turns(root, agents, per_agent)
    return derived_lines(root)


def demo_output(tmp: Path, days: int, per_day: int) -> dict[str, list[bytes]]:
    root = tmp / "demo"
    seed_demo(root, days, per_day)
    return derived_lines(root)


def edge_output(tmp: Path, turns: int) -> dict[str, list[bytes]]:
    root = tmp / "edge"
    seed_edge(root, turns)
    return derived_lines(root)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--per-agent", type=int, default=2510)
    ap.add_argument("--demo-days", type=int, default=5)
    ap.add_argument("--per-day", type=int, default=400)
    ap.add_argument("--edge-turns", type=int, default=600)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, out in (
            ("bench", bench_output(Path(tmp), args.agents, args.per_agent)),
            ("demo", demo_output(Path(tmp), args.demo_days, args.per_day)),
            ("edge", edge_output(Path(tmp), args.edge_turns)),
        ):
            for stream, lines in out.items():
                (args.out / f"{name}-{stream}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
                print(f"{name} {stream}: {len(lines)} events, sha256 {digest(lines)}")


if __name__ == "__main__":
    main()
