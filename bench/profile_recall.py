"""Where a `recall_memory` call spends its CPU: per-stage timers (and optionally cProfile).

    .venv/bin/python bench/profile_recall.py --root /tmp/read_paths_recall --episodes 100000
    .venv/bin/python bench/profile_recall.py --root /tmp/read_paths_recall --episodes 100000 --cprofile
    .venv/bin/python bench/profile_recall.py --root /tmp/read_paths_long --long         # the long conversation
    .venv/bin/python bench/profile_recall.py --root /tmp/read_paths_long --long --context
    .venv/bin/python bench/profile_recall.py --root /tmp/read_paths_long --long --repeat  # first time vs again

Reads the store `bench_read_paths.py --only recall` builds under --root (run
that first), asks the same questions in the same way (one agent, the user
changing per call among the episodes' participants), and times each stage of
the tool with the process's CPU clock: the two searches, their candidate
queries, the search over turns no episode covers, the quote scoring, the
rendering, the reranker and the `retrieval` event. With --long: the long conversation of
`bench_read_paths.py --only long` (2,000 turns of ~1,000-token replies, every
episode prepared by the warm-up calls, every timed question a new one), and
with --context the context assembly with its per-turn retrieval instead of
the tool. Also counts the garbage collector's
pauses (a full collection lands on whichever call triggers it; the young
generations' passes apart), and lists the
slowest calls with their stages, and the slowest 5 % of calls against the
median stage by stage. With --repeat each question is asked twice in a row,
and each stage's first time is set against its repeat (what is worked out
once per new word or passage). Prints tables; nothing is written.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime import episode_search, passage_blocks, quote_search, rerank, store_reads
from tiermem.runtime.context import assemble_context
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.tools import call_tool

from tiermem.settings import resolve_settings


def _timed(stages: dict[str, list[float]], owner: Any, name: str, label: str) -> None:
    """Replace `owner.name` by a wrapper adding each call's CPU time (ms) to `stages[label]`."""
    fn: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            stages.setdefault(label, []).append((time.process_time() - c0) * 1000)

    setattr(owner, name, wrapper)


def _instrument(m: AgentMemory, stages: dict[str, list[float]]) -> None:
    _timed(stages, store_reads.episode_search, "search_episodes", "search_episodes")
    _timed(stages, episode_search, "_candidate_rows", "  episodes: candidate query")
    _timed(stages, store_reads.unfolded, "search_unfolded", "search over unfolded turns")
    _timed(stages, store_reads.quote_search, "recall_lines", "recall_lines (quote search)")
    _timed(stages, quote_search, "_candidate_rows", "  quotes: candidate query")
    _timed(stages, quote_search, "_score_passages", "  quotes: passage scoring")
    _timed(stages, quote_search, "render_quote_block", "  quotes: rendering")
    _timed(stages, quote_search, "episode_notes", "  quotes: notes lookup")
    _timed(stages, passage_blocks.Blocks, "bounds", "  quotes: block bounds")
    _timed(stages, passage_blocks.Blocks, "scored", "  quotes: blocks counted and scored")
    _timed(stages, quote_search, "_restated", "  quotes: restatements")
    _timed(stages, quote_search, "_distinct", "  quotes: result order and items")
    if hasattr(quote_search, "_kept"):  # the lexical path's (the check over a run of results)
        _timed(stages, quote_search, "_kept", "  quotes: result order and items")
    _timed(stages, rerank.Reranker, "reorder", "  quotes: reranker")
    _timed(stages, quote_search.TEXTS, "term_counts", "term counts (both searches)")
    _timed(stages, episode_search, "_quote_matches", "  episodes: quote counts")
    _timed(stages, m, "record_retrieval", "retrieval event (log + hot store)")


def _caller(m: AgentMemory, queries: list[str], long: bool, context: bool) -> Callable[[int], None]:
    """Call i: the i-th question (the long conversation's are all new), as the tool or the context."""

    def call(i: int) -> None:
        if long and context:
            assemble_context(m, query=queries[i])
        elif long:
            call_tool(m, "recall_memory", {"query": queries[i]})
        else:
            m.user = br.PEOPLE[i % 200]  # the memory serves one of the episodes' participants
            call_tool(m, "recall_memory", {"query": queries[i % 256]})

    return call


def _report(
    args: argparse.Namespace,
    queries: list[str],
    stages: dict[str, list[float]],
    pauses: list[tuple[int, float]],
    total: list[float],
) -> None:
    """The stages' table, the collector's pauses, the slowest 5 % against the median, the slowest calls."""
    what = ("context with retrieval" if args.context else "recall_memory") + (
        " on the long conversation" if args.long else f" at {args.episodes:,} episodes"
    )
    print(f"{what}, {args.n} calls, load {os.getloadavg()[0]:.1f}")
    print(f"{'stage (CPU ms per call)':40s} {'p50':>7s} {'p99':>7s} {'mean':>7s}")
    print(
        f"{'the whole tool':40s} {br.pct(total, 0.5):7.2f} {br.pct(total, 0.99):7.2f} {sum(total) / args.n:7.2f}"
    )
    for label, times in stages.items():
        per_call = times if len(times) == args.n else [sum(times) / args.n]
        print(
            f"{label:40s} {br.pct(per_call, 0.5):7.2f} {br.pct(per_call, 0.99):7.2f} {sum(times) / args.n:7.2f}"
        )
    full = [t for g, t in pauses if g == 2]
    print(f"garbage collector: {len(pauses)} pauses, full collections {[round(t, 1) for t in full]} ms")
    for g in (0, 1):  # the young passes: what a call's new, kept objects cost
        young = [t for gen, t in pauses if gen == g]
        print(
            f"  generation {g}: {len(young)} passes, {sum(young):.1f} ms in all, longest {max(young, default=0):.2f} ms"
        )
    slow = sorted(range(args.n), key=lambda i: -total[i])[: max(1, args.n // 20)]
    print(f"the slowest 5 % ({len(slow)} calls) vs every call, stage by stage (CPU ms per call):")
    print(f"{'stage':40s} {'p50 all':>8s} {'mean slow':>10s} {'grows':>7s}")
    print(
        f"{'the whole tool':40s} {br.pct(total, 0.5):8.2f} {sum(total[i] for i in slow) / len(slow):10.2f}"
        f" {sum(total[i] for i in slow) / len(slow) - br.pct(total, 0.5):7.2f}"
    )
    for label, times in stages.items():
        if len(times) != args.n:
            continue  # a stage called several times per call has no per-call figure
        mid, worst = br.pct(times, 0.5), sum(times[i] for i in slow) / len(slow)
        print(f"{label:40s} {mid:8.2f} {worst:10.2f} {worst - mid:7.2f}")
    print("slowest calls:")
    for i in sorted(range(args.n), key=lambda i: -total[i])[:5]:  # call i asked queries[i + 10]
        parts = ", ".join(
            f"{label.strip()} {times[i]:.1f}"
            for label, times in stages.items()
            if len(times) == args.n and times[i] >= 0.5
        )
        print(f"  {total[i]:6.2f} ms {queries[(i + 10) % len(queries)]!r}: {parts}")


def _first_and_repeat(call: Callable[[int], None], stages: dict[str, list[float]], n: int) -> None:
    """Each question asked twice in a row: stage by stage, what its first time costs beyond its repeat
    (the work done once per new word or new passage and kept: what the slow calls of a run are made of)."""
    first: dict[str, list[float]] = {}
    again: dict[str, list[float]] = {}
    for i in range(10, n + 10):
        for into in (first, again):
            before = {label: len(times) for label, times in stages.items()}
            c0 = time.process_time()
            call(i)
            into.setdefault("the whole tool", []).append((time.process_time() - c0) * 1000)
            for label, times in stages.items():
                into.setdefault(label, []).append(sum(times[before.get(label, 0) :]))
    print(f"{n} questions, each asked twice, load {os.getloadavg()[0]:.1f}; mean CPU ms per call:")
    print(f"{'stage':40s} {'first':>7s} {'repeat':>7s} {'diff':>7s}")
    for label, times in first.items():
        a, b = sum(times) / n, sum(again[label]) / n
        print(f"{label:40s} {a:7.2f} {b:7.2f} {a - b:7.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="the --root of bench_read_paths.py")
    p.add_argument("--episodes", type=int, default=100_000)
    p.add_argument("--n", type=int, default=500, help="timed calls")
    p.add_argument("--cprofile", action="store_true", help="cProfile the calls instead of timing stages")
    p.add_argument("--long", action="store_true", help="the long conversation (--only long's store)")
    p.add_argument("--context", action="store_true", help="with --long: context with the per-turn retrieval")
    p.add_argument(
        "--repeat", action="store_true", help="each question asked twice: its first time against its repeat"
    )
    args = p.parse_args(argv)
    path = Path(args.root) / ("long" if args.long else f"recall{args.episodes}")
    if not (path / "hot").exists():
        only = "long" if args.long else "recall"
        p.error(f"no store at {path}: run bench_read_paths.py --root {args.root} --only {only} first")
    settings = resolve_settings(data_dir=path, env={}, fsync="none")
    # The questions bench_read_paths asks of a built store (the long conversation: four words, each new).
    queries = [br.words(4 if args.long else 3) for _ in range(args.n + 10 if args.long else 256)]
    agent, user = ("talker", "ada") if args.long else ("npc", None)
    with open_memory(settings, agent, user=user) as m:
        call = _caller(m, queries, args.long, args.context)

        if args.long:  # every episode prepared first (the context alone meets them a few at a time)
            call_tool(m, "recall_memory", {"query": queries[0]})
        for i in range(10):
            call(i)
        if args.cprofile:
            prof = cProfile.Profile()
            prof.enable()
            for i in range(10, args.n + 10):
                call(i)
            prof.disable()
            pstats.Stats(prof).sort_stats(os.environ.get("PROF_SORT", "tottime")).print_stats(
                int(os.environ.get("PROF_N", "30"))
            )
            return 0
        stages: dict[str, list[float]] = {}
        _instrument(m, stages)
        if args.repeat:
            _first_and_repeat(call, stages, args.n)
            return 0
        pauses: list[tuple[int, float]] = []
        started = [0.0]

        def on_gc(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                started[0] = time.process_time()
            else:
                pauses.append((info["generation"], (time.process_time() - started[0]) * 1000))

        gc.callbacks.append(on_gc)
        total = []
        for i in range(10, args.n + 10):
            c0 = time.process_time()
            call(i)
            total.append((time.process_time() - c0) * 1000)
        gc.callbacks.remove(on_gc)
    _report(args, queries, stages, pauses, total)
    return 0


if __name__ == "__main__":
    sys.exit(main())
