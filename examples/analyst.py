"""An analyst's view of the log: SQL over the views -> a Polars frame -> a chart (PNG).

    python examples/analyst.py                                   # a generated week, in a fresh data root
    python examples/analyst.py --data-dir ./data --out cost.png  # your own log (e.g. after `make demo`)

`Memory.sql` runs one read-only statement over the same views as `tiermem sql`
(`interactions`, `episodes`, `knowledge`, `retrievals`, ...) and returns an
Arrow table, which Polars (and pandas, DuckDB, ...) read without a copy.
When the data root has no interactions yet, the script first loads a small,
seeded week of turns so there is something to look at.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from tiermem import Memory

MODELS = ("claude-sonnet-5", "claude-haiku-4-5", "claude-opus-5")
AGENTS = ("support-bot", "coding-agent", "nexus-npc")

PER_DAY_SQL = """
SELECT CAST(ts AS DATE)                        AS day,
       coalesce(model, '(not recorded)')       AS model,
       count(*)                                AS turns,
       sum(usage.input_tokens)                 AS input_tokens,
       sum(usage.output_tokens)                AS output_tokens,
       round(avg(latency_ms))                  AS mean_latency_ms
FROM interactions
GROUP BY ALL
ORDER BY day, model
"""


def sample_week(path: Path, seed: int = 11) -> Path:
    """A seeded week of turns (three agents, three models, token usage, latency) as JSONL."""
    rng = random.Random(seed)
    start = datetime.now(UTC).replace(hour=8, minute=0, second=0, microsecond=0) - timedelta(days=7)
    lines = []
    for day in range(7):
        for n in range(rng.randint(40, 90)):
            ts = start + timedelta(days=day, minutes=7 * n + rng.randint(0, 6))
            model = rng.choices(MODELS, weights=(6, 3, 1))[0]
            record = {
                "type": "interaction",
                "agent_id": rng.choice(AGENTS),
                "user": f"user-{rng.randint(1, 25)}",
                "ts": ts.isoformat().replace("+00:00", "Z"),
                "user_message": f"request {day}-{n}",
                "agent_response": "done " * rng.randint(5, 80),
                "model": model,
                "usage": {"input_tokens": rng.randint(800, 6000), "output_tokens": rng.randint(50, 900)},
                "latency_ms": round(rng.uniform(300, 6000), 1),
            }
            lines.append(orjson.dumps(record))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def cost_usd(frame: pl.DataFrame, prices: Mapping[str, Any]) -> pl.DataFrame:
    """Add an estimated cost column from the settings' USD prices per million tokens."""
    price_in = pl.col("model").replace_strict({m: p.input for m, p in prices.items()}, default=0.0)
    price_out = pl.col("model").replace_strict({m: p.output for m, p in prices.items()}, default=0.0)
    return frame.with_columns(
        ((pl.col("input_tokens") * price_in + pl.col("output_tokens") * price_out) / 1e6).alias("cost_usd")
    )


def chart(per_day: pl.DataFrame, out: Path) -> Path:
    """Stacked bars: estimated cost per day, one colour per model."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    wide = per_day.pivot(on="model", index="day", values="cost_usd", aggregate_function="sum").fill_null(0)
    wide = wide.sort("day")
    days = [str(d) for d in wide["day"]]
    fig, ax = plt.subplots(figsize=(8, 4))
    bottom = [0.0] * len(days)
    for model in [c for c in wide.columns if c != "day"]:
        values = wide[model].to_list()
        ax.bar(days, values, bottom=bottom, label=model)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("estimated cost (USD)")
    ax.set_title("Model cost per day")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", help="tiermem data root (default: a fresh temporary one)")
    parser.add_argument("--out", help="chart file (default: <data-dir>/reports/analyst/cost_per_day.png)")
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="tiermem-analyst-"))

    with Memory.open(data_dir) as mem:
        if mem.sql("SELECT count(*) AS n FROM interactions")["n"][0].as_py() == 0:
            loaded = mem.ingest(sample_week(data_dir / "imports" / "sample_week.jsonl"))
            print(f"the log was empty: loaded a generated week of {loaded.accepted} turns")

        # prices: the data root's settings ([prices."model"] in tiermem.toml overrides them)
        per_day = cost_usd(pl.DataFrame(pl.from_arrow(mem.sql(PER_DAY_SQL))), mem.settings.prices)
        by_model = (
            per_day.group_by("model")
            .agg(pl.col("turns").sum(), pl.col("output_tokens").sum(), pl.col("cost_usd").sum().round(2))
            .sort("cost_usd", descending=True)
        )
        with pl.Config(tbl_rows=20, tbl_hide_dataframe_shape=True):
            print("\nper model:")
            print(by_model)
        days = per_day["day"].n_unique()
        total = per_day["cost_usd"].sum()
        print(f"\n{per_day['turns'].sum()} turns over {days} day(s), estimated cost ${total:.2f}")
        out = chart(per_day, Path(args.out) if args.out else data_dir / "reports/analyst/cost_per_day.png")
        print(f"chart: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
