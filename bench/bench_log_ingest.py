"""Bulk ingest rate of a JSONL file of realistic turns (tiermem.app.samples).

    .venv/bin/python bench/bench_log_ingest.py [RECORDS] [ROUNDS] [--only=native,compiled]
    .venv/bin/python bench/bench_log_ingest.py --curve   # rate vs file size, PNG + JSON in bench/results/

Target: >= 150,000 records/s. Measured with fsync=always (one fsync per
20,000-record batch and day) and fsync=none, with the default encoding workers
(one per core, up to 4) and with everything in one process (workers=0), each
with the paths back to back: per-record, the Python columnar path, the native
(Arrow) pass in front of it, and the compiled scanner in front of those (old vs
new in the same run, interleaved), then a re-run of the same file (every record
a duplicate: the idempotency check alone). The disk's references (buffered
writes, batched fsync) are measured first in the same run. Besides the
wall-clock rate, each line gives the CPU time spent per record (this process
plus its workers): on a machine shared with other work the rate follows the
free cores, the CPU cost does not.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from bench_log_reference import batched_fsync_rate, buffered_rate
from tiermem.ingest.pipeline import IngestInfo, ingest_file, ingest_workers

from tiermem.app import samples
from tiermem.settings import FsyncPolicy, resolve_settings

ROOT = Path(__file__).resolve().parent.parent / "data"
RESULTS = Path(__file__).resolve().parent / "results"


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


# (columnar, native, compiled) of `ingest_file`; "native" is the default before the compiled scanner.
PATHS = {
    "per-record": (False, False, False),
    "columnar": (True, False, False),
    "native": (True, True, False),
    "compiled": (True, True, True),
}


def main(n: int, rounds: int = 2, only: tuple[str, ...] = tuple(PATHS)) -> None:
    print(
        f"cores: {os.cpu_count()}, default workers: {ingest_workers(None)}, "
        f"load: {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    ROOT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        buffered = buffered_rate(Path(tmp) / "w", n=200_000)
        batched = batched_fsync_rate(Path(tmp) / "b", batches=100)
        print(
            f"reference (this run): buffered 400 B writes {buffered:,.0f}/s; "
            f"500 records per fsync {batched:,.0f}/s; load {os.getloadavg()[0]:.1f}"
        )
        src = Path(tmp) / "turns.jsonl"
        t = time.perf_counter()
        samples.write_jsonl(src, samples.generate(days=5, per_day=n // 5, seed=1))
        print(
            f"sample: {n:,} turns, {src.stat().st_size / 1e6:.0f} MB, generated in {time.perf_counter() - t:.1f}s"
        )
        # Each setting runs the three paths back to back (old and new in the same minute,
        # so the machine's load is shared alike), `rounds` times over.
        settings_runs: tuple[tuple[FsyncPolicy, int | None], ...] = (
            ("always", None),
            ("none", None),
            ("always", 0),
        )
        run = 0
        for round_ in range(rounds):
            for policy, workers in settings_runs:
                for label, (columnar, native, compiled) in PATHS.items():
                    if label not in only:
                        continue
                    run += 1
                    settings = resolve_settings(data_dir=Path(tmp) / f"run{run}", env={})
                    cpu = _cpu_s()
                    info = ingest_file(
                        settings,
                        src,
                        progress=False,
                        fsync=policy,
                        workers=workers,
                        columnar=columnar,
                        native=native,
                        compiled=compiled,
                    )
                    tag = f"[{round_ + 1}] ingest {label:<10} fsync={policy} workers={'auto' if workers is None else workers}"
                    print(_line(tag, info, _cpu_s() - cpu) + f" load {os.getloadavg()[0]:.1f}")
        cpu = _cpu_s()
        again = ingest_file(settings, src, progress=False)
        print(_line("re-run (all duplicates), default path, workers=auto", again, _cpu_s() - cpu))
        print(f"load after: {os.getloadavg()[0]:.1f}")


def curve(sizes: tuple[int, ...] = (10_000, 30_000, 100_000, 300_000)) -> None:
    """Ingest rate and CPU per record vs file size, next to the disk's references of the same run."""
    ROOT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        buffered = buffered_rate(Path(tmp) / "w", n=200_000)
        batched = batched_fsync_rate(Path(tmp) / "b", batches=100)
        res: dict[str, object] = {
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load": round(os.getloadavg()[0], 1),
            "reference": {"buffered_rate": buffered, "batched_rate": batched},
        }
        print(f"reference: buffered 400 B writes {buffered:,.0f}/s; 500 records per fsync {batched:,.0f}/s")
        rows = []
        for n in sizes:
            src = Path(tmp) / f"turns-{n}.jsonl"
            samples.write_jsonl(src, samples.generate(days=5, per_day=n // 5, seed=1))
            settings = resolve_settings(data_dir=Path(tmp) / f"d{n}", env={})
            row: dict[str, float] = {"records": n}
            for key, (columnar, native, compiled) in PATHS.items():
                key = key.replace("-", "_")
                settings = resolve_settings(data_dir=Path(tmp) / f"d{n}-{key}", env={})
                cpu = _cpu_s()
                info = ingest_file(
                    settings,
                    src,
                    progress=False,
                    fsync="always",
                    columnar=columnar,
                    native=native,
                    compiled=compiled,
                )
                used = _cpu_s() - cpu
                row[f"rate_{key}"] = info.rate_per_s
                row[f"cpu_us_per_record_{key}"] = used / n * 1e6
                print(
                    f"{n:>9,} records, {key}: {info.rate_per_s:,.0f}/s ({info.rate_per_s / batched:.2f} of "
                    f"batched fsync, {info.rate_per_s / buffered:.3f} of buffered writes), "
                    f"CPU {used / n * 1e6:.1f} us/record"
                )
            rows.append(row)
        res["rows"] = rows
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "log_ingest.json").write_text(json.dumps(res, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    xs = [r["records"] for r in rows]
    for key in ("per_record", "columnar", "native", "compiled"):
        ax1.plot(xs, [r[f"rate_{key}"] for r in rows], "o-", label=f"bulk ingest {key}, fsync=always")
        ax2.plot(xs, [r[f"cpu_us_per_record_{key}"] for r in rows], "o-", label=f"CPU per record, {key}")
    ax1.axhline(150_000, color="red", ls="--", label="target 150k/s")
    ax1.axhline(batched, color="black", ls=":", label="batched fsync (same run)")
    ax1.set(xscale="log", yscale="log", xlabel="records in the file", ylabel="records/s")
    ax2.set(xscale="log", xlabel="records in the file", ylabel="us of CPU per record")
    for ax in (ax1, ax2):
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(f"bulk ingest ({res['when']}, load {res['load']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(RESULTS / "log_ingest.png", dpi=90)
    print(f"load after: {os.getloadavg()[0]:.1f}; wrote {RESULTS / 'log_ingest.png'}")


if __name__ == "__main__":
    if "--curve" in sys.argv:
        curve()
    else:
        args = [a for a in sys.argv[1:] if not a.startswith("--")]
        # --only=native,compiled: just those paths (the A/B of the default path against its predecessor)
        picked = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")), ",".join(PATHS))
        main(
            int(args[0]) if args else 300_000,
            int(args[1]) if len(args) > 1 else 2,
            tuple(picked.split(",")),
        )
