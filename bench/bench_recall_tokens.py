"""What one `recall_memory` answer costs the model: mean and p95 tokens.

Usage, on a demo data root: `tiermem --data-dir DIR demo` first, then
`python bench/bench_recall_tokens.py DIR [--queries 60]`.
On LoCoMo: `python bench/bench_recall_tokens.py --locomo ../shared/bench/locomo_dev.json`.

Demo queries are taken from the data itself, so they are about things that
were said: the first eight words of every k-th recorded user message (k
spreads `--queries` over the log), asked by the agent that heard it, serving
the user who said it. LoCoMo queries are the benchmark's questions (categories
1-4), asked by the conversation's agent serving its participant, after the
harness's own pipeline (ingest, compress, evolve, project) in a temporary data
root. Tokens are those of the result's JSON, as the model reads it
(`count_tokens`: ceil(chars / 4)), through the runtime's tool call.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from dataclasses import replace
from pathlib import Path

import orjson

from tiermem import Memory
from tiermem.tokens import count_tokens


def summarise(costs: list[int]) -> dict[str, float]:
    costs = sorted(costs)
    p95 = costs[min(len(costs) - 1, math.ceil(0.95 * len(costs)) - 1)]
    return {"queries": len(costs), "mean": round(statistics.fmean(costs), 1), "p95": p95, "max": costs[-1]}


def measure(data_dir: Path, queries: int) -> dict[str, float]:
    with Memory.open(data_dir, env={}) as mem:
        rows = mem.query(
            'SELECT agent_id, "user", user_message FROM interactions'
            ' WHERE user_message IS NOT NULL AND "user" IS NOT NULL ORDER BY event_id'
        ).rows
        step = max(1, len(rows) // queries)
        costs: list[int] = []
        for agent_id, user, message in rows[::step][:queries]:
            query = " ".join(str(message).split()[:8])
            agent = mem.agent(str(agent_id), user=str(user))
            result = agent.call_tool("recall_memory", {"query": query})
            costs.append(count_tokens(orjson.dumps(result).decode()))
            agent.close()
    return summarise(costs)


def measure_locomo(data: Path) -> dict[str, float]:
    from tiermem.app.locomo import load_locomo, prepare
    from tiermem.settings import resolve_settings

    convs = load_locomo(data)
    with tempfile.TemporaryDirectory(prefix="tiermem-recall-") as tmp:
        base = resolve_settings(data_dir=Path(tmp) / "data", env={})
        settings = replace(base, anthropic_api_key=None, fsync="none")
        prepare(settings, convs)
        costs: list[int] = []
        with Memory.open(settings.data_dir, env={}) as mem:
            for conv in convs:
                agent = mem.agent(conv.agent_id, user=conv.speaker_b)
                try:
                    for q in conv.questions:
                        result = agent.call_tool("recall_memory", {"query": q.question})
                        costs.append(count_tokens(orjson.dumps(result).decode()))
                finally:
                    agent.close()
    return summarise(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path, nargs="?")
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--locomo", type=Path, help="a LoCoMo JSON file: its questions are the queries")
    args = parser.parse_args()
    if args.locomo is not None:
        print(orjson.dumps(measure_locomo(args.locomo)).decode())
    elif args.data_dir is not None:
        print(orjson.dumps(measure(args.data_dir, args.queries)).decode())
    else:
        parser.error("give a demo data root or --locomo FILE")


if __name__ == "__main__":
    main()
