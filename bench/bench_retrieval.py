"""LoCoMo budget protocol for every retrieval mode and several budgets, one data root per mode.

    .venv/bin/python bench/bench_retrieval.py --data ../shared/bench/locomo_dev.json
    .venv/bin/python bench/bench_retrieval.py --data ... --modes lexical hybrid --budgets 250 500 1000 --json
    .venv/bin/python bench/bench_retrieval.py --data ... --modes hybrid --embedding-model all-minilm-l6-v2-static

Exactly `tiermem bench locomo` (same ingestion, compression, projection,
delivery and scoring: tiermem.app.locomo), except that each mode's data root
is prepared once and every question is asked at every budget, so a table of
modes x budgets x categories costs one preparation per mode. Also reported:
how long preparation took (embedding at projection included) and the
latency of one delivery per budget (p50 / p99 over all questions).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from tiermem.app.locomo import (
    CATEGORIES,
    TiermemContext,
    aggregate,
    load_locomo,
    prepare,
    score_question,
)
from tiermem.settings import resolve_settings

METRICS = ("evidence_recall", "answer_recall", "answer_full")


def run_mode(
    data: Path,
    mode: str,
    budgets: list[int],
    limit: int | None,
    model: str | None = None,
    dense_weight: float | None = None,
) -> dict[str, Any]:
    convs = load_locomo(data)[:limit]
    with tempfile.TemporaryDirectory(prefix="tiermem-retrieval-") as tmp:
        base = resolve_settings(data_dir=Path(tmp) / "data", env={})
        settings = replace(base, anthropic_api_key=None, fsync="none")
        retrieval = replace(settings.retrieval, mode=mode)  # type: ignore[arg-type]
        if model:
            retrieval = replace(retrieval, embedding_model=model)
        if dense_weight is not None:
            retrieval = replace(retrieval, dense_weight=dense_weight)
        settings = replace(settings, retrieval=retrieval)
        t0 = time.perf_counter()
        prepare(settings, convs)
        prepared = time.perf_counter() - t0
        rows: dict[int, list[tuple[str, dict[str, float], float]]] = {b: [] for b in budgets}
        for conv in convs:
            turns = {t.dia_id: t for t in conv.turns}
            system = TiermemContext(settings, conv)
            try:
                for q in conv.questions:
                    for b in budgets:
                        t1 = time.perf_counter()
                        delivered = system.deliver(q.question, b)
                        ms = (time.perf_counter() - t1) * 1e3
                        rows[b].append((q.category, score_question(delivered, q, turns), ms))
            finally:
                system.close()
    return {
        "mode": mode,
        "embedding_model": settings.retrieval.embedding_model if mode != "lexical" else None,
        "dense_weight": settings.retrieval.fusion_weight if mode == "hybrid" else None,
        "prepare_seconds": round(prepared, 1),
        "budgets": {str(b): aggregate(r) for b, r in rows.items()},
    }


def table(results: list[dict[str, Any]]) -> str:
    head = "| mode | budget | all | " + " | ".join(f"cat {c}" for c in CATEGORIES) + " | p50 / p99 ms |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        for b, agg in r["budgets"].items():
            cells = []
            for key in ("all", *CATEGORIES):
                m = agg.get(key) or {}
                cells.append(" / ".join(f"{m.get(k, 0.0):.3f}" for k in METRICS))
            lat = agg.get("all", {})
            lines.append(
                f"| {r['mode']} | {b} | "
                + " | ".join(cells)
                + f" | {lat.get('latency_p50_ms', 0):.1f} / {lat.get('latency_p99_ms', 0):.1f} |"
            )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--modes", nargs="+", default=["lexical", "dense", "hybrid"])
    ap.add_argument("--budgets", nargs="+", type=int, default=[250, 500, 1000])
    ap.add_argument("--conversations", type=int, default=None)
    ap.add_argument(
        "--embedding-model", default=None, help="retrieval.embedding_model (default: the setting's)"
    )
    ap.add_argument("--dense-weight", type=float, default=None, help="retrieval.dense_weight (hybrid)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = []
    for mode in args.modes:
        c0 = time.process_time()
        r = run_mode(
            args.data, mode, args.budgets, args.conversations, args.embedding_model, args.dense_weight
        )
        r["cpu_seconds"] = round(time.process_time() - c0, 1)
        r["load_average"] = os.getloadavg()
        results.append(r)
        print(f"{mode}: prepared in {r['prepare_seconds']} s", file=sys.stderr)
    if args.json:
        sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
