"""Interleaved A/B runs of `bench_serve.py`: another installation's server against this one.

    .venv/bin/python bench/serve_ab.py --baseline /tmp/main-export/.venv/bin/python --rounds 3
    .venv/bin/python bench/serve_ab.py --baseline ... --workers 1 2 --seconds 30 --json out.json
    .venv/bin/python bench/serve_ab.py --baseline ... --also "no pipeline=/tmp/ablation/.venv/bin/python"

Each round runs the baseline server (the interpreter of another checkout's
venv, e.g. an export of `main` with `make .venv/.installed`), then this
checkout's server with each `--workers` count, one after the other, so that
all of them meet the same machine load; a markdown table row per run is
printed as it finishes (time, load, throughput, latencies, CPU per turn, the
raw fsync rate measured around the run, lost turns).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def run(python: str, workers: int, clients: int, seconds: float) -> dict[str, Any]:
    command = [
        sys.executable,
        str(HERE / "bench_serve.py"),
        "--json",
        "--clients",
        str(clients),
        "--seconds",
        str(seconds),
        "--server-python",
        python,
        "--workers",
        str(workers),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        raise SystemExit(f"bench_serve failed ({done.returncode}):\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def row(label: str, r: dict[str, Any]) -> str:
    return (
        f"| {time.strftime('%H:%M', time.gmtime())} ({r['load_before']} / {r['load_after']}) | {label} | "
        f"{r['created_201']:,} | {r['turns_per_s']:,.0f}/s | {r['p50_ms']} | {r['p99_ms']} | {r['p999_ms']} | {r['max_ms']} | "
        f"**{r['lost']}** | {r['server_cpu_us_per_turn']} ({r['event_loop_cpu_us_per_turn']} + "
        f"{r['other_threads_cpu_us_per_turn']}) | {r['client_cpu_us_per_turn']} | "
        f"{r['raw_fsync_before']['per_s']:,} / {r['raw_fsync_after']['per_s']:,} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", required=True, help="the baseline server's interpreter")
    parser.add_argument(
        "--also",
        action="append",
        default=[],
        metavar="LABEL=PYTHON",
        help="another installation's server run in each round too (e.g. an ablation); repeatable",
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1], help="worker counts of this checkout")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", type=Path, help="also write every result to this file")
    args = parser.parse_args()
    print(
        "| run (UTC, load before / after) | server | turns (201) | throughput | p50 ms | p99 ms | p99.9 ms | max ms "
        "| lost | server CPU µs/turn (loop + other threads) | client CPU µs/turn | raw fsync/s before / after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = []
    for _ in range(args.rounds):
        also = [(label, python, 1) for label, python in (item.split("=", 1) for item in args.also)]
        configs = [("baseline", args.baseline, 1), *also] + [
            (f"this, {w} worker{'s' if w > 1 else ''}", sys.executable, w) for w in args.workers
        ]
        for label, python, workers in configs:
            r = run(python, workers, args.clients, args.seconds)
            results.append({"label": label, **r})
            print(row(label, r), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0 if all(r["lost"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
