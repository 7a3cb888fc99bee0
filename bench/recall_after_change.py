"""CPU of the recalls that follow a change of the episodes, and a process's first ones.

    .venv/bin/python bench/recall_after_change.py --root /tmp/read_paths_long
    .venv/bin/python bench/recall_after_change.py --root /tmp/read_paths --archive 100000
    .venv/bin/python bench/recall_after_change.py --root /tmp/read_paths --archive 100000 --cprofile

The long conversation (default): reads a copy of the store
`bench_read_paths.py --only long` builds under --root (the copy goes to
--scratch, default <root>/after_change, and is removed at the end), asks a
process's first three questions, then twelve more, then, 8 times, three
questions and a new long episode (10 turns of ~700 words, projected as the
compressor's would be) followed by the first question after it, then 3
times a deleted episode (a plain `DELETE`, no erasure) followed by the
first question after it.

With --archive N: a copy of the store `bench_read_paths.py --only recall`
builds for N episodes (agent `npc`, the user changing per call among the
episodes' participants, as `profile_recall.py` asks), 40 questions asked
first; then, --rounds times each, a question asked twice (the second time
with its statistics kept: the figure before), one short episode of another agent (`other`) or
of `npc` itself appended to the log and projected as the compressor's
would be, and the same question again (the figure after: what the new
episode alone makes it recompute). With --cprofile, the questions after
an append (in either mode) are profiled, their top functions printed.
With --archive N --seek: what counting a common and a rare word's documents
costs, from fts5vocab, as a whole MATCH, and past a rowid near the newest
(the new documents only), and for a prefix of the word past that rowid.

Prints each figure (CPU ms) with the load average; nothing is written.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime.hotstore import connect
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings


def _ask(m: AgentMemory, query: str | None = None) -> float:
    c0 = time.process_time()
    call_tool(m, "recall_memory", {"query": query or br.words(4)})
    return (time.process_time() - c0) * 1000


def _append(settings: Settings, event: dict[str, object]) -> None:
    """One episode through the log and the projector, as a compression run writes it."""
    with EventLog(settings) as log:
        log.append_many([event])
    project(settings)


def _long(settings: Settings, profile: cProfile.Profile | None) -> None:
    steady: list[float] = []
    inserted: list[float] = []
    deleted: list[float] = []
    with open_memory(settings, "talker", user="ada") as m:
        first = [_ask(m) for _ in range(3)]
        for _ in range(12):
            _ask(m)
        for k in range(8):
            steady += [_ask(m) for _ in range(3)]
            quotes = [
                {"text": br.words(700), "event_id": f"n{k}.{j}", "speaker": "Talker"} for j in range(10)
            ]
            _append(
                settings,
                {**br.episode_event("talker", 10_000 + k), "participants": ["ada"], "key_quotes": quotes},
            )
            if profile is not None:
                profile.enable()
            inserted.append(_ask(m))
            if profile is not None:
                profile.disable()
        for _ in range(3):
            steady += [_ask(m) for _ in range(3)]
            with m.conn:
                m.conn.execute("DELETE FROM episodes WHERE rowid = (SELECT max(rowid) FROM episodes)")
            deleted.append(_ask(m))
    print(f"load {os.getloadavg()[0]:.1f}; CPU ms per recall")
    print(f"a process's first three: {[round(x, 1) for x in first]}")
    print(f"steady p50 (the questions between changes): {sorted(steady)[len(steady) // 2]:.1f}")
    print(f"first after a new episode: {[round(x, 1) for x in inserted]}")
    print(f"first after a deleted episode: {[round(x, 1) for x in deleted]}")


def _archive(settings: Settings, rounds: int, profile: cProfile.Profile | None) -> None:
    queries = [br.words(3) for _ in range(40)]
    figures: dict[str, tuple[list[float], list[float]]] = {"other": ([], []), "npc": ([], [])}
    with open_memory(settings, "npc") as m:
        for i, q in enumerate(queries):  # every question's statistics kept once
            m.user = br.PEOPLE[i % 200]
            _ask(m, q)
        for k in range(rounds):
            for agent, (before, after) in figures.items():
                i = (2 * k + len(before)) % len(queries)
                m.user = br.PEOPLE[i % 200]
                _ask(m, queries[i])  # its statistics brought up to date after the last append
                before.append(_ask(m, queries[i]))
                _append(settings, br.episode_event(agent, 1_000_000 + 2 * k + (agent == "npc")))
                if profile is not None:
                    profile.enable()
                after.append(_ask(m, queries[i]))
                if profile is not None:
                    profile.disable()
    print(f"load {os.getloadavg()[0]:.1f}; CPU ms per recall, {rounds} appends of each kind")
    for agent, (before, after) in figures.items():
        print(
            f"an episode of {agent!r}: the question before it p50 {br.pct(before, 0.5):.1f}, after it p50 "
            f"{br.pct(after, 0.5):.1f} mean {sum(after) / len(after):.1f} max {max(after):.1f}"
        )
        print(f"  after: {[round(x, 1) for x in after]}")


def _seek(settings: Settings) -> None:
    """What counting a word's documents costs, whole and past a rowid (the new ones only)."""
    conn = connect(settings.hot_db)
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, episodes_fts, 'row')")
    words = conn.execute("SELECT term, doc FROM temp.v ORDER BY doc DESC LIMIT 2").fetchall()
    words += conn.execute("SELECT term, doc FROM temp.v WHERE doc BETWEEN 200 AND 400 LIMIT 1").fetchall()
    newest = conn.execute("SELECT max(rowid) FROM episodes").fetchone()[0]

    def ms(sql: str, *args: object) -> float:
        conn.execute(sql, args).fetchall()
        c0 = time.perf_counter()
        for _ in range(20):
            conn.execute(sql, args).fetchall()
        return (time.perf_counter() - c0) / 20 * 1000

    count = "SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ? AND rowid > ?"
    print(f"load {os.getloadavg()[0]:.1f}; wall ms per count, {newest:,} episodes")
    for word, docs in words:
        phrase, prefix = '"' + word + '"', '"' + word[:4] + '"*'
        vocab = ms("SELECT doc FROM temp.v WHERE term = ?", word)
        whole, last, last_k = (
            ms(count, phrase, 0),
            ms(count, phrase, newest - 1),
            ms(count, phrase, newest - 1000),
        )
        print(
            f"{word!r} ({docs:,} documents): fts5vocab {vocab:.3f}, MATCH whole {whole:.3f},"
            f" past newest - 1 {last:.3f}, past newest - 1000 {last_k:.3f};"
            f" the prefix {word[:4]}* past newest - 1 {ms(count, prefix, newest - 1):.3f}"
        )
    conn.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="the --root of bench_read_paths.py")
    p.add_argument("--scratch", help="where the store is copied (default: <root>/after_change)")
    p.add_argument("--archive", type=int, help="the archive of this many episodes (--only recall's store)")
    p.add_argument("--rounds", type=int, default=20, help="with --archive: appends of each kind")
    p.add_argument("--seek", action="store_true", help="with --archive: time counting a word's new documents")
    p.add_argument("--cprofile", action="store_true", help="profile the questions after an append")
    args = p.parse_args(argv)
    name = f"recall{args.archive}" if args.archive else "long"
    src = Path(args.root) / name
    if not (src / "hot").exists():
        only = "recall" if args.archive else "long"
        p.error(f"no store at {src}: run bench_read_paths.py --root {args.root} --only {only} first")
    dst = Path(args.scratch) if args.scratch else Path(args.root) / "after_change"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    settings = resolve_settings(data_dir=dst, env={}, fsync="none")
    profile = cProfile.Profile() if args.cprofile else None
    try:
        if args.archive and args.seek:
            _seek(settings)
        elif args.archive:
            _archive(settings, args.rounds, profile)
        else:
            _long(settings, profile)
    finally:
        shutil.rmtree(dst, ignore_errors=True)
    if profile is not None:
        pstats.Stats(profile).sort_stats("cumulative").print_stats(40)
    return 0


if __name__ == "__main__":
    sys.exit(main())
