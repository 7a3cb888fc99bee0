"""The quote search's block bounds, passage counts and exact scores compiled, when the pass is built.

On a long conversation a quote search bounds about 5,500 blocks of passages
(runtime.passage_blocks) and scores the passages of the few hundred that can
matter (runtime.passage_parts), each with a dozen numpy operations whose
temporary arrays were most of the cost. The optional extension `_blockscore`
does each in one loop (and reads the counts of the passages it scores from the
passage index's postings without an array per word), with numpy's operations
in numpy's order, compiled
without contracting a multiply and an add: the exact scores are those of the
numpy path to the last bit, so the ranking, ties included, does not depend on
whether the extension was built. Without it (no C compiler at install time),
or with `ENABLED` set to False (the tests compare both paths), the numpy path
runs.
"""

from __future__ import annotations

import importlib
from array import array
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from tiermem.runtime.passage_blocks import Blocks, Factors
    from tiermem.runtime.passage_parts import Parts

_blockscore: ModuleType | None
try:
    _blockscore = importlib.import_module("tiermem.runtime._blockscore")
except ImportError:  # not built: the numpy path
    _blockscore = None

ENABLED = _blockscore is not None  # whether the compiled pass is used (tests turn it off)


class Shares(NamedTuple):
    """The quote search's neighbour shares and its passages' BM25 length norm."""

    answer: float  # the turn before's share, for a whole turn answering its question
    neighbour: float  # the better neighbour's share
    far: float  # the share of a passage two places away
    avg_words: float  # BM25's average length of a passage's turn


def active() -> bool:
    """Whether this call runs the compiled pass."""
    return ENABLED and _blockscore is not None


def _f(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64)


def _b(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.bool_)


def _i(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def block_bounds(
    blocks: Blocks,
    counts: np.ndarray,
    weights: Sequence[float],
    lengths: np.ndarray,
    parts: tuple[np.ndarray, ...],
    f: Factors,
    norm: tuple[float, float, float],
    slack: float,
) -> np.ndarray:
    """`Blocks.bounds` from the blocks' summed maxima `counts` on: the same numbers, in one pass
    (`norm`: BM25's k1, b and average length)."""
    assert _blockscore is not None
    head, head_seen, boost, importance, most, answers = parts
    consts = (
        f.head_share,
        f.floor,
        max(f.answer, f.neighbour),
        f.neighbour,
        sum(weights) or 1.0,
        *norm,
        slack,
    )
    got = _blockscore.block_bounds(
        _f(counts),
        _f(lengths),
        _i(blocks.start),
        _b(blocks.first),
        _b(blocks.last),
        _b(blocks.forced),
        _i(blocks.episode),
        _f(head),
        _b(head_seen),
        _f(boost),
        _f(importance),
        _f(most),
        _b(answers),
        _f(np.asarray(weights, dtype=np.float64)),
        consts,
    )
    return np.frombuffer(got, dtype=np.float64)


def exact_scores(
    parts: Parts,
    idx: np.ndarray,
    near: np.ndarray,
    counted: np.ndarray,
    shares: Shares,
    k1_b: tuple[float, float],
) -> np.ndarray:
    """`Parts.exact` of passages `idx` with their own BM25 (`k1_b`: its k1 and b) from `counted` (the
    counts of `near`): the same numbers to the last bit, in one pass."""
    assert _blockscore is not None
    k = parts.k
    consts = (
        k.head,
        k.floor,
        k.speaker,
        k.when,
        sum(parts.weights) or 1.0,
        *k1_b,
        shares.avg_words,
        shares.answer,
        shares.neighbour,
        shares.far,
    )
    got = _blockscore.exact_scores(
        _i(idx),
        _i(near),
        _f(counted),
        _f(parts.turn_words),
        _b(parts.first),
        _b(parts.last),
        _b(parts.asking),
        _b(parts.whole),
        _i(parts.episode),
        _b(parts.head_seen),
        _f(parts.heads),
        _f(parts.boost),
        _f(parts.gain),
        _b(parts.by_named) if parts.named else None,
        _b(parts.says_when) if parts.asks_when else None,
        _f(np.asarray(parts.weights, dtype=np.float64)),
        consts,
    )
    return np.frombuffer(got, dtype=np.float64)


def inside_counts(
    postings: list[array[int]],
    counts: list[array[int]],
    words: list[tuple[int, int]],
    ranges: tuple[np.ndarray, np.ndarray, np.ndarray],
    rows: int,
    groups: int,
) -> np.ndarray:
    """(rows, groups): the counts of `words` ((word id, group), in order) from the passage index's
    `postings` / `counts` inside the ranges of texts (starts, sizes, first rows: sorted, disjoint),
    as runtime.episode_text's pass over them counts them (integer counts: any order gives the same
    sums, and this is the same order)."""
    assert _blockscore is not None
    out = np.zeros((rows, groups))
    starts, sizes, offsets = ranges
    _blockscore.inside_counts(postings, counts, words, _i(starts), _i(sizes), _i(offsets), out, groups)
    return out


def near_counts(
    lists: tuple[tuple[array[int], array[int]], ...],
    groups: np.ndarray,
    starts: np.ndarray,
    place: tuple[np.ndarray, np.ndarray],
    near: np.ndarray,
    extras: tuple[np.ndarray, ...],
    out: np.ndarray,
) -> None:
    """Into `out` (zeros, (len(near), groups)): the counts of passages `near` from the words' (postings,
    counts) `lists` (each word's group in `groups`; `starts`: each candidate's first passage in the
    index, -1 for none; `place`: each passage's candidate and position there), then each of `extras`
    added at `near`: runtime.passage_counts.NearCounts's numbers, in one pass."""
    assert _blockscore is not None
    episode, local = place
    _blockscore.near_counts(
        lists, _i(groups), _i(starts), _i(episode), _i(local), _i(near), tuple(_f(x) for x in extras), out
    )


def block_sums(
    maxima: tuple[tuple[np.ndarray, np.ndarray, int], ...],
    ids: tuple[np.ndarray, np.ndarray, np.ndarray],
    out: np.ndarray,
) -> None:
    """Into `out` (zeros, (blocks, groups)): per (found, top, group) of `maxima` (a form's blocks in
    the index and their largest counts), the counts added at the search's rows of those blocks
    (`ids`: per candidate its first block's id, -1 if not indexed, its blocks, its first row):
    `Blocks.bounds`'s summed maxima, in one pass."""
    assert _blockscore is not None
    firsts, counts, rows = ids
    held = tuple((_i(found), _i(top), g) for found, top, g in maxima)
    _blockscore.block_sums(held, _i(firsts), _i(counts), _i(rows), out, out.shape[1])


def spread(start: np.ndarray, size: np.ndarray, chosen: np.ndarray, n: int) -> tuple[np.ndarray, ...]:
    """(passages of blocks `chosen`, them and the passages one and two places away, each one's place
    in the latter): `Blocks.passages`, `around` and their searchsorted in one pass."""
    assert _blockscore is not None
    got = _blockscore.spread(_i(start), _i(size), _i(chosen), n)
    return tuple(np.frombuffer(b, dtype=np.int64) for b in got)


def first_pass(high: np.ndarray, size: np.ndarray, want: int) -> np.ndarray | None:
    """The blocks (ascending) of the shortest start of the blocks ordered by bound, highest first and
    ties in block order, whose sizes reach `want`: `Blocks.scored`'s first pass, selected and sorted
    in one call. None for a NaN bound, an empty block or one of more than 2^40 passages, whose sum
    could overflow (the numpy way decides then)."""
    assert _blockscore is not None
    got = _blockscore.first_pass(_f(high), _i(size), want)
    return None if got is None else np.frombuffer(got, dtype=np.int64)
