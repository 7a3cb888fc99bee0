"""Vectors in the hot store: projection throughput and query latency at 100k items.

    .venv/bin/python bench/bench_vectors.py --data ../shared/bench/locomo_dev.json
    .venv/bin/python bench/bench_vectors.py --data ... --items 100000 --projection 2000 --queries 300
    .venv/bin/python bench/bench_vectors.py --data ... --model all-minilm-l6-v2 --projection 300

`--model` is the embedding model (default the distilled static one); `--repeats`
runs the projection that many times. Every timing is given as wall time and as
the CPU time of this process (the figure that survives a shared machine's load).

1. Projection: the first `--projection` LoCoMo turns, as episodes of 10
   turns, applied to a fresh SQLite hot store by `SQLiteHotStore.apply_batch`
   with retrieval.mode=hybrid (FTS, rows and vectors in one transaction), and
   the same with mode=lexical; items/s of each.
2. Query: `--items` passage vectors in `quote_vectors` (the first ones from
   real turns, the rest random unit vectors: the search cost does not depend
   on what the vectors mean), then `VectorIndex.nearest` for `--queries` LoCoMo
   questions, query embedding included: p50 / p99 with the sign-bit prefilter
   (the default above 20k vectors) and with the exact product.
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

import numpy as np
import orjson
from tiermem.runtime import vectors
from tiermem.runtime.sqlite_store import SQLiteHotStore
from tiermem.runtime.store import ProjectionInfo

from tiermem.app.locomo import interaction_events, load_locomo
from tiermem.ids import derived_event_id, parse_ts
from tiermem.settings import resolve_settings


def _episode_events(turns: list[dict[str, Any]], agent: str) -> list[dict[str, Any]]:
    out = []
    for s in range(0, len(turns), 10):
        group = turns[s : s + 10]
        quotes = [
            {
                "text": t.get("user_message") or t.get("agent_response"),
                "event_id": t["event_id"],
                "speaker": "x",
            }
            for t in group
        ]
        out.append(
            {
                "type": "episode",
                "event_id": derived_event_id(parse_ts(group[-1]["ts"]), "bench-episode", str(s)),
                "agent_id": agent,
                "ts": group[-1]["ts"],
                "name": f"episode {s}",
                "summary": "",
                "key_quotes": quotes,
                "participants": [],
                "start_ts": group[0]["ts"],
                "end_ts": group[-1]["ts"],
                "importance": 5,
                "source_event_ids": [t["event_id"] for t in group],
            }
        )
    return out


def projection(data: Path, n: int, mode: str, model: str) -> dict[str, Any]:
    convs = load_locomo(data)
    turns = [e for c in convs for e in interaction_events(c)][:n]
    episodes = _episode_events(turns, "bench")
    with tempfile.TemporaryDirectory() as tmp:
        base = resolve_settings(data_dir=Path(tmp) / "data", env={})
        retrieval = replace(base.retrieval, mode=mode, embedding_model=model)  # type: ignore[arg-type]
        store = SQLiteHotStore.open(replace(base, retrieval=retrieval))
        t0, c0 = time.perf_counter(), time.process_time()
        store.apply_batch(episodes, {}, ProjectionInfo())
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        stored = store.conn.execute("SELECT count(*) FROM quote_vectors").fetchone()[0]
        store.close()
    return {
        "mode": mode,
        "model": model if mode != "lexical" else None,
        "items": len(turns),
        "vectors": stored,
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu, 3),
        "items_per_s": round(len(turns) / seconds, 1),
        "items_per_cpu_s": round(len(turns) / cpu, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def query_latency(data: Path, items: int, queries: int, model: str) -> dict[str, Any]:
    import sqlite3

    convs = load_locomo(data)
    questions = [q.question for c in convs for q in c.questions][:queries]
    index = vectors.VectorIndex.load(model)
    real = index.embedder.embed([t.text for c in convs for t in c.turns][:items])
    rng = np.random.default_rng(0)
    rand = rng.standard_normal((max(0, items - len(real)), index.embedder.dim)).astype(np.float32)
    rand /= np.linalg.norm(rand, axis=1, keepdims=True)
    allv = np.concatenate([real, rand])[:items]
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE quote_vectors (episode_id TEXT, idx INTEGER, vec BLOB, PRIMARY KEY (episode_id, idx))"
    )
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES (?, ?)", (vectors.MODEL_KEY, index.embedder.identity))
    conn.executemany(
        "INSERT INTO quote_vectors VALUES (?, ?, ?)",
        [(f"e{k}", 0, vectors.to_blob(v)) for k, v in enumerate(allv)],
    )
    out: dict[str, Any] = {
        "model": model,
        "items": items,
        "real_vectors": len(real),
        "queries": len(questions),
    }
    t0 = time.perf_counter()
    index.nearest(conn, "warm up", 10)
    out["first_query_loads_matrix_s"] = round(time.perf_counter() - t0, 3)
    for label, limit in (("prefilter", vectors.EXACT_LIMIT), ("exact", items + 1)):
        vectors.EXACT_LIMIT = limit
        lat, cpu, emb = [], [], []
        for q in questions:
            t1 = time.perf_counter()
            index.embedder.embed([q])
            t2, c2 = time.perf_counter(), time.thread_time()
            index.nearest(conn, q, 100)
            t3, c3 = time.perf_counter(), time.thread_time()
            emb.append((t2 - t1) * 1e3)
            lat.append((t3 - t2) * 1e3)  # nearest() embeds the query itself: this is the whole call
            cpu.append((c3 - c2) * 1e3)
        out[label] = {
            "p50_ms": round(float(np.percentile(lat, 50)), 2),
            "p99_ms": round(float(np.percentile(lat, 99)), 2),
            "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 2),
            "cpu_p99_ms": round(float(np.percentile(cpu, 99)), 2),
            "embed_p50_ms": round(float(np.percentile(emb, 50)), 3),
            "embed_p99_ms": round(float(np.percentile(emb, 99)), 3),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
    vectors.EXACT_LIMIT = 20_000
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--projection", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--model", default="all-minilm-l6-v2-static")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-query", action="store_true")
    args = ap.parse_args()
    vectors.VectorIndex.load(args.model)  # a first use distils and caches the table outside the timings
    runs = [
        projection(args.data, args.projection, m, args.model)
        for _ in range(args.repeats)
        for m in ("lexical", "hybrid")
    ]
    result: dict[str, Any] = {"projection": runs}
    if not args.skip_query:
        result["query"] = query_latency(args.data, args.items, args.queries, args.model)
    sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
