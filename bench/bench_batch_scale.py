"""`review` and `compress` of 10k agents' day (1M turns) on the local engine and on Ray with N CPUs.

    .venv/bin/python bench/bench_batch_scale.py --job review --engine ray --cpus 2 [--agents 10000 --turns 100]

The day is made once by `batch_data.py` (deterministic) under
`--cache` and copied for every run, so each run starts from the same log
and an empty checkpoint. Times the job as `tiermem review|compress --engine
...` runs it (a local Ray is started before the clock starts: a cluster is
already up in production). Prints one JSON line: wall seconds, this process's
CPU seconds, the 1-minute load average before and after, and the job's counts.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).parent))
from batch_data import generate

from tiermem.settings import resolve_settings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", choices=("review", "compress"), required=True)
    ap.add_argument("--engine", choices=("local", "ray"), default="local")
    ap.add_argument("--cpus", type=int, default=0, help="Ray CPUs (0: all)")
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "tiermem-batch-bench")
    args = ap.parse_args()
    day = date(2026, 11, 23)
    source = args.cache / f"{args.agents}x{args.turns}"
    if not (source / "log").exists():
        generate(source, args.agents, args.turns, day)
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        root = Path(tmp) / "data"
        shutil.copytree(source / "log", root / "log")
        settings = resolve_settings(data_dir=root, env={})
        settings = replace(
            settings,
            anthropic_api_key=None,
            batch=replace(settings.batch, engine=args.engine, ray_num_cpus=args.cpus),
        )
        from tiermem.app.engines import open_engine

        with open_engine(settings) as engine:
            load0 = os.getloadavg()[0]
            t0, c0 = time.perf_counter(), time.process_time()
            info: Any
            if args.job == "review":
                from tiermem.reviewer.job import run_review

                info = run_review(settings, day=day.isoformat(), engine=engine)
                counts = {"reports": info.reports, "interactions": info.interactions}
            else:
                from tiermem.compressor.job import run_compress

                info = run_compress(settings, progress=False, engine=engine)
                counts = {
                    "interactions": info.interactions_scored,
                    "episodes": info.episodes,
                    "proposals": info.proposals,
                    "relationships": info.relationships,
                }
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            workers = engine.workers
        print(
            orjson.dumps(
                {
                    "job": args.job,
                    "engine": args.engine,
                    "workers": workers,
                    "agents": args.agents,
                    "turns": args.agents * args.turns,
                    "wall_s": round(wall, 1),
                    "driver_cpu_s": round(cpu, 1),
                    "load_before": round(load0, 1),
                    "load_after": round(os.getloadavg()[0], 1),
                    **counts,
                }
            ).decode()
        )


if __name__ == "__main__":
    main()
