"""Passage vectors in pgvector: insert cost with and without HNSW, exact scan vs HNSW search.

    .venv/bin/python bench/bench_pg_vectors.py              # 20,000 vectors
    .venv/bin/python bench/bench_pg_vectors.py --n 50000 --json

Random 384-dimension unit vectors (the shape of the MiniLM model's, without
running it: this measures the database, not the embedder; random vectors are
also HNSW's worst case, model embeddings cluster). The server is pgserver's
bundled PostgreSQL in a temporary directory (`bench_pg_store.Server`).
Measured: inserting `--n` vectors into `quote_vectors` without an index, and a
tenth of that with the HNSW index maintained per row; `PgVectorIndex.nearest`
(limit 100, median of 20) by exact scan; the bulk HNSW build; the same searches
through HNSW, with their overlap with the exact top 100.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_pg_store import Server
from tiermem.runtime.pg_store import PostgresHotStore
from tiermem.runtime.pg_vectors import PgVectorIndex, vector_text

from tiermem.embeddings import Vectors, normalise

DIM = 384


class SeededVectors:
    """Query vectors from the text's seed (a stand-in for the model: the database is measured)."""

    name = "seeded-bench"
    dim = DIM

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows = [np.random.default_rng(sum(t.encode())).standard_normal(DIM) for t in texts]
        return normalise(np.array(rows))


def _insert(store: PostgresHotStore, base: np.ndarray[Any, Any], prefix: str) -> float:
    t = time.perf_counter()
    with store.conn.transaction():
        store.conn.executemany(
            "INSERT INTO quote_vectors (episode_id, idx, agent_id, vec) VALUES (?, 0, 'a', ?::vector)",
            [(f"{prefix}{k}", vector_text(v)) for k, v in enumerate(base)],
        )
    return time.perf_counter() - t


def _searches(
    index: PgVectorIndex, store: PostgresHotStore
) -> tuple[float, list[dict[tuple[str, int], float]]]:
    times, found = [], []
    for i in range(20):
        t = time.perf_counter()
        found.append(index.nearest(store.conn, f"query {i}", 100))
        times.append(time.perf_counter() - t)
    return 1000 * sorted(times)[10], found


def run(n: int) -> dict[str, Any]:
    server = Server(None)
    try:
        rng = np.random.default_rng(0)
        out: dict[str, Any] = {"vectors": n, "load_average": os.getloadavg()[0]}
        with PostgresHotStore.connect(server.database("tm_vec_hnsw")) as store:
            store.conn.execute(
                f"CREATE INDEX quote_vectors_hnsw_{DIM} ON quote_vectors"
                f" USING hnsw ((vec::vector({DIM})) vector_cosine_ops)"
            )
            few = max(n // 10, 1)
            out["insert_ms_per_vector_with_hnsw"] = (
                1000 * _insert(store, normalise(rng.standard_normal((few, DIM))), "h") / few
            )
        with PostgresHotStore.connect(server.database("tm_vec")) as store:
            index = PgVectorIndex(SeededVectors())
            out["insert_ms_per_vector_no_index"] = (
                1000 * _insert(store, normalise(rng.standard_normal((n, DIM))), "e") / n
            )
            store.conn.execute("ANALYZE quote_vectors")
            out["exact_nearest_ms"], exact = _searches(index, store)
            t = time.perf_counter()
            store.conn.execute(
                f"CREATE INDEX quote_vectors_hnsw_{DIM} ON quote_vectors"
                f" USING hnsw ((vec::vector({DIM})) vector_cosine_ops)"
            )
            out["hnsw_build_s"] = time.perf_counter() - t
            out["hnsw_nearest_ms"], approx = _searches(index, store)
            out["hnsw_overlap_top100"] = float(
                np.mean([len(set(a) & set(b)) / 100 for a, b in zip(exact, approx, strict=True)])
            )
        return out
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = run(args.n)
    if args.json:
        print(json.dumps(res))
        return
    for key, value in res.items():
        print(f"{key:34} {value:.3f}" if isinstance(value, float) else f"{key:34} {value}")


if __name__ == "__main__":
    main()
