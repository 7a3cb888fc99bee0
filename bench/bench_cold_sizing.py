"""Sizing figures for the deployment page: bytes per turn in each tier, and the seal to an object store.

    .venv/bin/python bench/bench_cold_sizing.py [TURNS] [--locomo ../shared/bench/locomo_dev.json]

For TURNS sample turns (default 100,000; the demo's generator, one closed day):
bytes per turn in the JSONL log, in sealed zstd Parquet (and the compression
ratio), in the Delta Lake table on an S3 API (moto's server on this machine,
so the network is loopback), and in the SQLite hot store after projection
(file size after a checkpoint, per turn; then after the offline compressor
folded the turns into episodes). Also the time of the seal and of the commit
to the table. Writes only under a temporary directory.

The generator's turns come from a small set of templates, so they compress far
better than real conversation. With `--locomo FILE`, the turns' texts are the
LoCoMo dialogues instead (each utterance and the reply to it, no text
repeated; TURNS is then at most the number of such pairs).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers_s3 import bucket_objects, start_s3, write_config
from tiermem.compressor.job import run_compress
from tiermem.ingest.pipeline import ingest_file
from tiermem.log import cold_table
from tiermem.log.seal import seal
from tiermem.runtime.projector import project

from tiermem.app import samples
from tiermem.ids import utcnow


def hot_bytes(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = (
            conn.execute("PRAGMA page_count").fetchone()[0]
            - conn.execute("PRAGMA freelist_count").fetchone()[0]
        )
        return int(pages * conn.execute("PRAGMA page_size").fetchone()[0])
    finally:
        conn.close()


def locomo_pairs(path: Path) -> list[tuple[str, str]]:
    """(utterance, reply) pairs of the LoCoMo dialogues, in order, none repeated."""
    pairs = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        sessions = sorted(
            (k for k in conv if k.startswith("session_") and isinstance(conv[k], list)),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in sessions:
            turns = [t["text"] for t in conv[key]]
            pairs += list(zip(turns[::2], turns[1::2], strict=False))
    return pairs


def main(n: int, locomo: Path | None) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        for server in start_s3():
            bucket = server.new_bucket()
            settings = write_config(Path(tmp) / "data", server, bucket)
            src = Path(tmp) / "day.jsonl"
            yesterday = (utcnow() - timedelta(days=1)).date()
            turns = list(samples.generate(days=1, per_day=n, end=yesterday, seed=2))
            if locomo:
                pairs = locomo_pairs(locomo)
                turns = turns[: len(pairs)]
                n = len(turns)
                for turn, (said, reply) in zip(turns, pairs, strict=False):
                    turn["user_message"], turn["agent_response"] = said, reply
                print(f"texts: LoCoMo dialogues ({len(pairs):,} utterance/reply pairs)")
            samples.write_jsonl(src, turns)
            ingest_file(settings, src, progress=False, fsync="none")
            jsonl = sum(p.stat().st_size for p in (settings.log_dir / "interactions").glob("date=*/*.jsonl"))
            print(f"turns: {n:,}; JSONL {jsonl / n:,.0f} bytes/turn ({jsonl / 2**20:,.1f} MiB)")

            started = time.perf_counter()
            info = seal(settings)
            wall = time.perf_counter() - started
            parquet = info.parquet_bytes
            print(
                f"sealed Parquet (zstd) {parquet / n:,.0f} bytes/turn; JSONL/Parquet = {jsonl / parquet:.1f}x; "
                f"seal + commit {wall:.1f}s ({info.cold_rows:,} rows committed, {info.cold_segments} segment(s))"
            )
            table = {k: len(v) for k, v in bucket_objects(server, bucket).items()}
            data = sum(v for k, v in table.items() if k.endswith(".parquet") and "_delta_log" not in k)
            meta = sum(v for k, v in table.items() if "_delta_log" in k)
            print(
                f"Delta table: data {data / n:,.0f} bytes/turn, transaction log {meta:,} bytes, {len(table)} objects"
            )
            started = time.perf_counter()
            again = seal(settings)
            print(
                f"seal again (nothing to commit): {time.perf_counter() - started:.2f}s, {again.cold_already} skipped"
            )
            started = time.perf_counter()
            rows = sum(ds.count_rows() for ds in cold_table.datasets(settings).values())
            print(
                f"count(*) over the table through deltalake: {rows:,} rows in {time.perf_counter() - started:.2f}s"
            )

            started = time.perf_counter()
            project(settings)
            projected = hot_bytes(settings.hot_db)
            print(
                f"SQLite hot store after projecting the turns: {projected / n:,.0f} bytes/turn "
                f"({projected / 2**20:,.1f} MiB, {time.perf_counter() - started:.1f}s)"
            )
            started = time.perf_counter()
            run_compress(settings, progress=False)
            project(settings)
            folded = hot_bytes(settings.hot_db)
            print(
                f"... after the offline compressor folded them into episodes: {folded / n:,.0f} bytes/turn "
                f"({folded / 2**20:,.1f} MiB, {time.perf_counter() - started:.1f}s)"
            )
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("turns", nargs="?", type=int, default=100_000)
    parser.add_argument("--locomo", type=Path, help="take the turns' texts from the LoCoMo dialogues")
    args = parser.parse_args()
    main(args.turns, args.locomo)
