"""The arithmetic that scores an episode search's candidates: BM25 of term counts, per quote and
per header, and each episode's score from its quotes (the best carries it), as arrays over every
candidate at once. Pure functions of counts and weights; `runtime.episode_search` (and the quote
search) feed them the prepared episodes' counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from typing import Any

import numpy as np
from tiermem.runtime.episode_text import TEXTS, Prepared, TermMatcher

K1 = 1.2
SPEAKER_BOOST = 1.3
B = 0.75
AVG_QUOTE_WORDS = 24.0
AVG_HEAD_WORDS = 30.0


def _term_counts(
    text: str, rx: TermMatcher | None, n_terms: int, forms: tuple[str, ...] | None = None
) -> list[int]:
    counts = [0] * n_terms
    # Every match contains one of the `forms` as it is: a text holding none needs no pass.
    if forms is not None and not any(f in text for f in forms):
        return counts
    return rx.counts(text) if rx is not None else counts


def _bm25(
    counts: Sequence[float], length: int, weights: list[float], avg_len: float = AVG_QUOTE_WORDS
) -> float:
    if not length:
        return 0.0
    norm = K1 * (1 - B + B * length / avg_len)
    return sum(w * tf * (K1 + 1) / (tf + norm) for tf, w in zip(counts, weights, strict=True) if tf)


def bm25_rows(counts: np.ndarray, lengths: np.ndarray, weights: list[float], avg_len: float) -> np.ndarray:
    """`_bm25` of every row of `counts` at once, term by term in the same order (the same sums)."""
    norm = K1 * ((1 - B) + (B * lengths) / avg_len)
    out = np.zeros(len(lengths))
    for k, w in enumerate(weights):
        tf = counts[:, k]
        out = out + np.where(tf > 0, w * tf * (K1 + 1) / (tf + norm), 0.0)
    return out


def _quote_matches(
    entries: list[Prepared], terms: list[str], weights: list[float], rx: TermMatcher | None
) -> tuple[np.ndarray, np.ndarray]:
    """(per quote of every entry in order: term counts, BM25): a quote's counts are its passages' sums."""
    counts = TEXTS.term_counts(entries, [(t,) for t in terms], rx)
    if not entries:
        return np.zeros((0, len(terms))), np.zeros(0)
    n_quotes = [len(e.quotes) for e in entries]
    base = np.concatenate(([0], np.cumsum(n_quotes)[:-1])).astype(np.int64)
    sizes = [e.passages.n for e in entries]
    quote = np.repeat(base, sizes) + np.concatenate([e.quote_of for e in entries])
    total = int(sum(n_quotes))
    by_quote = np.zeros((total, len(terms)))
    for k in range(len(terms)):
        by_quote[:, k] = np.bincount(quote, weights=counts[:, k], minlength=total)
    spaces = chain.from_iterable(e.quote_spaces for e in entries)
    lengths = np.fromiter(spaces, dtype=np.float64, count=total) + 1.0
    return by_quote, bm25_rows(by_quote, lengths, weights, AVG_QUOTE_WORDS)


def _episode_scores(
    rows: list[Any],
    entries: list[Prepared],
    counts: np.ndarray,
    bm25: np.ndarray,
    heads: np.ndarray,
    head_hits: np.ndarray,
    weights: list[float],
    named: set[str],
) -> tuple[np.ndarray, Callable[[int], list[float]]]:
    """Each candidate's score (before a named month or year), over arrays of all their quotes at once.

    The best single quote carries the episode (answers live in one turn); a
    second good quote, the header's dates and topics, and covering more of
    the question add to it. Also returned: candidate n's quote scores as the
    result shows them (a quote matching no term scores 0 as an int, as a sum
    over no terms does, until a speaker factor makes it a float).
    """
    n_quotes = np.array([len(e.quotes) for e in entries], dtype=np.int64)
    episode = np.repeat(np.arange(len(entries), dtype=np.int64), n_quotes)
    matched: np.ndarray = np.asarray(counts.any(axis=1), dtype=bool)
    quote = np.where(matched, bm25, 0.0)
    if named:
        # Who said it: a question about someone is usually answered by their own words.
        factor = np.array(
            [SPEAKER_BOOST if s in named else 1.0 for e in entries for s in e.quote_speakers],
            dtype=np.float64,
        )
        quote = quote * factor
    best, second = _two_best(quote, episode, n_quotes)
    seen = head_hits.copy()
    for k in range(len(weights)):  # a term any of its quotes holds
        seen[:, k] |= np.bincount(episode, weights=counts[:, k], minlength=len(entries)) > 0
    covered = np.zeros(len(entries))
    for k, w in enumerate(weights):
        covered = covered + np.where(seen[:, k], w, 0.0)
    coverage = covered / (sum(weights) or 1.0)
    importance = np.array([0.02 * int(row[7] or 0) for row in rows], dtype=np.float64)
    scores = (best + 0.3 * second + 0.4 * heads) * (0.5 + coverage) + importance
    firsts = np.concatenate(([0], np.cumsum(n_quotes)[:-1])).astype(np.int64)

    def shown(n: int) -> list[float]:
        at, entry = int(firsts[n]), entries[n]
        values: list[Any] = [
            s if hit else 0
            for s, hit in zip(
                bm25[at : at + len(entry.quotes)].tolist(),
                matched[at : at + len(entry.quotes)].tolist(),
                strict=True,
            )
        ]
        if named:
            for i, speaker in enumerate(entry.quote_speakers):
                if speaker:
                    values[i] *= SPEAKER_BOOST if speaker in named else 1.0
        return values

    return scores, shown


def _two_best(values: np.ndarray, segment: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per segment (consecutive runs of `sizes`): its best value and its second best (0 for none)."""
    n = len(sizes)
    best, second = np.zeros(n), np.zeros(n)
    if not len(values):
        return best, second
    order = np.lexsort((-values, segment))  # by segment, best first within it
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    ranked = values[order]
    has = sizes > 0
    best[has] = ranked[starts[has]]
    two = sizes > 1
    second[two] = ranked[starts[two] + 1]
    return best, second
