"""Where bulk ingest's CPU goes, stage by stage, in one process (workers=0).

    .venv/bin/python bench/ingest_stages.py [RECORDS] [--arrow]

Wraps the stages of `ingest_file` with CPU timers (`time.process_time`, so other
processes' load does not count): reading blocks, the compiled scan (or, with
`--arrow`, the Arrow pass), the slower paths for the lines left, assembling a
block, queueing and quarantine bookkeeping, and the writer's parts (id-index
look-up, the write, fsync, the id-index insert). Each stage's figure is its
CPU microseconds per record; the rest of the total is the loop around them.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tiermem.ingest.compiled as compiled_mod
import tiermem.ingest.pipeline as pipeline
from tiermem.ingest.pipeline import ingest_file

import tiermem.durable_files as durable_files
import tiermem.eventlog as eventlog
from tiermem.app import samples
from tiermem.settings import resolve_settings

ROOT = Path(__file__).resolve().parent.parent / "data"
SPENT: dict[str, float] = defaultdict(float)


def _timed(owner: Any, name: str, label: str, static: bool = False) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            SPENT[label] += time.process_time() - start

    setattr(owner, name, staticmethod(wrapper) if static else wrapper)


def _timed_generator(owner: Any, name: str, label: str) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        items = inner(*args, **kwargs)
        while True:
            start = time.process_time()
            try:
                item = next(items)
            except StopIteration:
                SPENT[label] += time.process_time() - start
                return
            SPENT[label] += time.process_time() - start
            yield item

    setattr(owner, name, wrapper)


def main(n: int, arrow: bool) -> None:
    ROOT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        src = Path(tmp) / "turns.jsonl"
        samples.write_jsonl(src, samples.generate(days=5, per_day=n // 5, seed=1))
        # Nested stages are subtracted from their parents below.
        _timed_generator(pipeline, "read_blocks", "read blocks")
        _timed(pipeline, "encode_block", "encode (all)")
        _timed(compiled_mod, "scan_block", "  compiled scan")
        _timed(pipeline, "native_rows", "  Arrow pass")
        _timed(pipeline, "fast_rows", "  Python columnar (lines left)")
        _timed(pipeline, "_encode_one", "  per-record (lines left)")
        _timed(pipeline, "_collect_rejects", "quarantine bookkeeping")
        _timed(pipeline, "_queue_by_stream", "queue by stream")
        _timed(eventlog.EventLog, "reject_many", "write quarantine")
        _timed(eventlog.EventLog, "append_encoded", "append (all)")
        _timed(eventlog.EventLog, "_indexed_ids", "  id index look-up", static=True)
        _timed(eventlog, "_new_per_partition", "  duplicates")
        _timed(durable_files, "write_all", "  write")
        _timed(os, "fsync", "  fsync")
        _timed(eventlog.EventLog, "_index_written", "  id index insert")
        settings = resolve_settings(data_dir=Path(tmp) / "data", env={})
        start = time.process_time()
        info = ingest_file(settings, src, progress=False, workers=0, compiled=not arrow)
        total = time.process_time() - start
    records = info.accepted + info.duplicates + info.rejected
    print(
        f"{records:,} records, workers=0, {'Arrow pass' if arrow else 'compiled scan'}: "
        f"{info.rate_per_s:,.0f}/s wall, CPU {total / records * 1e6:.2f} us/record, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    nested = {
        "encode (all)": [k for k in SPENT if k.startswith("  ") and k.strip() in _ENCODE],
        "append (all)": [k for k in SPENT if k.startswith("  ") and k.strip() not in _ENCODE],
    }
    accounted = 0.0
    for label, spent in SPENT.items():
        own = spent - sum(SPENT[k] for k in nested.get(label, []))
        shown = f"{label} (own)" if label in nested else label
        print(f"  {shown:<40} {own / records * 1e6:6.2f} us/record")
        if not label.startswith("  "):
            accounted += spent
    print(f"  {'loop, progress, setup (the rest)':<40} {(total - accounted) / records * 1e6:6.2f} us/record")


_ENCODE = {"compiled scan", "Arrow pass", "Python columnar (lines left)", "per-record (lines left)"}

if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 100_000, "--arrow" in sys.argv)
