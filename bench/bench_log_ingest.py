"""Bulk ingest rate of a JSONL file of realistic turns (tiermem.samples).

    .venv/bin/python bench/bench_log_ingest.py [RECORDS]

Target (DESIGN.md): >= 150,000 records/s. Measured with fsync=always (one
fsync per 20,000-record batch and day) and fsync=none, then a re-run of the
same file (every record a duplicate: the idempotency check alone).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tiermem import samples
from tiermem.ingest.pipeline import ingest_file
from tiermem.settings import resolve_settings

ROOT = Path(__file__).resolve().parent.parent / "data"


def main(n: int) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        src = Path(tmp) / "turns.jsonl"
        t = time.perf_counter()
        samples.write_jsonl(src, samples.generate(days=5, per_day=n // 5, seed=1))
        print(
            f"sample: {n:,} turns, {src.stat().st_size / 1e6:.0f} MB, generated in {time.perf_counter() - t:.1f}s"
        )
        for policy in ("always", "none"):
            settings = resolve_settings(data_dir=Path(tmp) / policy, env={})
            info = ingest_file(settings, src, progress=False, fsync=policy)
            print(
                f"ingest fsync={policy}: {info.rate_per_s:,.0f} records/s ({info.accepted:,} in {info.elapsed_s:.2f}s, {info.batches} batches)"
            )
        again = ingest_file(settings, src, progress=False)
        print(f"re-run (all duplicates): {again.rate_per_s:,.0f} records/s ({again.duplicates:,} duplicates)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300_000)
