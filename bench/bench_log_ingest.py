"""Bulk ingest rate of a JSONL file of realistic turns (tiermem.app.samples).

    .venv/bin/python bench/bench_log_ingest.py [RECORDS]

Target: >= 150,000 records/s. Measured with fsync=always (one
fsync per 20,000-record batch and day) and fsync=none, with the default
encoding workers (one per core, up to 4) and with everything in one process
(workers=0), then a re-run of the same file (every record a duplicate: the
idempotency check alone). Besides the wall-clock rate, each line gives the CPU
time spent per record (this process plus its workers): on a machine shared
with other work the rate follows the free cores, the CPU cost does not.
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from tiermem.ingest.pipeline import IngestInfo, ingest_file, ingest_workers

from tiermem.app import samples
from tiermem.settings import FsyncPolicy, resolve_settings

ROOT = Path(__file__).resolve().parent.parent / "data"


def _cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _line(label: str, info: IngestInfo, cpu: float) -> str:
    records = info.accepted + info.duplicates + info.rejected
    return (
        f"{label}: {info.rate_per_s:,.0f} records/s ({records:,} in {info.elapsed_s:.2f}s, "
        f"{info.batches} batches; CPU {cpu / records * 1e6:.1f} us/record, "
        f"{cpu / info.elapsed_s:.2f} cores busy)"
    )


def main(n: int) -> None:
    print(f"cores: {os.cpu_count()}, default workers: {ingest_workers(None)}, load: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        src = Path(tmp) / "turns.jsonl"
        t = time.perf_counter()
        samples.write_jsonl(src, samples.generate(days=5, per_day=n // 5, seed=1))
        print(
            f"sample: {n:,} turns, {src.stat().st_size / 1e6:.0f} MB, generated in {time.perf_counter() - t:.1f}s"
        )
        settings = resolve_settings(data_dir=Path(tmp) / "x", env={})
        runs: tuple[tuple[FsyncPolicy, int | None], ...] = (("always", None), ("none", None), ("always", 0))
        for policy, workers in runs:
            settings = resolve_settings(data_dir=Path(tmp) / f"{policy}-{workers}", env={})
            cpu = _cpu_s()
            info = ingest_file(settings, src, progress=False, fsync=policy, workers=workers)
            label = f"ingest fsync={policy} workers={'auto' if workers is None else workers}"
            print(_line(label, info, _cpu_s() - cpu))
        cpu = _cpu_s()
        again = ingest_file(settings, src, progress=False)
        print(_line("re-run (all duplicates), workers=auto", again, _cpu_s() - cpu))
        print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300_000)
