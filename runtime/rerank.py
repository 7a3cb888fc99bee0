"""A second look at the recalled shortlist: a learned linear reranker over the best passages.

The quote search ranks every candidate passage by its words (BM25 with the
neighbours', the header's and the time boosts, runtime.quote_search); what a
small budget delivers is the head of that ranking, so a gold turn ranked 15th
is as lost as one never found. `Reranker.reorder` rescores the first `depth`
passages of the shortlist with a few features and sorts them again; the rest
keeps its order behind them. Nothing is added to or dropped from the
shortlist, so the reranker can only move what the search already found.

Features of a passage (`FEATURES`), all computed from the shortlist itself;
each model reads the ones it names (`LinearModel.columns`):
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
  expressive" after "Got any fave styles?") is measured with what it answers;
- the word features of runtime.rerank_features (whose turn it is against the
  names in the question, the turns around it, its day among the best, how
  much of it is small talk).

Order: by value per character, not by probability alone. The packing fills
a budget best first (runtime.packing), so a passage's worth is its
probability of being the evidence per character it costs: p / (chars +
LINE_CHARS)^per_char. Measured on LoCoMo dev (leave-one-conversation-out),
per_char 1.0 against 0 (probability order, the same features) delivered
0.3-0.8 points more evidence at 250, 500 and 1,000 tokens for `words` and
0.8-1.3 for `static` (bench/RESULTS.md).

The weights (`MODELS`) are a logistic regression fitted on the LoCoMo
development split with `fit_linear` (`bench/bench_rerank.py`, which reports
only leave-one-conversation-out figures: each conversation ranked by weights
fitted on the others). `words` reads no cosine: no model, a fraction of a
millisecond per question. Two embedders can supply the cosines: the static
table distilled from MiniLM (`static`: microseconds per passage) and MiniLM
itself (`minilm`: ~20 ms of CPU per text, ~3 s per question cold at depth 60,
~1 s warm: a measured, documented setting for a caller that can wait, not for
every turn; its model is the first one, eight features by probability).
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
from tiermem.runtime.rerank_features import (
    WORD_FEATURES,
    Around,
    Placed,
    placed_word_features,
    surroundings,
    word_features,
)
from tiermem.runtime.vectors import embedding_text

from tiermem.embeddings import Embedder, load_embedder
from tiermem.ids import parse_ts
from tiermem.settings import RERANK_EMBEDDERS, Settings

CACHED_VECTORS = 8192  # texts whose vectors a reranker keeps (~8 MB at 256 dimensions, ~12 MB at 384)
SEARCH_FEATURES = ("lexical", "rank", "asks", "length")
COSINE_FEATURES = ("cosine", "cosine_gap", "context", "context_gap")
FEATURES = (*SEARCH_FEATURES, *COSINE_FEATURES, *WORD_FEATURES)
# The features of the first fitted models (every model reads the columns it names).
FIRST_FEATURES = (*SEARCH_FEATURES, *COSINE_FEATURES)
# A passage's price in the budget: its characters plus about what its line adds (a speaker's name, a
# share of a date header).
LINE_CHARS = 12


@dataclass(frozen=True)
class LinearModel:
    """Standardised features times weights plus a bias: the logit that a passage is the evidence."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    columns: tuple[str, ...] = FIRST_FEATURES  # the `FEATURES` it reads, in this order
    # Order by probability per character^per_char (0: by probability alone): see `Reranker.reorder`.
    per_char: float = 0.0

    def score(self, x: NDArray[np.float64]) -> NDArray[np.float64]:
        """The logits of rows `x` of this model's `columns`."""
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return np.asarray(z @ np.asarray(self.weights) + self.bias, dtype=np.float64)

    @property
    def embeds(self) -> bool:
        """Whether it reads a cosine (needs an embedder)."""
        return any(c in COSINE_FEATURES for c in self.columns)

    def value(self, x: NDArray[np.float64], chars: NDArray[np.float64]) -> NDArray[np.float64]:
        """What a passage is worth per unit of budget: its probability over its price^per_char."""
        p = 1.0 / (1.0 + np.exp(-self.score(x)))
        return np.asarray(p / (chars + LINE_CHARS) ** self.per_char, dtype=np.float64)


def fit_linear(
    xs: Sequence[NDArray[np.float64]],
    ys: Sequence[NDArray[np.float64]],
    l2: float = 1e-2,
    columns: tuple[str, ...] = FIRST_FEATURES,
    per_char: float = 0.0,
) -> LinearModel:
    """Logistic regression (Newton's method, a small L2 penalty) of labels `ys` on features `xs`
    (the `columns` of each passage, in that order).

    One array pair per question; the passages of all questions are pooled.
    Deterministic: the same data always gives the same weights.
    """
    x = np.concatenate(list(xs)) if xs else np.zeros((0, len(columns)))
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
        columns=columns,
        per_char=per_char,
    )


# Fitted on all seven conversations of the LoCoMo development split by `bench/bench_rerank.py --fit`
# (depth 60, captions and notes on); the figures it reports are leave-one-conversation-out. "words"
# was fitted again on the store of the word forms and quoted answers (the shortlists those give),
# "static" on the store of the working-memory stand-ins and the filler trim. "minilm" is the first
# model (eight features, probability order), kept as it was measured.
WORDS_COLUMNS = (*SEARCH_FEATURES, *WORD_FEATURES)
STATIC_COLUMNS = (*SEARCH_FEATURES, "cosine", "cosine_gap", *WORD_FEATURES)
PER_CHAR = 1.0  # measured on LoCoMo dev: see the module doc

MODELS: dict[str, LinearModel] = {
    "words": LinearModel(
        mean=(
            0.28735654,
            3.14249721,
            0.21653008,
            4.93699505,
            0.85418354,
            0.14581646,
            0.03511386,
            0.30105925,
            0.82972693,
            0.24213663,
            0.84638590,
            0.25528813,
            2.37739086,
            0.42095187,
        ),
        scale=(
            0.20387796,
            0.89418381,
            0.41187960,
            0.52569404,
            0.35292212,
            0.35292212,
            0.18406759,
            0.45871841,
            0.37587252,
            0.42837657,
            1.27501301,
            0.43602305,
            0.59492395,
            0.11414621,
        ),
        weights=(
            0.63784696,
            -0.77015426,
            -0.21445601,
            0.05182427,
            -0.02123670,
            0.02123670,
            0.12332411,
            0.12530178,
            -0.27205983,
            0.00442893,
            0.07236562,
            -0.02459948,
            0.35331962,
            0.09333999,
        ),
        bias=-5.54376101,
        columns=WORDS_COLUMNS,
        per_char=PER_CHAR,
    ),
    "static": LinearModel(
        mean=(
            0.28700298,
            3.14249721,
            0.21599559,
            4.93756873,
            0.40592139,
            -0.21289766,
            0.85465323,
            0.14534677,
            0.03496809,
            0.30037900,
            0.83009945,
            0.24145638,
            0.84360632,
            0.25532053,
            2.37796910,
            0.42097959,
        ),
        scale=(
            0.20376051,
            0.89418381,
            0.41151124,
            0.52620199,
            0.12197200,
            0.11069509,
            0.35245012,
            0.35245012,
            0.18369901,
            0.45842279,
            0.37554541,
            0.42796635,
            1.27296642,
            0.43604123,
            0.59537473,
            0.11403044,
        ),
        weights=(
            0.55244483,
            -0.71310390,
            -0.23176467,
            0.01586713,
            0.06598578,
            0.39475837,
            -0.01210399,
            0.01210399,
            0.12779554,
            0.13248422,
            -0.26366140,
            -0.01193489,
            0.09522050,
            -0.00890489,
            0.38501059,
            0.08284701,
        ),
        bias=-5.63900538,
        columns=STATIC_COLUMNS,
        per_char=PER_CHAR,
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
    return [a.before for a in surroundings(conn, head)]


def _cosines(
    embed: Callable[[Sequence[str]], NDArray[np.float32]],
    query: str,
    head: Sequence[dict[str, Any]],
    around: Sequence[Around],
    context: bool,
) -> list[NDArray[np.float64]]:
    """`COSINE_FEATURES` columns (the context pair only with `context`, else zeros)."""
    n = len(head)
    texts, contexts = [], []
    for item, at in zip(head, around, strict=True):
        before = at.before
        said = embedding_text(item["text"], item["speaker"], parse_ts(item["ts"]))
        texts.append(said)
        if not context:
            continue
        if before is None:
            contexts.append(said)
        else:
            line = f"{before[0]}: {before[1]}\n" if before[0] else f"{before[1]}\n"
            contexts.append(said.replace("] ", "] " + line, 1))
    vecs = embed([query, *texts, *contexts])
    q = vecs[0]
    cosine = np.asarray(vecs[1 : n + 1] @ q, dtype=np.float64)
    ctx = np.asarray(vecs[n + 1 :] @ q, dtype=np.float64) if context else np.zeros(n)
    return [cosine, cosine - cosine.max(), ctx, ctx - ctx.max()]


def features(
    conn: sqlite3.Connection,
    embedder: Embedder | None,
    query: str,
    head: Sequence[dict[str, Any]],
    embed: Callable[[Sequence[str]], NDArray[np.float32]] | None = None,
    columns: Sequence[str] = FEATURES,
    placed: Sequence[Placed] | None = None,
) -> NDArray[np.float64]:
    """The `columns` (of `FEATURES`) of each passage of `head` (search results, best first), one row each.

    `embed` replaces `embedder.embed` (the reranker passes its cached one);
    the cosines are computed only when `columns` names one (then an embedder is needed).
    """
    n = len(head)
    if not n:
        return np.zeros((0, len(columns)))
    scores = np.array([float(item["score"]) for item in head])
    top = float(scores.max())
    cols: dict[str, NDArray[np.float64]] = {
        "lexical": scores / top if top > 0 else np.zeros(n),
        "rank": np.log1p(np.arange(n, dtype=np.float64)),
        "asks": np.array([str(item["text"]).rstrip().endswith("?") for item in head], dtype=np.float64),
        "length": np.array([math.log1p(len(item["text"])) for item in head]),
    }
    wanted = set(columns)
    if placed is not None and len(placed) >= n and not wanted & set(COSINE_FEATURES):
        # No cosine reads a passage's neighbours' text: the word features are read on the spot.
        if wanted & set(WORD_FEATURES):
            cols.update(zip(WORD_FEATURES, placed_word_features(query, head, placed).T, strict=True))
        return np.stack([cols[c] for c in columns], axis=1)
    around = surroundings(conn, head, placed) if wanted - set(SEARCH_FEATURES) else []
    if wanted & set(COSINE_FEATURES):
        if embedder is None and embed is None:
            raise ValueError("cosine features need an embedder")
        context = bool(wanted & {"context", "context_gap"})
        chosen = embed or embedder.embed  # type: ignore[union-attr]
        cols.update(zip(COSINE_FEATURES, _cosines(chosen, query, head, around, context), strict=True))
    if wanted & set(WORD_FEATURES):
        cols.update(zip(WORD_FEATURES, word_features(query, head, around).T, strict=True))
    return np.stack([cols[c] for c in columns], axis=1)


class Reranker:
    """Reorders the first `depth` results of a quote search by a `LinearModel` (see the module doc)."""

    def __init__(
        self, embedder: Embedder | None, model: LinearModel, depth: int, cached: int = CACHED_VECTORS
    ) -> None:
        if model.embeds and embedder is None:
            raise ValueError("this model reads cosines: it needs an embedder")
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
        assert self.embedder is not None
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
        self,
        conn: sqlite3.Connection,
        query: str,
        found: list[dict[str, Any]],
        placed: Sequence[Placed] | None = None,
    ) -> list[dict[str, Any]]:
        """The shortlist with its head sorted by value: the model's probability that a passage is the
        evidence, per character^per_char of the budget it takes (the packing fills a budget best
        first, so a short likely passage before a long one of the same probability delivers more)."""
        head = found[: self.depth]
        if len(head) < 2:
            return found
        embed = self.embed if self.model.embeds else None
        x = features(conn, self.embedder, query, head, embed, self.model.columns, placed)
        chars = np.array([len(item["text"]) for item in head], dtype=np.float64)
        order = np.argsort(-self.model.value(x, chars), kind="stable")
        return [head[int(i)] for i in order] + found[self.depth :]


def reranker_for(settings: Settings) -> Reranker | None:
    """The reranker `retrieval.rerank` asks for (None: off), its embedder loaded once per process."""
    r = settings.retrieval
    if r.rerank == "off":
        return None
    model = MODELS[r.rerank]
    embedder = _embedder(RERANK_EMBEDDERS[r.rerank], r.model_cache) if model.embeds else None
    return Reranker(embedder, model, r.rerank_depth)


@lru_cache(maxsize=2)
def _embedder(model: str, cache: str) -> Embedder:
    return load_embedder(model, Path(cache) if cache else None)
