"""A second look at the recalled shortlist: a learned linear reranker over the best passages.

The quote search ranks every candidate passage by its words (BM25 with the
neighbours', the header's and the time boosts, runtime.quote_search); what a
small budget delivers is the head of that ranking, so a gold turn ranked 15th
is as lost as one never found. `Reranker.reorder` rescores the first `depth`
passages of the shortlist with a few features and sorts them again; the rest
keeps its order behind them. Nothing is added to or dropped from the
shortlist, so the reranker can only move what the search already found.

Features of a passage (`FEATURES`), all computed from the shortlist itself:
- `lexical`: its search score over the best score of the shortlist;
- `rank`: log(1 + its position in the search's order);
- `asks`: it ends with a question mark (a question rarely holds its own answer);
- `length`: log(1 + its characters);
- `cosine` / `cosine_gap`: the embedding cosine of the question and the
  passage as it is embedded for the vector index (`[date] Speaker: text`), and
  that cosine minus the best one of the shortlist;
- `context` / `context_gap`: the same for the passage written after the turn
  before it in its episode (`[date] Other: question\nSpeaker: answer`), so an
  answer that does not repeat the question's words ("Contemporary is so
  expressive" after "Got any fave styles?") is measured with what it answers.

The weights (`MODELS`) are a logistic regression fitted on the LoCoMo
development split with `fit_linear` (`bench/bench_rerank.py`, which reports
only leave-one-conversation-out figures: each conversation ranked by weights
fitted on the others). Two embedders can supply the cosines: the static table
distilled from MiniLM (`static`: microseconds per passage, so the whole
reranking costs ~1 ms of CPU warm, ~5 ms cold at depth 60) and MiniLM itself (`minilm`: ~20 ms
of CPU per text, ~3 s per question cold at depth 60, ~1 s warm: a measured,
documented setting for a caller that can wait, not for every turn).
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.hotstore import database_key
from tiermem.runtime.vectors import embedding_text

from tiermem.embeddings import Embedder, load_embedder
from tiermem.ids import parse_ts
from tiermem.settings import RERANK_EMBEDDERS, Settings

CACHED_VECTORS = 8192  # texts whose vectors a reranker keeps (~8 MB at 256 dimensions, ~12 MB at 384)
FEATURES = ("lexical", "rank", "asks", "length", "cosine", "cosine_gap", "context", "context_gap")


@dataclass(frozen=True)
class LinearModel:
    """Standardised features times weights plus a bias: the logit that a passage is the evidence."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float

    def score(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return np.asarray(z @ np.asarray(self.weights) + self.bias, dtype=np.float64)


def fit_linear(
    xs: Sequence[NDArray[np.float64]], ys: Sequence[NDArray[np.float64]], l2: float = 1e-2
) -> LinearModel:
    """Logistic regression (Newton's method, a small L2 penalty) of labels `ys` on features `xs`.

    One array pair per question; the passages of all questions are pooled.
    Deterministic: the same data always gives the same weights.
    """
    x = np.concatenate(list(xs)) if xs else np.zeros((0, len(FEATURES)))
    y = np.concatenate(list(ys)) if ys else np.zeros(0)
    if not len(x) or y.min(initial=1.0) == y.max(initial=0.0):
        raise ValueError("fitting needs passages of both labels")
    mean, scale = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([(x - mean) / scale, np.ones((len(x), 1))])
    w = np.zeros(z.shape[1])
    penalty = l2 * np.eye(len(w))
    penalty[-1, -1] = 0.0  # the bias is not shrunk
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + penalty @ w
        hess = (z * (p * (1.0 - p))[:, None]).T @ z + penalty
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return LinearModel(
        mean=tuple(float(v) for v in mean),
        scale=tuple(float(v) for v in scale),
        weights=tuple(float(v) for v in w[:-1]),
        bias=float(w[-1]),
    )


# Fitted on all seven conversations of the LoCoMo development split by `bench/bench_rerank.py --fit`
# (depth 60, captions and notes on); the figures it reports are leave-one-conversation-out.
MODELS: dict[str, LinearModel] = {
    "static": LinearModel(
        mean=(
            0.28194620,
            3.14249721,
            0.21277250,
            4.94023591,
            0.40468369,
            -0.21283983,
            0.43200422,
            -0.19441545,
        ),
        scale=(
            0.20361305,
            0.89418381,
            0.40926809,
            0.52415358,
            0.12196954,
            0.11073398,
            0.11344627,
            0.10412376,
        ),
        weights=(
            0.53236586,
            -0.70448331,
            -0.29710125,
            0.42992273,
            0.09448280,
            0.11886372,
            0.04611764,
            0.41397084,
        ),
        bias=-5.59311422,
    ),
    "minilm": LinearModel(
        mean=(
            0.28194620,
            3.14249721,
            0.21277250,
            4.94023591,
            0.34596765,
            -0.24384568,
            0.33296629,
            -0.24994209,
        ),
        scale=(
            0.20361305,
            0.89418381,
            0.40926809,
            0.52415358,
            0.13245443,
            0.12412069,
            0.13613649,
            0.13087646,
        ),
        weights=(
            0.52230258,
            -0.67726448,
            -0.26941579,
            0.44048058,
            0.11937658,
            0.26686613,
            0.02837838,
            0.50050720,
        ),
        bias=-5.71331493,
    ),
}


def _previous(conn: sqlite3.Connection, head: Sequence[dict[str, Any]]) -> list[tuple[str, str] | None]:
    """Each passage's predecessor in its episode (speaker, text), from the prepared episodes."""
    ids = list(dict.fromkeys(str(item["episode_id"]) for item in head))
    entries = dict(zip(ids, TEXTS.prepared(conn, database_key(conn), ids), strict=True))
    out: list[tuple[str, str] | None] = []
    for item in head:
        passages = entries[str(item["episode_id"])].passages
        at = next(
            (j for j, p in enumerate(passages) if p.event_id == item["event_id"] and p.part == item["part"]),
            0,
        )
        out.append((passages[at - 1].speaker, passages[at - 1].text) if at > 0 else None)
    return out


def features(
    conn: sqlite3.Connection,
    embedder: Embedder,
    query: str,
    head: Sequence[dict[str, Any]],
    embed: Callable[[Sequence[str]], NDArray[np.float32]] | None = None,
) -> NDArray[np.float64]:
    """The `FEATURES` of each passage of `head` (search results, best first), one row each.

    `embed` replaces `embedder.embed` (the reranker passes its cached one).
    """
    n = len(head)
    if not n:
        return np.zeros((0, len(FEATURES)))
    scores = np.array([float(item["score"]) for item in head])
    top = float(scores.max())
    lexical = scores / top if top > 0 else np.zeros(n)
    texts, contexts = [], []
    for item, before in zip(head, _previous(conn, head), strict=True):
        said = embedding_text(item["text"], item["speaker"], parse_ts(item["ts"]))
        texts.append(said)
        if before is None:
            contexts.append(said)
        else:
            line = f"{before[0]}: {before[1]}\n" if before[0] else f"{before[1]}\n"
            contexts.append(said.replace("] ", "] " + line, 1))
    vecs = (embed or embedder.embed)([query, *texts, *contexts])
    q = vecs[0]
    cosine = np.asarray(vecs[1 : n + 1] @ q, dtype=np.float64)
    context = np.asarray(vecs[n + 1 :] @ q, dtype=np.float64)
    return np.stack(
        [
            lexical,
            np.log1p(np.arange(n, dtype=np.float64)),
            np.array([str(item["text"]).rstrip().endswith("?") for item in head], dtype=np.float64),
            np.array([math.log1p(len(item["text"])) for item in head]),
            cosine,
            cosine - cosine.max(),
            context,
            context - context.max(),
        ],
        axis=1,
    )


class Reranker:
    """Reorders the first `depth` results of a quote search by a `LinearModel` (see the module doc)."""

    def __init__(
        self, embedder: Embedder, model: LinearModel, depth: int, cached: int = CACHED_VECTORS
    ) -> None:
        self.embedder = embedder
        self.model = model
        self.depth = depth
        self.cached = cached
        self._vectors: OrderedDict[bytes, NDArray[np.float32]] = OrderedDict()
        self._lock = threading.Lock()  # one store may serve several threads

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """`embedder.embed` through a cache of the most recently used texts' vectors.

        The same passages come back question after question (a conversation's
        shortlists overlap), and embedding is nearly all of a reranking's cost.
        """
        # Kept under a digest of the text, not the text: a passage erased from the store must
        # not stay readable in this process's memory.
        keys = {t: hashlib.blake2b(t.encode(), digest_size=16).digest() for t in texts}
        with self._lock:
            have = {t: self._vectors[keys[t]] for t in keys if keys[t] in self._vectors}
        todo = [t for t in keys if t not in have]
        if todo:
            have.update(zip(todo, self.embedder.embed(todo), strict=True))
        with self._lock:
            for t, key in keys.items():
                self._vectors[key] = have[t]
                self._vectors.move_to_end(key)
            while len(self._vectors) > self.cached:
                self._vectors.popitem(last=False)
        return np.stack([have[t] for t in texts])

    def reorder(
        self, conn: sqlite3.Connection, query: str, found: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        head = found[: self.depth]
        if len(head) < 2:
            return found
        scores = self.model.score(features(conn, self.embedder, query, head, self.embed))
        order = np.argsort(-scores, kind="stable")
        return [head[int(i)] for i in order] + found[self.depth :]


def reranker_for(settings: Settings) -> Reranker | None:
    """The reranker `retrieval.rerank` asks for (None: off), its embedder loaded once per process."""
    r = settings.retrieval
    if r.rerank == "off":
        return None
    return Reranker(_embedder(RERANK_EMBEDDERS[r.rerank], r.model_cache), MODELS[r.rerank], r.rerank_depth)


@lru_cache(maxsize=2)
def _embedder(model: str, cache: str) -> Embedder:
    return load_embedder(model, Path(cache) if cache else None)
