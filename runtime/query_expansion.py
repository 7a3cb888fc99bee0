"""A question's words joined by their nearest words in the static model's vocabulary (opt-in).

Most gold turns the recall never reached share no content word with their
question: "kids" asked, "children" said; "pets" asked, "dogs" said;
"vacation" asked, "holiday" said. The static model (tiermem.static_embeddings)
has one vector per WordPiece token, and a whole word's nearest tokens are
mostly its synonyms, its broader and narrower words and its other forms. With
`retrieval.expand = "static"`, each content word of the question that is a
whole token of that vocabulary brings up to NEIGHBOURS of its nearest words
whose cosine is at least MIN_COSINE, as further forms of its own term group:
a passage saying "children" then counts as saying "kids" (the group's weight
is its IDF over the forms it now holds, so a common neighbour lowers it).
A neighbour that starts like the word ("kid", "kids") is a form the group
already has and is not added; names (capitalised words) are not expanded.

Off by default: the model comes with an optional package, and on LoCoMo dev
the gain is small (bench/RESULTS.md, "Reach: the turns no episode covers
yet"). The vocabulary's vectors are normalised once per process; a word's
neighbours are computed once (one product with the vocabulary) and kept.
Deterministic: the table is the installed model's, ties broken by token order.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from tiermem.embeddings import Embedder, load_embedder
from tiermem.settings import EXPAND_MODELS, Settings
from tiermem.text import STOP_WORDS

NEIGHBOURS = 5
MIN_COSINE = 0.7
SAME_PREFIX = 4  # a neighbour starting with the word's first four letters (or the reverse) is a form of it
MIN_LENGTH = 3
_KEPT_WORDS = 50_000  # words whose neighbours are kept
_WORD = re.compile(r"[A-Za-z]+")


class QueryExpansion:
    """Neighbour words from a static embedder's token table (one per process and model)."""

    def __init__(self, embedder: Embedder) -> None:
        table = getattr(embedder, "table", None)
        tokenizer = getattr(embedder, "tokenizer", None)
        if table is None or tokenizer is None:
            raise ValueError(f"{embedder.name}: query expansion needs a static (token table) model")
        vocab: dict[str, int] = tokenizer.vocab
        self.words = [w for w in sorted(vocab, key=vocab.__getitem__) if _usable(w)]
        rows = np.asarray(table, dtype=np.float32)[[vocab[w] for w in self.words]]
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        self.unit: NDArray[np.float32] = rows / np.maximum(norms, 1e-9)
        self.row = {w: i for i, w in enumerate(self.words)}
        self.kept: dict[str, tuple[str, ...]] = {}
        self.lock = threading.Lock()

    def neighbours(self, word: str) -> tuple[str, ...]:
        """Up to NEIGHBOURS words nearest `word` at MIN_COSINE or more, nearest first (not its forms)."""
        found = self.kept.get(word)
        if found is not None:
            return found
        i = self.row.get(word)
        out: list[str] = []
        if i is not None:
            cos = self.unit @ self.unit[i]
            for j in np.argsort(-cos, kind="stable")[: NEIGHBOURS * 4 + 1].tolist():
                if cos[j] < MIN_COSINE or len(out) >= NEIGHBOURS:
                    break
                other = self.words[j]
                if j != i and not _same_word(word, other):
                    out.append(other)
        found = tuple(out)
        with self.lock:
            if len(self.kept) >= _KEPT_WORDS:
                self.kept.clear()
            self.kept[word] = found
        return found

    def expand(self, query: str, groups: Sequence[tuple[str, ...]]) -> list[tuple[str, ...]]:
        """`groups` (runtime.query_terms, stem first) with each expanded word's neighbours added."""
        words = [w for w in _WORD.findall(query) if not w[0].isupper() or w.isupper()]
        lowered = [w.lower() for w in words if w.lower() not in STOP_WORDS]
        out = []
        for group in groups:
            word = next((w for w in lowered if w.startswith(group[0])), None)
            extra = self.neighbours(word) if word is not None else ()
            out.append(tuple(dict.fromkeys([*group, *extra])))
        return out


def _usable(token: str) -> bool:
    return token.isascii() and token.isalpha() and len(token) >= MIN_LENGTH and token not in STOP_WORDS


def _same_word(a: str, b: str) -> bool:
    return a.startswith(b[:SAME_PREFIX]) or b.startswith(a[:SAME_PREFIX])


def expansion_for(settings: Settings) -> QueryExpansion | None:
    """The expansion `retrieval.expand` asks for (None: off), built once per process and model."""
    r = settings.retrieval
    if r.expand == "off":
        return None
    return _expansion(EXPAND_MODELS[r.expand], r.model_cache)


@lru_cache(maxsize=2)
def _expansion(model: str, cache: str) -> QueryExpansion:
    return QueryExpansion(load_embedder(model, Path(cache) if cache else None))
