"""One agent's `recall_memory` against the number of other agents in the store, as a chart.

    .venv/bin/python bench/plot_recall_agents.py

Reads what `bench_recall_agents.py` wrote (results/recall_agents.json, and results/recall_agents_1m.json
for a 1M-episode run made apart, and the copy-vs-index A/B results/recall_agents_tool_ab.json) and
draws results/recall_agents.png: the tool's CPU p50 and p99 per call against the agents in the
store (100 episodes each), next to the raw FTS5 query of the same question over the whole index
(the physical reference, same run), and the A/B's two arms where it was run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

RESULTS = Path(__file__).resolve().parent / "results"


def _sizes() -> list[dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for name in ("recall_agents.json", "recall_agents_1m.json"):
        path = RESULTS / name
        if path.exists():
            for row in orjson.loads(path.read_bytes()).get("sizes", []):
                rows[int(row["agents"])] = row
    return [rows[a] for a in sorted(rows)]


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = _sizes()
    if not sizes:
        print("no results/recall_agents*.json: run bench_recall_agents.py first")
        return 1
    xs = [r["agents"] for r in sizes]
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.plot(xs, [r["tool_cpu_p50"] for r in sizes], "o-", label="recall_memory CPU p50")
    ax.plot(xs, [r["tool_cpu_p99"] for r in sizes], "o-", label="recall_memory CPU p99")
    ax.plot(
        xs, [r["raw_fts_cpu_p99"] for r in sizes], "x--", color="grey", label="raw FTS5 query p99 (reference)"
    )
    ab_path = RESULTS / "recall_agents_tool_ab.json"
    if ab_path.exists():
        ab = orjson.loads(ab_path.read_bytes()).get("tool_ab", [])
        if ab:
            ax.plot(
                [r["agents"] for r in ab],
                [r["index_cpu_p99"] for r in ab],
                "s:",
                color="red",
                label="through the index (no copy), p99, A/B",
            )
            ax.plot(
                [r["agents"] for r in ab],
                [r["copy_cpu_p99"] for r in ab],
                "s:",
                color="green",
                label="over the agent's copy, p99, A/B",
            )
    ax.axhline(10, color="black", linewidth=0.6, linestyle="--", label="target p99 10 ms")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("agents in the store (100 episodes each)")
    ax.set_ylabel("CPU ms per call")
    ax.set_title("one agent's recall_memory against the other agents in the store")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = RESULTS / "recall_agents.png"
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
