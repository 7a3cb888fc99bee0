"""The shortlist reranker (runtime.rerank) on LoCoMo dev, leave-one-conversation-out.

    .venv/bin/python bench/bench_rerank.py --data ../shared/bench/locomo_dev.json
    .venv/bin/python bench/bench_rerank.py --data ... --rerank static minilm --budgets 250 500 1000 --json
    .venv/bin/python bench/bench_rerank.py --data ... --rerank static --fit   # the constants of MODELS
    .venv/bin/python bench/bench_rerank.py --data ... --expand static   # fitted and delivered with the expansion

One data root is prepared exactly as `tiermem bench locomo` prepares it
(tiermem.app.locomo: ingestion, compression, projection; `--mode hybrid` for a
hybrid store). For every question, the recall's shortlist (`search_quotes`,
60 passages) and the features of its first `--depth` passages are computed
with the reranker's own code; labels are whether a passage cites a gold
evidence turn. For each conversation a model is fitted on the other six and
used for that conversation only, so no figure below is in-sample:

- hit@k: a gold turn among the first k of the shortlist, search order vs reranked;
- the budget protocol (`TiermemContext.deliver` + `score_question`, the
  harness's own code) at each budget, reranker off vs on, per category;
- latency of one `Reranker.reorder` (the embedder not cached), CPU and wall.

The bench caches embeddings by text while computing features (MiniLM costs
~20 ms per passage; the cached vectors are the same), and times the
reranker separately on `--timed` questions without the cache.
`--fit` prints the model fitted on all seven conversations (for MODELS).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from tiermem.runtime import quote_search
from tiermem.runtime.rerank import MODELS, LinearModel, Reranker, features, fit_linear

from tiermem.app.locomo import TiermemContext, aggregate, load_locomo, prepare, score_question
from tiermem.embeddings import Embedder, Vectors, load_embedder
from tiermem.settings import EXPAND_MODES, RERANK_EMBEDDERS, RERANK_MODES, resolve_settings

METRICS = ("evidence_recall", "answer_recall", "answer_full")
HIT_AT = (1, 5, 10, 12, 20)


class CachedEmbedder:
    """The same vectors as `inner`, each distinct text embedded once (bench only)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name, self.dim, self.identity = inner.name, inner.dim, inner.identity
        self.cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> Vectors:
        todo = list(dict.fromkeys(t for t in texts if t not in self.cache))
        if todo:
            for t, v in zip(todo, self.inner.embed(todo), strict=True):
                self.cache[t] = v
        return np.stack([self.cache[t] for t in texts]).astype(np.float32)


def _pct(values: list[float], p: float) -> float:
    return float(np.percentile(values, p)) if values else 0.0


def collect(
    settings: Any, convs: list[Any], embedder: Embedder | None, depth: int, columns: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Per question: its conversation, gold event ids, shortlist event ids, features, lengths and labels."""
    out = []
    for ci, conv in enumerate(convs):
        ev = {t.dia_id: t.event_id for t in conv.turns}
        system = TiermemContext(settings, conv)
        try:
            store = system.memory.store
            for q in conv.questions:
                # The store's own query expansion (retrieval.expand) too: the model is fitted on
                # the shortlists the delivered path ranks.
                found = quote_search.search_quotes(
                    store.conn,
                    system.memory.principal,
                    q.question,
                    limit=60,
                    dense=store.dense,
                    expand=store.expand,
                )
                gold = {ev[d] for d in q.evidence if d in ev}
                head = found[:depth]
                out.append(
                    {
                        "conv": ci,
                        "order": [f["event_id"] for f in found],
                        "gold": gold,
                        "x": features(store.conn, embedder, q.question, head, columns=columns),
                        "chars": np.array([len(f["text"]) for f in head], dtype=np.float64),
                        "y": np.array([f["event_id"] in gold for f in head], dtype=np.float64),
                    }
                )
        finally:
            system.close()
    return out


def hits(orders: list[list[str]], golds: list[set[str]]) -> dict[str, float]:
    return {
        f"hit@{k}": round(
            float(np.mean([any(e in g for e in o[:k]) for o, g in zip(orders, golds, strict=True)])), 4
        )
        for k in HIT_AT
    }


def loco_models(
    rows: list[dict[str, Any]], n_convs: int, columns: tuple[str, ...], per_char: float
) -> list[LinearModel]:
    return [
        fit_linear(
            [r["x"] for r in rows if r["conv"] != c],
            [r["y"] for r in rows if r["conv"] != c],
            columns=columns,
            per_char=per_char,
        )
        for c in range(n_convs)
    ]


def reranked_orders(rows: list[dict[str, Any]], models: list[LinearModel], depth: int) -> list[list[str]]:
    out = []
    for r in rows:
        if len(r["x"]) < 2:
            out.append(r["order"])
            continue
        s = models[r["conv"]].value(r["x"], r["chars"])
        head = [r["order"][int(i)] for i in np.argsort(-s, kind="stable")]
        out.append(head + r["order"][depth:])
    return out


def deliver_all(
    settings: Any, convs: list[Any], budgets: list[int], rerankers: list[Reranker | None]
) -> dict[str, Any]:
    rows: dict[int, list[tuple[str, dict[str, float], float]]] = {b: [] for b in budgets}
    for ci, conv in enumerate(convs):
        turns = {t.dia_id: t for t in conv.turns}
        system = TiermemContext(settings, conv)
        system.memory.store.rerank = rerankers[ci]
        try:
            for q in conv.questions:
                for b in budgets:
                    t0 = time.perf_counter()
                    delivered = system.deliver(q.question, b)
                    rows[b].append(
                        (q.category, score_question(delivered, q, turns), (time.perf_counter() - t0) * 1e3)
                    )
        finally:
            system.close()
    return {str(b): aggregate(r) for b, r in rows.items()}


def time_reorder(
    settings: Any, convs: list[Any], embedder: Embedder | None, model: LinearModel, depth: int, n: int
) -> dict[str, Any]:
    """CPU and wall time of `Reranker.reorder` over the first `n` questions: `cold` with an empty
    vector cache each time (every passage embedded), `warm` with one reranker kept across the
    questions in order (what a store serving one conversation sees)."""
    warm = Reranker(embedder, model, depth)
    times: dict[str, tuple[list[float], list[float]]] = {"cold": ([], []), "warm": ([], [])}
    done = 0
    for conv in convs:
        system = TiermemContext(settings, conv)
        try:
            store = system.memory.store
            conn, who = store.conn, system.memory.principal
            for q in conv.questions:
                if done >= n:
                    break
                done += 1
                found = quote_search.search_quotes(
                    conn, who, q.question, limit=60, dense=store.dense, expand=store.expand
                )
                for name, reranker in (("cold", Reranker(embedder, model, depth)), ("warm", warm)):
                    c0, w0 = time.process_time(), time.perf_counter()
                    reranker.reorder(conn, q.question, found)
                    times[name][0].append((time.process_time() - c0) * 1e3)
                    times[name][1].append((time.perf_counter() - w0) * 1e3)
        finally:
            system.close()
    return {
        name: {
            "questions": len(cpu),
            "cpu_p50_ms": round(_pct(cpu, 50), 3),
            "cpu_p99_ms": round(_pct(cpu, 99), 3),
            "wall_p50_ms": round(_pct(wall, 50), 3),
            "wall_p99_ms": round(_pct(wall, 99), 3),
        }
        for name, (cpu, wall) in times.items()
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    convs = load_locomo(args.data)
    result: dict[str, Any] = {
        "mode": args.mode,
        "expand": args.expand,
        "depth": args.depth,
        "load_before": os.getloadavg()[0],
    }
    with tempfile.TemporaryDirectory(prefix="tiermem-rerank-") as tmp:
        root = Path(args.root) if args.root else Path(tmp)
        base = resolve_settings(data_dir=root / "data", env={})
        settings = replace(base, anthropic_api_key=None, fsync="none")
        settings = replace(
            settings, retrieval=replace(settings.retrieval, mode=args.mode, expand=args.expand)
        )
        marker = root / f"prepared-{args.mode}"
        if not marker.exists():
            t0 = time.perf_counter()
            prepare(settings, convs)
            result["prepare_seconds"] = round(time.perf_counter() - t0, 1)
            marker.write_text("prepared\n")
        if args.budgets and not args.skip_off:
            result["off"] = deliver_all(settings, convs, args.budgets, [None] * len(convs))
        for name in args.rerank:
            shape = MODELS[name]
            per_char = shape.per_char if args.per_char is None else args.per_char
            t0 = time.perf_counter()
            raw = load_embedder(RERANK_EMBEDDERS[name]) if shape.embeds else None
            load_s = time.perf_counter() - t0
            embedder = CachedEmbedder(raw) if raw is not None else None
            c0 = time.process_time()
            rows = collect(settings, convs, embedder, args.depth, shape.columns)
            part: dict[str, Any] = {"embedder_load_seconds": round(load_s, 2), "per_char": per_char}
            part["features_cpu_seconds"] = round(time.process_time() - c0, 1)
            models = loco_models(rows, len(convs), shape.columns, per_char)
            golds = [r["gold"] for r in rows]
            part["hit_search_order"] = hits([r["order"] for r in rows], golds)
            part["hit_reranked_loco"] = hits(reranked_orders(rows, models, args.depth), golds)
            if args.fit:
                whole = fit_linear([r["x"] for r in rows], [r["y"] for r in rows], columns=shape.columns)
                part["fitted_all"] = {**whole.__dict__, "per_char": per_char}
            if args.budgets:
                rerankers: list[Reranker | None] = [Reranker(embedder, m, args.depth) for m in models]
                part["budgets"] = deliver_all(settings, convs, args.budgets, rerankers)
            if args.timed:
                part["reorder_latency"] = time_reorder(
                    settings, convs, raw, models[0], args.depth, args.timed
                )
            result[name] = part
            print(f"{name}: {orjson.dumps(part).decode()[:400]}", file=sys.stderr)
    result["load_after"] = os.getloadavg()[0]
    return result


def table(result: dict[str, Any]) -> str:
    lines = []
    for name in (
        *(["off"] if "off" in result else []),  # absent with --skip-off
        *[k for k in result if isinstance(result[k], dict) and "hit_search_order" in result[k]],
    ):
        budgets = result[name] if name == "off" else result[name].get("budgets", {})
        for b, agg in budgets.items():
            cells = [f"{agg['all'][m]:.4f}" for m in METRICS]
            cats = [" / ".join(f"{agg[c][m]:.4f}" for m in METRICS) for c in ("1", "2", "3", "4") if c in agg]
            lines.append(f"| {name} | {b} | {' / '.join(cells)} | " + " | ".join(cats) + " |")
    for name, part in result.items():
        if isinstance(part, dict) and "hit_search_order" in part:
            lines.append(
                f"{name}: hit@k search {part['hit_search_order']} reranked (LOCO) {part['hit_reranked_loco']}"
            )
            if "reorder_latency" in part:
                lines.append(f"{name}: reorder latency {part['reorder_latency']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--root", default="", help="keep the prepared data root here (reused when present)")
    ap.add_argument("--mode", default="lexical", choices=("lexical", "hybrid"))
    ap.add_argument(
        "--expand",
        default="off",
        choices=EXPAND_MODES,
        help="retrieval.expand (query-side only: the prepared root is the same)",
    )
    ap.add_argument("--rerank", nargs="+", default=["words"], choices=RERANK_MODES[1:])
    ap.add_argument(
        "--per-char",
        type=float,
        default=None,
        help="order by probability / chars^this (default: the model's)",
    )
    ap.add_argument("--depth", type=int, default=60)
    ap.add_argument("--budgets", nargs="*", type=int, default=[250, 500, 1000])
    ap.add_argument("--timed", type=int, default=200, help="questions timed without the cache (0: none)")
    ap.add_argument(
        "--skip-off", action="store_true", help="no delivery with the reranker off (deterministic)"
    )
    ap.add_argument("--fit", action="store_true", help="also fit on all conversations and print the model")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = run(args)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() if args.json else table(result))


if __name__ == "__main__":
    main()
