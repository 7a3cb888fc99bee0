"""What the shortlist reranker (runtime.rerank) adds to a recall, on the long conversation of bench_read_paths.

    .venv/bin/python bench/rerank_cost.py --root /tmp/read_paths                 # words, static
    .venv/bin/python bench/rerank_cost.py --root /tmp/read_paths --rerank words --n 300

The store is bench_read_paths' "long" one (2,000 turns whose replies run to
about 1,000 tokens, split into passages: the worst case for features read
per passage), built under --root if missing. For each query, the recall's
shortlist (`search_quotes`, 60 passages) is computed once, then
`Reranker.reorder` is timed on it: CPU time of this process and wall time,
p50 / p99, with the load average; first as the passages are met (their
words and neighbours, or vectors, worked out), then for the same questions
again (one reranker kept across them, as a store keeps it). `trim`: the
packing's filler-sentence pass (runtime.quote_trim) over the same shortlists,
which `recall_lines` runs on every recall before it packs the block.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_read_paths as brp
import bench_runtime as br
from tiermem.runtime.memory import open_memory
from tiermem.runtime.quote_search import RECALL_QUOTES, search_quotes
from tiermem.runtime.quote_trim import trim_filler
from tiermem.runtime.rerank import MODELS, Reranker, _embedder

from tiermem.settings import RERANK_EMBEDDERS


def _timed(calls: list[Any]) -> dict[str, float]:
    cpu, wall = [], []
    for call in calls:
        c0, w0 = time.process_time(), time.perf_counter()
        call()
        cpu.append((time.process_time() - c0) * 1e3)
        wall.append((time.perf_counter() - w0) * 1e3)
    return {
        "cpu_p50_ms": round(br.pct(cpu, 0.5), 3),
        "cpu_p99_ms": round(br.pct(cpu, 0.99), 3),
        "wall_p50_ms": round(br.pct(wall, 0.5), 3),
        "wall_p99_ms": round(br.pct(wall, 0.99), 3),
    }


def run(root: Path, modes: list[str], n: int) -> dict[str, Any]:
    settings = brp.long_store(root)
    queries = [br.words(4) for _ in range(n)]
    out: dict[str, Any] = {"load_before": round(os.getloadavg()[0], 2), "queries": n}
    with open_memory(settings, "talker", user="ada") as m:
        conn, who = m.conn, m.principal
        shortlists = [search_quotes(conn, who, q, limit=RECALL_QUOTES) for q in queries]
        out["passage_chars_mean"] = round(
            sum(len(f["text"]) for s in shortlists for f in s) / max(1, sum(len(s) for s in shortlists)), 1
        )
        for mode in modes:
            model = MODELS[mode]
            embedder = _embedder(RERANK_EMBEDDERS[mode], "") if model.embeds else None
            reranker = Reranker(embedder, model, 60)
            out[mode] = {}
            # "first": each passage's words and neighbours worked out as it is first met (and a
            # static reranker's vectors computed); "again": the same questions once more.
            for name in ("first", "again"):
                out[mode][name] = _timed(
                    [
                        lambda q=q, found=found, r=reranker: r.reorder(conn, q, found)
                        for q, found in zip(queries, shortlists, strict=True)
                    ]
                )
            print(f"{mode}: {out[mode]}", file=sys.stderr, flush=True)
        out["trim"] = _timed(
            [
                lambda q=q, found=found: trim_filler(found, q)
                for q, found in zip(queries, shortlists, strict=True)
            ]
        )
        print(f"trim: {out['trim']}", file=sys.stderr, flush=True)
    out["load_after"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--root", required=True, type=Path, help="bench_read_paths' store root (built if missing)"
    )
    ap.add_argument("--rerank", nargs="+", default=["words", "static"], choices=sorted(MODELS))
    ap.add_argument("--n", type=int, default=200, help="queries timed")
    args = ap.parse_args()
    print(orjson.dumps(run(args.root, args.rerank, args.n), option=orjson.OPT_INDENT_2).decode())


if __name__ == "__main__":
    main()
