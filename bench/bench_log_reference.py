"""Physical reference on this machine: raw fsync rate, flush latencies, disk write bandwidth, buffered writes.

    .venv/bin/python bench/bench_log_reference.py

The log's figures (bench_log_append, bench_log_ingest) are compared with these.

The flush floor: a synchronous caller with one record in flight cannot be answered
sooner than one device flush after its write, so N such callers top out near
N / (flush latency) appends/s even with no software at all. `flush_floor` measures
that latency four ways (append + fsync, append + fdatasync, overwrite of a
preallocated file + fdatasync, a 4 KiB O_DIRECT|O_DSYNC overwrite) and how many
fsyncs 8 threads on 8 files get through together.

The compiled group commit (`compiled_group`, bench/group_ceiling.c): 8 threads
of a C program each append one record and wait until it is durable, sharing
flushes (one at a time, overlapping, or held until every caller has a record
in it). No interpreter, no encoding, no checks:
the write, the flush and the threads' sleeps and wake-ups are what is left, so
its best rate ("gather") shows what a group commit of 8 synchronous one-record
callers reaches on this machine once the interpreter's work is gone, CPU and
disk together.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


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


def _latencies(fd: int, n: int, step: Any) -> list[float]:
    lat = []
    for i in range(n):
        t = time.perf_counter()
        step(fd, i)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return lat


def _summary(lat: list[float]) -> dict[str, float]:
    return {
        "p50_us": lat[len(lat) // 2] * 1e6,
        "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e6,
        "rate": len(lat) / sum(lat),
    }


def flush_floor(d: Path, n: int = 1000, size: int = 400) -> dict[str, dict[str, float]]:
    """Latency of one durable write, four ways, and 8 threads' fsyncs on 8 files at once."""
    payload = b"x" * (size - 1) + b"\n"
    out: dict[str, dict[str, float]] = {}

    def append_fsync(fd: int, _i: int) -> None:
        os.write(fd, payload)
        os.fsync(fd)

    def append_fdatasync(fd: int, _i: int) -> None:
        os.write(fd, payload)
        os.fdatasync(fd)

    def overwrite_fdatasync(fd: int, i: int) -> None:
        os.pwrite(fd, payload, (i * size) % (1 << 20))
        os.fdatasync(fd)

    for name, step, flags, prealloc in (
        ("append + fsync", append_fsync, os.O_APPEND, False),
        ("append + fdatasync", append_fdatasync, os.O_APPEND, False),
        ("preallocated overwrite + fdatasync", overwrite_fdatasync, 0, True),
    ):
        path = d / f"floor-{len(out)}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
        try:
            if prealloc:  # blocks allocated and written once: the overwrite changes no metadata
                os.write(fd, b"\0" * (1 << 20))
                os.fsync(fd)
            out[name] = _summary(_latencies(fd, n, step))
        finally:
            os.close(fd)
    out["O_DIRECT|O_DSYNC 4 KiB overwrite"] = _direct_dsync(d / "floor-direct", n)
    out["8 threads, fsync on 8 files"] = _concurrent_fsyncs(d, payload, n)
    return out


def _direct_dsync(path: Path, n: int) -> dict[str, float]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"\0" * (1 << 20))
    os.fsync(fd)
    os.close(fd)
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
    buf.write(b"x" * 4095 + b"\n")
    fd = os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_DSYNC)
    try:
        return _summary(_latencies(fd, n, lambda fd, i: os.pwrite(fd, buf, (i % 256) * 4096)))
    finally:
        os.close(fd)


def _concurrent_fsyncs(d: Path, payload: bytes, n: int, threads: int = 8) -> dict[str, float]:
    barrier = threading.Barrier(threads + 1)
    lats: list[float] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        fd = os.open(d / f"conc-{k}", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            barrier.wait()
            mine = []
            for _ in range(n // threads):
                t = time.perf_counter()
                os.write(fd, payload)
                os.fsync(fd)
                mine.append(time.perf_counter() - t)
        finally:
            os.close(fd)
        with lock:
            lats.extend(mine)

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - start
    lats.sort()
    return {**_summary(lats), "rate": len(lats) / elapsed}


def ceiling_8(floor: dict[str, dict[str, float]]) -> float:
    """Appends/s that 8 synchronous one-record callers could reach with no software cost.

    Each waits at least one flush, so 8 / (the fastest median flush latency) if flushes
    ran side by side at that latency; but concurrent fsyncs share journal commits, so 8
    threads each appending and fsyncing its own file can do better than 8 / one flush
    when the disk is slow. The ceiling is the larger of the two."""
    best = min(v["p50_us"] for k, v in floor.items() if not k.startswith("8 threads"))
    return max(8 / (best / 1e6), floor["8 threads, fsync on 8 files"]["rate"])


def print_floor(floor: dict[str, dict[str, float]]) -> None:
    for name, v in floor.items():
        print(f"  {name:38s} p50 {v['p50_us']:7.0f} us  p99 {v['p99_us']:7.0f} us  {v['rate']:9,.0f}/s")
    best = min(v["p50_us"] for k, v in floor.items() if not k.startswith("8 threads"))
    print(
        f"  ceiling for 8 synchronous one-record callers: {ceiling_8(floor):,.0f}/s "
        f"(8 / fastest p50 = {8 / (best / 1e6):,.0f}/s; 8 threads on 8 files "
        f"{floor['8 threads, fsync on 8 files']['rate']:,.0f}/s)"
    )


def dd_bandwidth(path: Path, mb: int = 1024) -> str:
    out = subprocess.run(
        ["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mb}", "conv=fdatasync"],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    match = re.search(r"copied, ([\d.]+) s, ([\d.]+ \S+)", out)
    return f"{match.group(2)} ({mb} MiB in {match.group(1)} s, conv=fdatasync)" if match else out.strip()


def compiled_group(d: Path, threads: int = 8, seconds: float = 2.0) -> dict[str, dict[str, Any]] | None:
    """bench/group_ceiling.c built with `cc` and run in `d`: one flush at a time ("group"), a flush
    of its own for every record, side by side ("overlap"), and each flush held until every caller
    has a record in it ("gather"); None without a C compiler that builds it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    exe = d / "group_ceiling"
    source = Path(__file__).resolve().parent / "group_ceiling.c"
    try:
        subprocess.run([cc, "-O2", "-pthread", "-o", str(exe), str(source)], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        return None  # a compiler that cannot build it: no figure, the rest of the run goes on
    out: dict[str, dict[str, Any]] = {}
    for mode in ("group", "overlap", "gather"):
        run = subprocess.run(
            [str(exe), str(d / "group-ceiling.log"), str(threads), str(seconds), "400", "fsync", mode],
            check=True,
            capture_output=True,
            text=True,
        )
        out[mode] = json.loads(run.stdout)
    return out


def print_compiled_group(found: dict[str, dict[str, Any]] | None) -> None:
    if found is None:
        print("  compiled group commit: no C compiler here")
        return
    for mode, r in found.items():
        print(
            f"  compiled group commit, {r['threads']} threads x 1 record, {mode:7s}: {r['rate']:9,.0f}/s "
            f"p50 {r['p50_us']:.0f} us p99 {r['p99_us']:.0f} us, {r['cpu_us_per_record']:.1f} us CPU/record, "
            f"{r['records_per_flush']:.2f} records/flush"
        )


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
        print("flush latency (one durable write at a time; 8 threads: total fsyncs/s):")
        print_floor(flush_floor(d))
        print_compiled_group(compiled_group(d))
        print(f"disk write bandwidth (dd): {dd_bandwidth(d / 'dd')}")


if __name__ == "__main__":
    main()
