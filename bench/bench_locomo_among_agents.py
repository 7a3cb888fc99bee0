"""LoCoMo's questions with each conversation's agent among many other agents (issue 18).

    .venv/bin/python bench/bench_locomo_among_agents.py --copies 0,30
    .venv/bin/python bench/bench_locomo_among_agents.py --copies 30 --through-index

The harness of `tiermem bench locomo` (budget 500, offline), with one step
added between the pipeline and the questions: every episode the pipeline
made is written again `copies` times into the same hot store, each time
under other agents (`<agent>~copy<k>`, their own users), as a store many
agents share would hold them. Each conversation's agent then holds
1 / (copies + 1) of its words' documents, and the words its questions ask
are common in the whole index (a word in 60 of one conversation's episodes
is in 1,860 at 30 copies, past the candidate cap of 1,500).

The conversation's agent is searched over its own copy of its episodes
(runtime.own_episodes), whose answers no other agent's writing moves; with
`--through-index` it is searched through the index as before that copy
(the tries chosen by the agent's own counts, windowed where the words are
common overall). Prints the scores and writes
bench/results/locomo_among_agents.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import sqlite3
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from tiermem.runtime import own_episodes

from tiermem.app import locomo
from tiermem.settings import Settings

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "bench" / "locomo_dev.json"
COLUMNS = (
    "name, summary, participants, start_ts, end_ts, importance, important, emotional_context, kind,"
    " project_id, recall_count, owner, key_quotes, source_event_ids"
)


def add_other_agents(settings: Settings, copies: int) -> int:
    """Every episode written again `copies` times under other agents; returns the episodes added."""
    if not copies:
        return 0
    conn = sqlite3.connect(settings.hot_db)
    try:
        with conn:
            for k in range(1, copies + 1):
                conn.execute(
                    f"INSERT INTO episodes (episode_id, agent_id, {COLUMNS})"
                    f" SELECT episode_id || '~copy{k}', agent_id || '~copy{k}', {COLUMNS.replace('owner', 'owner || ?')}"
                    " FROM episodes WHERE agent_id NOT LIKE '%~copy%'",
                    [f"~copy{k}"],
                )
        return int(conn.execute("SELECT count(*) FROM episodes WHERE agent_id LIKE '%~copy%'").fetchone()[0])
    finally:
        conn.close()


def run(data: Path, copies: int, through_index: bool, budget: int) -> dict[str, Any]:
    prepare = locomo.prepare
    added: list[int] = []

    def prepared(settings: Settings, convs: list[Any], **kwargs: Any) -> dict[str, Any]:
        steps = prepare(settings, convs, **kwargs)
        added.append(add_other_agents(settings, copies))
        return steps

    locomo.prepare = prepared  # type: ignore[assignment]
    limit = own_episodes.MAX_EPISODES
    if through_index:
        own_episodes.MAX_EPISODES = 0
    t0 = time.perf_counter()
    try:
        result = locomo.run_locomo(data, budget, progress=False)
    finally:
        locomo.prepare = prepare  # type: ignore[assignment]
        own_episodes.MAX_EPISODES = limit
    scores = result["tiermem"]["all"]
    return {
        "copies": copies,
        "other_agents_episodes": added[0] if added else 0,
        "searched": "through the index" if through_index else "over the agent's own copy",
        "evidence_recall": scores["evidence_recall"],
        "answer_recall": scores["answer_recall"],
        "answer_full": scores["answer_full"],
        "latency_p50_ms": scores["latency_p50_ms"],
        "latency_p99_ms": scores["latency_p99_ms"],
        "questions": scores["n"],
        "elapsed_s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--copies", default="0,30", help="comma-separated: each episode written again this many times"
    )
    parser.add_argument(
        "--through-index", action="store_true", help="search through the index, not the agent's copy"
    )
    parser.add_argument("--both", action="store_true", help="each size both ways")
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).resolve().parent / "results" / "locomo_among_agents.json"
    )
    args = parser.parse_args()
    rows = []
    ways = (False, True) if args.both else (args.through_index,)
    for copies in (int(c) for c in args.copies.split(",")):
        for through in ways:
            row = run(args.data, copies, through, args.budget)
            print(orjson.dumps(row).decode(), flush=True)
            rows.append(row)
    print(f"\n{'copies':>6} {'other agents eps':>16}  {'searched':<26} evidence  answer  full   p50/p99 ms")
    for r in rows:
        print(
            f"{r['copies']:>6} {r['other_agents_episodes']:>16,}  {r['searched']:<26} {r['evidence_recall']:.4f}"
            f"  {r['answer_recall']:.4f}  {r['answer_full']:.4f}  {r['latency_p50_ms']:.1f}/{r['latency_p99_ms']:.1f}"
        )
    machine = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "command": " ".join(sys.argv),
    }
    args.out.write_bytes(orjson.dumps({"machine": machine, "runs": rows}, option=orjson.OPT_INDENT_2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
