"""How many passages a bound over groups of passages could skip, at best: whole episodes vs blocks of a few.

    .venv/bin/python bench/bound_ceiling.py --root /tmp/read_paths_long --n 100

Reads the long conversation `bench_read_paths.py --only long` builds under
--root (2,000 turns of ~1,000-token replies; every episode prepared first) and,
for --n new questions of four words (as that benchmark asks them), scores every
candidate passage exactly (`quote_search._score_passages`, nothing skipped),
then asks: with an upper bound of every passage's score in a group of
consecutive passages of one episode (a block of --blocks passages, or the whole
episode), how many passages lie in groups whose bound reaches the `keep`-th
best exact score (the depth the quote search keeps)? Those are what a search
bounding groups first must still count and score; the rest could be skipped
without changing its result.

The bound is the one a per-group index of per-word maxima could give:
each term group's largest count in one passage of the group at the shortest
turn length among the passages holding it (its BM25 bound); a neighbour's
share (one or two places away, within the episode) from the same bound of the
group and of the groups beside it; coverage from the term groups the group,
the groups beside it, or the episode's header hold; the episode's time boost,
every speaker and "when" boost the question can give, and its importance. The
threshold is the exact `keep`-th best score itself (an oracle: a real search
only has a lower bound of it), and each term group's maximum is taken from the
passages' group counts (a per-word index sums its words' maxima: looser for
groups of several forms). So these are ceilings: a real search keeps more.
Every group's bound is checked against its passages' exact scores. Beside
them, what the search itself keeps with its real threshold: the block bound
(runtime.passage_blocks) on a long conversation, else the passage bound
(runtime.passage_bounds, with its real
threshold) keeps in the same searches.
Prints a table; nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime import episode_scores, passage_blocks, turn_window
from tiermem.runtime import quote_search as qs
from tiermem.runtime.memory import open_memory
from tiermem.runtime.tools import call_tool

from tiermem.settings import resolve_settings

WHOLE = 1_000_000  # a block this long is the whole episode


def _bm25_bound(most: np.ndarray, shortest: np.ndarray, weights: list[float]) -> np.ndarray:
    """Per group: the BM25 of the largest counts at the shortest length (each term's BM25 grows with its
    count and shrinks with the length)."""
    out = np.zeros(len(most))
    for k, w in enumerate(weights):
        tf, length = most[:, k], shortest[:, k]
        found = tf > 0
        norm = episode_scores.K1 * (
            (1 - episode_scores.B)
            + episode_scores.B * np.where(found, length, 0.0) / episode_scores.AVG_QUOTE_WORDS
        )
        out += np.where(found, w * tf * (episode_scores.K1 + 1) / (tf + norm), 0.0)
    return out


def _kept_share(
    found: Any, entries: list[Any], head: tuple[Any, ...], asked: Any, keep: int, block: int
) -> float:
    """The share of the passages in groups of `block` whose bound reaches the `keep`-th best exact score."""
    scores, n = found.scores, len(found.scores)
    best = np.partition(scores, n - keep)[n - keep]
    heads, head_seen, boosts, importance = head
    counts, episode = found.counts, found.episode
    group = np.unique(episode * WHOLE + found.local // block, return_inverse=True)[1]
    n_blocks, n_terms = int(group.max()) + 1, counts.shape[1]
    turn_words = np.concatenate([e.turn_words for e in entries])
    most, shortest = np.zeros((n_blocks, n_terms)), np.full((n_blocks, n_terms), np.inf)
    for g in range(n_terms):
        np.maximum.at(most[:, g], group, counts[:, g])
        np.minimum.at(shortest[:, g], group, np.where(counts[:, g] > 0, turn_words, np.inf))
    of = np.zeros(n_blocks, dtype=np.int64)
    of[group] = episode
    own = _bm25_bound(most, shortest, asked.weights)
    # The groups beside, within the episode: a passage's neighbours (two places at most) lie there.
    before = np.r_[False, of[1:] == of[:-1]]
    after = np.r_[of[:-1] == of[1:], False]
    beside, held = own.copy(), most > 0
    seen = held.copy()
    beside[1:] = np.maximum(beside[1:], np.where(before[1:], own[:-1], 0.0))
    beside[:-1] = np.maximum(beside[:-1], np.where(after[:-1], own[1:], 0.0))
    seen[1:] |= held[:-1] & before[1:, None]
    seen[:-1] |= held[1:] & after[:-1, None]
    weights = np.array(asked.weights, dtype=np.float64)
    cover = np.minimum((seen | head_seen[of]) @ weights / (weights.sum() or 1.0), 1.0) + qs.COVERAGE_FLOOR
    share = max(qs.ANSWER_WEIGHT, qs.NEIGHBOUR_WEIGHT, turn_window.FAR_WEIGHT)
    boost = (qs.QUOTE_SPEAKER_BOOST if asked.named else 1.0) * (qs.WHEN_BOOST if asked.asks_when else 1.0)
    upper = (own + share * beside + qs.HEAD_WEIGHT * heads[of]) * cover * boosts[of] * boost + importance[of]
    upper += np.abs(upper) * 1e-9
    exact = np.full(n_blocks, -np.inf)
    np.maximum.at(exact, group, scores)
    if not np.all(exact <= upper):
        raise AssertionError(f"a bound of blocks of {block} is below an exact score")
    return float(np.bincount(group)[upper >= best].sum() / n)


def _report(
    truth: list[float], bounded: list[float], blocked: list[float], shares: dict[int, list[float]]
) -> None:
    print(f"{len(truth)} questions of four words on the long conversation; share of the candidate passages")
    print("group                 p50     p90     max")
    print(
        f"{'exact (the result)':20} {np.median(truth):6.3f}  {np.percentile(truth, 90):6.3f}  {max(truth):6.3f}"
    )
    for name, kept in (("passage bound", bounded), (f"blocks of {passage_blocks.BLOCK} (search)", blocked)):
        b = np.array(kept[: len(truth)])
        if len(b):  # what the search itself kept, with its real threshold
            print(f"{name:20} {np.median(b):6.3f}  {np.percentile(b, 90):6.3f}  {b.max():6.3f}")
    for s in shares:
        v = np.array(shares[s])
        name = "whole episodes" if s == WHOLE else f"blocks of {s}"
        print(f"{name:20} {np.median(v):6.3f}  {np.percentile(v, 90):6.3f}  {v.max():6.3f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="the --root of bench_read_paths.py")
    p.add_argument("--n", type=int, default=100, help="questions")
    p.add_argument("--blocks", default="2,4,8,16", help="block sizes (passages), besides whole episodes")
    args = p.parse_args(argv)
    path = Path(args.root) / "long"
    if not (path / "hot").exists():
        p.error(f"no store at {path}: run bench_read_paths.py --root {args.root} --only long first")
    sizes = [int(s) for s in args.blocks.split(",")] + [WHOLE]
    if min(sizes) < 2:
        p.error("blocks of 2 passages or more (a neighbour two places away must lie in a block beside)")
    seen: dict[str, Any] = {}
    real = qs._score_passages

    def scoring(rows: Any, entries: Any, asked: Any, near: Any, notes: Any, keep: Any = None) -> Any:
        seen.update(rows=rows, entries=entries, asked=asked, near=near, notes=notes, keep=keep)
        return real(rows, entries, asked, near, notes, keep)

    bounded: list[float] = []  # what today's passage bound keeps (with its real threshold)
    survivors = qs.survivors

    def recorded(passages: Any, factors: Any, keep: int | None) -> Any:
        chosen = survivors(passages, factors, keep)
        if keep is not None:  # the search's own (not this script's scoring of every passage)
            bounded.append(1.0 if chosen is None else len(chosen) / len(passages.own))
        return chosen

    blocked: list[float] = []  # what the search's own block bound keeps (runtime.passage_blocks)
    scored = passage_blocks.Blocks.scored

    def recorded_blocks(self: Any, *args: Any) -> Any:
        out = scored(self, *args)
        blocked.append(len(out[0]) / self.n_passages)
        return out

    settings = resolve_settings(data_dir=path, env={}, fsync="none")
    questions = [br.words(4) for _ in range(args.n + 1)]
    shares: dict[int, list[float]] = {s: [] for s in sizes}
    truth: list[float] = []
    with open_memory(settings, "talker", user="ada") as m:
        call_tool(m, "recall_memory", {"query": questions[0]})  # every episode prepared
        qs._score_passages = scoring  # type: ignore[assignment]
        qs.survivors = recorded  # type: ignore[assignment]
        passage_blocks.Blocks.scored = recorded_blocks  # type: ignore[method-assign]
        try:
            for q in questions[1:]:
                seen.clear()
                del bounded[len(truth) :], blocked[len(truth) :]
                qs.search_quotes(m.conn, m.principal, q, limit=60)
                del bounded[len(truth) + 1 :], blocked[len(truth) + 1 :]  # the first scoring's only
                rows, entries, asked, keep = seen["rows"], seen["entries"], seen["asked"], seen["keep"]
                found = real(rows, entries, asked, seen["near"], seen["notes"], None)
                n = len(found.scores)
                if keep is None or n <= keep:
                    continue
                heads, head_seen, boosts, importance = qs._headers(rows, entries, asked)
                head = (heads, head_seen, np.array(boosts), np.array(importance))
                truth.append(float(np.mean(found.scores >= np.partition(found.scores, n - keep)[n - keep])))
                for s in sizes:
                    shares[s].append(_kept_share(found, entries, head, asked, keep, s))
        finally:
            qs._score_passages = real  # type: ignore[assignment]
            qs.survivors = survivors  # type: ignore[assignment]
            passage_blocks.Blocks.scored = scored  # type: ignore[method-assign]
    _report(truth, bounded, blocked, shares)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
