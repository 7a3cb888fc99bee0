"""What one `recall_memory` answer costs the model: mean and p95 tokens on a demo data root.

Usage: `tiermem --data-dir DIR demo` first, then
`python bench/bench_recall_tokens.py DIR [--queries 60]`.

Queries are taken from the data itself, so they are about things that were
said: the first eight words of every k-th recorded user message (k spreads
`--queries` over the log), asked by the agent that heard it, serving the user
who said it. Tokens are those of the result's JSON, as the model reads it
(`count_tokens`: ceil(chars / 4)).
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

import orjson

from tiermem import Memory
from tiermem.tokens import count_tokens


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
    costs.sort()
    p95 = costs[min(len(costs) - 1, math.ceil(0.95 * len(costs)) - 1)]
    return {"queries": len(costs), "mean": round(statistics.fmean(costs), 1), "p95": p95, "max": costs[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    print(orjson.dumps(measure(args.data_dir, args.queries)).decode())


if __name__ == "__main__":
    main()
