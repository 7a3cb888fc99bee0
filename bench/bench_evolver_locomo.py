"""Knowledge-base size before and after the evolver's dedup, on the LoCoMo dev split.

    .venv/bin/python bench/bench_evolver_locomo.py [--data ../shared/bench/locomo_dev.json]

Two sources of proposals, each in a fresh data root, offline (no API key):

- "compressor": the conversations ingested turn by turn (tiermem.app.locomo's
  mapping), then `tiermem.compressor.job.run_compress` (its offline scorer)
  emits the knowledge proposals;
- "observations": LoCoMo's own per-session observations (human-written facts
  about each speaker, which restate each other across sessions) as proposals,
  one agent per conversation, the speaker as participant.

"Before" is what the store would hold if every proposal became a fact; "after"
is the active facts once `run_evolve` has touched, merged and superseded. The
data file is read in place, never copied.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tiermem.evolver.job import run_evolve
from tiermem.evolver.state import load_state

from tiermem.app.locomo import interaction_events, load_locomo, parse_session_date
from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import Settings, resolve_settings

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "bench" / "locomo_dev.json"


def _proposals(settings: Settings) -> list[dict[str, Any]]:
    with EventLog(settings) as log:
        return [ev for _s, _l, ev in log.read("knowledge") if ev["type"] == "knowledge_proposed"]


def measure(settings: Settings) -> dict[str, Any]:
    """Dedup only: every proposal is applied (the approval queue would hold low-confidence ones back)."""
    proposals = _proposals(settings)
    pending_by_policy = sum(
        1
        for p in proposals
        if p.get("origin") != "user"
        and float(p.get("confidence", 1.0)) < settings.evolver.auto_apply_confidence
    )
    settings = replace(settings, evolver=replace(settings.evolver, auto_apply_confidence=0.0))
    started = time.perf_counter()
    info = run_evolve(settings, progress=False)
    elapsed = time.perf_counter() - started
    state = load_state(settings)
    active = [f for f in state.facts.values() if f.status == "active"]
    return {
        "before": {"facts": len(proposals), "chars": sum(len(p.get("content") or "") for p in proposals)},
        "after": {"facts": len(active), "chars": sum(len(f.content) for f in active)},
        "reduction": round(1 - len(active) / len(proposals), 4) if proposals else 0.0,
        "decisions": {k: getattr(info, k) for k in ("created", "touched", "merged", "superseded", "pending")},
        "inactive": info.inactive_facts,
        "would_wait_for_review_under_default_policy": pending_by_policy,
        "evolve_s": round(elapsed, 2),
    }


def from_compressor(data: Path, root: Path) -> dict[str, Any]:
    from tiermem.compressor.job import run_compress

    settings = resolve_settings(data_dir=root, env={}, fsync="none")
    convs = load_locomo(data)
    with EventLog(settings) as log:
        log.append_many([e for c in convs for e in interaction_events(c)])
    started = time.perf_counter()
    compressed = run_compress(settings, progress=False)
    result = measure(settings)
    result["compress"] = {
        "scorer": compressed.scorer,
        "proposals": compressed.proposals,
        "elapsed_s": round(time.perf_counter() - started, 2),
    }
    return result


def from_observations(data: Path, root: Path) -> dict[str, Any]:
    settings = resolve_settings(data_dir=root, env={}, fsync="none")
    raw = orjson.loads(data.read_bytes())
    events = []
    for sample in raw:
        conv = sample["conversation"]
        agent = f"locomo-{sample['sample_id']}"
        for key, by_speaker in sorted(sample.get("observation", {}).items()):
            n = key.split("_")[1]
            date_text = conv.get(f"session_{n}_date_time")
            if not date_text:
                continue
            ts = parse_session_date(date_text)
            for speaker, items in sorted(by_speaker.items()):
                for i, item in enumerate(items):
                    text, dia = (
                        (item[0], item[1]) if isinstance(item, list) and len(item) > 1 else (str(item), "")
                    )
                    dia_ids = dia if isinstance(dia, list) else [dia]
                    events.append(
                        {
                            "type": "knowledge_proposed",
                            "event_id": derived_event_id(ts, "locomo-obs", agent, key, speaker, str(i)),
                            "ts": format_ts(ts),
                            "agent_id": agent,
                            "content": text,
                            "participant": speaker,
                            "category": "user",
                            "confidence": 0.9,
                            "importance": 5,
                            "origin": "compressor",
                            "evidence": [{"text": "", "event_id": str(d)} for d in dia_ids if d],
                        }
                    )
    with EventLog(settings) as log:
        log.append_many(events)
    return measure(settings)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out["observations"] = from_observations(args.data, Path(tmp) / "obs")
        try:
            out["compressor"] = from_compressor(args.data, Path(tmp) / "comp")
        except ImportError as exc:  # the compressor part is not installed
            out["compressor"] = {"skipped": str(exc)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
