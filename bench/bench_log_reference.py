"""Physical reference on this machine: raw fsync rate, disk write bandwidth, buffered writes.

    .venv/bin/python bench/bench_log_reference.py

The log's figures (bench_log_append, bench_log_ingest) are compared with these.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def fsync_rate(path: Path, n: int = 3000, size: int = 400) -> tuple[float, float, float]:
    """Append `size` bytes then fsync, n times: the best one-at-a-time durable append can do."""
    payload = b"x" * (size - 1) + b"\n"
    lat = []
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            os.write(fd, payload)
            os.fsync(fd)
            lat.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
    lat.sort()
    return n / elapsed, lat[len(lat) // 2] * 1e3, lat[int(len(lat) * 0.99)] * 1e3


def buffered_rate(path: Path, n: int = 500_000, size: int = 400) -> float:
    payload = b"x" * (size - 1) + b"\n"
    with open(path, "wb") as fh:
        start = time.perf_counter()
        for _ in range(n):
            fh.write(payload)
        fh.flush()
        os.fsync(fh.fileno())
    return n / (time.perf_counter() - start)


def batched_fsync_rate(path: Path, batches: int = 300, per_batch: int = 500, size: int = 400) -> float:
    payload = (b"x" * (size - 1) + b"\n") * per_batch
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(batches):
            os.write(fd, payload)
            os.fsync(fd)
        return batches * per_batch / (time.perf_counter() - start)
    finally:
        os.close(fd)


def dd_bandwidth(path: Path, mb: int = 1024) -> str:
    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}", "conv=fdatasync"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    match = re.search(r"copied, ([\d.]+) s, ([\d.]+ \S+)", out)
    return f"{match.group(2)} ({mb} MiB in {match.group(1)} s, conv=fdatasync)" if match else out.strip()


def main() -> None:
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent.parent / "data") as tmp:
        d = Path(tmp)
        runs = [fsync_rate(d / f"f{i}") for i in range(3)]
        rate = statistics.median(r[0] for r in runs)
        print(
            f"raw fsync, 400 B append + fsync one at a time: {rate:,.0f}/s "
            f"(p50 {statistics.median(r[1] for r in runs):.3f} ms, p99 {statistics.median(r[2] for r in runs):.3f} ms; median of 3 x 3000)"
        )
        print(f"batched fsync, 500 x 400 B per fsync: {batched_fsync_rate(d / 'b'):,.0f} records/s")
        print(
            f"buffered writes, 400 B records, one fsync at the end: {buffered_rate(d / 'w'):,.0f} records/s"
        )
        print(f"disk write bandwidth (dd): {dd_bandwidth(d / 'dd')}")


if __name__ == "__main__":
    main()
