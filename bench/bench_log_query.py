"""Analyst queries over 30 sealed days x 100k interactions: the GROUP BY and a one-day query.

    .venv/bin/python bench/bench_log_query.py [ROWS_PER_DAY]

Targets: GROUP BY over 30 days x 100k rows <= 1 s; one day <= 0.1 s.
One day of realistic turns is generated, ingested and sealed by tiermem; the
other 29 days are copies of it with shifted timestamps and ids (DuckDB COPY),
in the same Hive layout. Each query is run 5 times on a fresh catalog
connection; the median is reported, and the catalog open time separately.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import duckdb
from tiermem.ingest.pipeline import ingest_file
from tiermem.log.seal import seal

from tiermem.app import samples
from tiermem.ids import utcnow
from tiermem.settings import resolve_settings
from tiermem.sqlviews import open_catalog

ROOT = Path(__file__).resolve().parent.parent / "data"
GROUP_BY = """
    SELECT agent_id, model, count(*) AS turns, sum(usage.input_tokens) AS input_tokens,
           sum(usage.output_tokens) AS output_tokens, avg(latency_ms) AS latency, avg(response_length) AS length
    FROM interactions GROUP BY ALL ORDER BY ALL"""
ONE_DAY = """
    SELECT agent_id, channel, count(*) AS turns, sum(usage.output_tokens) AS output_tokens
    FROM interactions WHERE ts >= TIMESTAMPTZ '{day}' AND ts < TIMESTAMPTZ '{day}' + INTERVAL 1 DAY
    GROUP BY ALL ORDER BY ALL"""


def build(data: Path, per_day: int) -> str:
    settings = resolve_settings(data_dir=data, env={})
    last = (utcnow() - timedelta(days=1)).date()
    src = data.parent / "day.jsonl"
    samples.write_jsonl(src, samples.generate(days=1, per_day=per_day, end=last, seed=5))
    ingest_file(settings, src, progress=False, fsync="none")
    seal(settings)
    (base,) = list((settings.log_dir / "interactions").glob("date=*/*.parquet"))
    con = duckdb.connect()
    for k in range(1, 30):
        day = last - timedelta(days=k)
        out = settings.log_dir / "interactions" / f"date={day}" / f"seg-copy{k:02d}.parquet"
        out.parent.mkdir(parents=True)
        con.execute(
            f"COPY (SELECT * REPLACE (ts - INTERVAL {k} DAY AS ts, event_id || '-{k}' AS event_id) "
            f"FROM read_parquet('{base}')) TO '{out}' (FORMAT parquet, COMPRESSION zstd)"
        )
    return str(last - timedelta(days=15))


def timed(settings_dir: Path, sql: str) -> tuple[float, float, int]:
    settings = resolve_settings(data_dir=settings_dir, env={})
    opens, runs = [], []
    rows = 0
    for _ in range(5):
        t = time.perf_counter()
        con = open_catalog(settings)
        t1 = time.perf_counter()
        rows = len(con.execute(sql).fetchall())
        runs.append(time.perf_counter() - t1)
        opens.append(t1 - t)
        con.close()
    return statistics.median(runs), statistics.median(opens), rows


def main(per_day: int) -> None:
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        data = Path(tmp) / "data"
        t = time.perf_counter()
        day = build(data, per_day)
        print(f"built 30 sealed days x {per_day:,} interactions in {time.perf_counter() - t:.1f}s")
        con = open_catalog(resolve_settings(data_dir=data, env={}))
        print(f"rows in view: {con.execute('SELECT count(*) FROM interactions').fetchone()[0]:,}")  # type: ignore[index]
        q, o, n = timed(data, GROUP_BY)
        print(f"30-day GROUP BY: {q * 1000:.0f} ms median of 5 ({n} groups); catalog open {o * 1000:.0f} ms")
        q, o, n = timed(data, ONE_DAY.format(day=day))
        print(
            f"one-day query ({day}): {q * 1000:.0f} ms median of 5 ({n} groups); catalog open {o * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
