"""Fusing a lexical ranking (BM25) with a dense one (embedding cosine).

Both fusions take each side's candidates as `id -> score` (higher is better)
and return one ranking, best first, ties broken by id so the order is
reproducible. The weights are not guesses: `bench/bench_embeddings.py` sweeps
them on the LoCoMo development split and bench/RESULTS.md records the curve.

- `weighted_fusion`: alpha * dense + (1 - alpha) * lexical after putting both
  on [0, 1]. BM25 is divided by the query's best score, so a turn without a
  shared word stays at 0; cosine is min-max scaled over the dense candidates,
  so the weakest dense candidate counts 0 and one missing from the dense side
  counts 0 too.
- `rrf_fusion`: reciprocal-rank fusion, weight / (k + rank) summed over the
  sides; it ignores score scales, only ranks count.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)

RRF_K = 60  # the constant of the original reciprocal-rank-fusion paper; the sweep keeps it


def _ranked(scores: Mapping[K, float]) -> list[K]:
    return sorted(scores, key=lambda key: (-scores[key], str(key)))


def weighted_fusion(
    lexical: Mapping[K, float], dense: Mapping[K, float], alpha: float
) -> list[tuple[K, float]]:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be within [0, 1], got {alpha}")
    top = max(lexical.values(), default=0.0)
    lex = {key: s / top for key, s in lexical.items()} if top > 0 else {}
    lo, hi = min(dense.values(), default=0.0), max(dense.values(), default=0.0)
    span = hi - lo
    den = {key: (s - lo) / span if span > 0 else 1.0 for key, s in dense.items()}
    fused = {key: alpha * den.get(key, 0.0) + (1.0 - alpha) * lex.get(key, 0.0) for key in {*lexical, *dense}}
    return [(key, fused[key]) for key in _ranked(fused)]


def rrf_fusion(
    lexical: Mapping[K, float], dense: Mapping[K, float], dense_weight: float = 0.5, k: int = RRF_K
) -> list[tuple[K, float]]:
    if not 0.0 <= dense_weight <= 1.0:
        raise ValueError(f"dense_weight must be within [0, 1], got {dense_weight}")
    fused: dict[K, float] = {}
    for weight, scores in ((1.0 - dense_weight, lexical), (dense_weight, dense)):
        for rank, key in enumerate(_ranked(scores), start=1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
    return [(key, fused[key]) for key in _ranked(fused)]
