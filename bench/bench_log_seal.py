"""Sealing one day of 1M interactions to zstd Parquet: time and peak memory.

    .venv/bin/python bench/bench_log_seal.py [RECORDS]

Target: <= 6 s, peak memory <= 1.5 GB. The day is loaded with
`ingest --fsync none` (its rate is printed too); the seal runs in a child
process so that its peak RSS (ru_maxrss) is the seal's alone.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from tiermem.ingest.pipeline import ingest_file

from tiermem.app import samples
from tiermem.ids import utcnow
from tiermem.settings import resolve_settings

ROOT = Path(__file__).resolve().parent.parent / "data"
SEAL = """
import sys, time, json
from tiermem.log.seal import seal
from tiermem.settings import resolve_settings
info = seal(resolve_settings(data_dir=sys.argv[1], env={}))
print(json.dumps({"rows": info.sealed_rows, "segments": info.sealed_segments, "elapsed_s": info.elapsed_s,
                  "jsonl_bytes": info.jsonl_bytes, "parquet_bytes": info.parquet_bytes,
                  "convert_s": round(sum(s.convert_s for s in info.segments), 2),
                  "verify_s": round(sum(s.verify_s for s in info.segments), 2)}))
"""


def main(n: int) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        src = Path(tmp) / "day.jsonl"
        yesterday = (utcnow() - timedelta(days=1)).date()
        t = time.perf_counter()
        samples.write_jsonl(src, samples.generate(days=1, per_day=n, end=yesterday, seed=2))
        print(f"sample: {n:,} turns of {yesterday}, generated in {time.perf_counter() - t:.1f}s")
        settings = resolve_settings(data_dir=Path(tmp) / "data", env={})
        info = ingest_file(settings, src, progress=False, fsync="none")
        print(f"loaded with ingest --fsync none: {info.rate_per_s:,.0f} records/s")
        src.unlink()
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", SEAL, str(settings.data_dir)], capture_output=True, text=True, check=True
        )
        wall = time.perf_counter() - started
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"seal: {out.stdout.strip()}")
        print(
            f"seal of {n:,} interactions: {wall:.2f}s wall (process start included), peak RSS {peak_mb:,.0f} MB"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)
