"""One caller's CPU per durable append into a log of N turns, block after block (the first block against the next).

    .venv/bin/python bench/append_warmup.py --root /tmp/curves10 --turns 10000,100000,1000000

`bench_cost_curves.py` times the first `--appends` (300) appends after opening
a log of N turns, and their CPU per record is higher at 1M turns than at
10k. This asks whether that is a cost per append that grows with the log or
the first appends paying for cold pages: on a copy of the same batch day
(`ROOT/batch/AGENTSx100`, made by bench_cost_curves), it times (CPU) blocks
of appends one after the other (`bench_log_append`'s one caller, fsync
always) and prints each block's CPU per record.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_cost_curves as bcc
import bench_log_append as bla

from tiermem.eventlog import EventLog


def blocks(root: Path, turns: int, size: int, count: int) -> list[float]:
    source = bcc.batch_day(root, turns)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        shutil.copytree(source / "log", Path(tmp) / "log")
        with EventLog(bla._settings(tmp, "always")) as log:
            log.append(bla.record(-1, "first"))
            out = []
            for k in range(count):
                c0 = time.process_time()
                bla.calls(log, f"w{k}", size, 1, 0)
                out.append((time.process_time() - c0) / size * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", required=True, help="the --root of bench_cost_curves.py (its batch days)")
    ap.add_argument("--turns", default="10000,100000,1000000")
    ap.add_argument("--block", type=int, default=300, help="appends per block (the curves time one block)")
    ap.add_argument("--blocks", type=int, default=4)
    args = ap.parse_args(argv)
    for turns in (int(x) for x in args.turns.split(",")):
        per = blocks(Path(args.root), turns, args.block, args.blocks)
        shown = " / ".join(f"{x:.1f}" for x in per)
        print(
            f"{turns:>9,} turns: µs CPU per append, block by block: {shown} (load {os.getloadavg()[0]:.1f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
