"""Does one agent's `recall_memory` grow with the number of OTHER agents in the store? (issue 18)

    nice -n 10 .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents --build-only   # stores first
    .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents                          # every size
    .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents --agents 1,1000 --n 20
    .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents --n 40 --tool-ab 2       # copy vs index, A/B

Stores of A agents x 100 episodes each (`--agents`, default 1,100,1000,10000: the one-agent
control, then 10k, 100k and 1M episodes), built under --root once and reused (a store built
before the episode index's agent column is indexed again at its first open, timed by the open).
The episodes are `bench_runtime.episode_event`'s (names, summaries and quotes from the same Zipf
vocabulary, so a common word is common across agents), dealt round-robin over the agents (agent
`i % A`, so every agent's episodes are spread over the whole range of rowids, as in a store many
agents write at once), each agent with its own 10 users as participants.

For 20 fixed agents (the same names at every size), each serving one of its own users, the tool
is asked `--n` questions per agent: half made like `profile_recall.py`'s (3 words of the
vocabulary), half of 3 words of one episode the user may see (found first? found at all?). Per
size: the tool's CPU and wall p50/p99, the physical reference (the question's words as one plain
FTS5 query over the whole index, best 60 by BM25, timed after each call), the episode search's candidate query
(`episode_search._candidate_rows`), and per candidate try walked (`episode_search._walk`):
windowed or not, ANDed with the agent's phrase or not (runtime.episode_index), and the documents
its words have in the whole index against in the agent's own episodes (counted afterwards, not
timed); and the calls where no try found a visible episode (the search fell back to the most
important recent ones), with how many of them had a visible episode holding one of the
question's words.

An agent holding a small share of the store is searched over its own copy of its episodes
(runtime.own_episodes): `own_copy_searches` counts those searches, and `first_call_cpu_*` each
measured agent's first call in the process (its copy read), which the timed calls follow.

With `--tool-ab ROUNDS`, instead: the whole tool as shipped (over the agent's own copy) and through
the index (no copy: the agent's phrase ANDed with tries chosen by its own counts, as before the
copy), alternating rounds on the same connections; `same_answers` counts the
questions both answer alike.

Prints a table and writes bench/results/recall_agents.json (`--tool-ab`: recall_agents_tool_ab.json).
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime import episode_search, own_episodes, quote_search
from tiermem.runtime.hotstore import connect
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings

RESULTS = Path(__file__).resolve().parent / "results"
PER_AGENT = 100
USERS_PER_AGENT = 10
MEASURED_AGENTS = 20


def users_of(agent: str) -> list[str]:
    return [f"{agent}u{j}" for j in range(USERS_PER_AGENT)]


def store(root: Path, agents: int) -> Settings:
    settings = resolve_settings(data_dir=root / f"agents{agents}", env={}, fsync="none")
    if (settings.data_dir / "hot").exists():
        t0 = time.perf_counter()
        connect(settings.hot_db).close()  # an index made before the agent column is made again here
        took = time.perf_counter() - t0
        if took > 0.5:
            print(f"  opened {settings.data_dir} in {took:.1f}s (its episode index made again)", flush=True)
        return settings
    rng = random.Random(agents)
    t0 = time.perf_counter()
    total = agents * PER_AGENT
    with EventLog(settings) as log:
        for start in range(0, total, 20_000):
            batch = []
            for i in range(start, min(total, start + 20_000)):
                agent = f"agent{i % agents}"
                event = br.episode_event(agent, i // agents)
                event["participants"] = rng.sample(users_of(agent), 2)
                event["source_event_ids"] = [f"src{i}"]
                batch.append(event)
            log.append_many(batch)
    project(settings)
    print(f"  built {settings.data_dir} ({total:,} episodes) in {time.perf_counter() - t0:.0f}s", flush=True)
    return settings


def measured(agents: int) -> list[str]:
    """The same 20 agent names at every size (agent0 alone in the control)."""
    return [f"agent{k}" for k in range(min(agents, MEASURED_AGENTS))]


def questions(conn: sqlite3.Connection, agent: str, user: str, n: int) -> list[tuple[str, str, str]]:
    """(kind, question, the episode it was made from or ""), alternately: 3 words of the vocabulary,
    and 3 words of one of the agent's episodes the user may see (its name and summary; seeded by name)."""
    rng = random.Random(agent)
    vocab = random.Random("vocab" + agent)
    mine = conn.execute(
        "SELECT episode_id, name, summary FROM episodes WHERE agent_id = ? AND instr(owner, ?) > 0 ORDER BY rowid",
        [agent, f"\x1f{user}\x1f"],
    ).fetchall()
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(("vocabulary", " ".join(vocab.choices(br.VOCAB, cum_weights=br.CUM_ZIPF, k=3)), ""))
        else:
            episode, name, summary = rng.choice(mine)
            out.append(("own episode", " ".join(rng.sample(f"{name} {summary}".split(), 3)), episode))
    return out


def _wrap(owner: Any, name: str, into: list[float]) -> Callable[[], None]:
    fn = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            into.append((time.process_time() - c0) * 1000)

    setattr(owner, name, wrapper)
    return lambda: setattr(owner, name, fn)


def pct(xs: list[float], q: float) -> float:
    return round(br.pct(xs, q), 3) if xs else 0.0


def run_tool(settings: Settings, agents: int, n: int) -> dict[str, Any]:
    """Time the tool for the measured agents; record every try the search walks."""
    cpu: list[float] = []
    wall: list[float] = []
    cand: list[float] = []  # episode_search._candidate_rows, per call summed
    qcand: list[float] = []
    tries: list[dict[str, Any]] = []
    per_call_tries: list[int] = []
    loads = []
    by_kind: dict[str, list[float]] = {}
    fell_back: dict[str, int] = {}
    answers: list[bytes] = []
    fallbacks: list[tuple[str, str, str]] = []
    hits = {"first": 0, "any": 0, "asked": 0}
    windowed_kind: dict[str, list[bool]] = {}
    raw: list[float] = []  # the physical reference: one plain FTS5 query per question
    first: list[float] = []  # each agent's first call in the process (its copy read, its caches filled)
    copied: list[int] = []  # per candidate search answered from the agent's own copy: its candidates
    walk = episode_search._walk
    own_candidates = own_episodes.OwnEpisodes.candidates

    def recording_copy(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = own_candidates(self, *args, **kwargs)
        copied.append(len(found))
        return found

    def recording(
        conn: Any, source: str, agent_id: str, where: str, params: list[Any], attempt: Any, windowed: bool
    ) -> Any:
        found = walk(conn, source, agent_id, where, params, attempt, windowed)
        tries.append(
            {
                "agent": agent_id,
                "source": source,
                "where": where,
                "params": list(params),
                "full": attempt.match,
                "agent_phrase": attempt.agent is not None,
                "windowed": windowed,
                "newest": found.newest,
                "visible": len(found.visible),
            }
        )
        return found

    for agent in measured(agents):
        user = users_of(agent)[0]
        with open_memory(settings, agent, user=user) as m:
            qs = questions(m.conn, agent, user, n + 4)
            for k, (_, q, _) in enumerate(qs[n:]):  # warm-up: the connection and its caches, not timed
                c0 = time.process_time()
                call_tool(m, "recall_memory", {"query": q})
                if k == 0:
                    first.append((time.process_time() - c0) * 1000)
            qs = qs[:n]
            episode_search._walk = recording
            own_episodes.OwnEpisodes.candidates = recording_copy  # type: ignore[method-assign]
            cand_one: list[float] = []
            qcand_one: list[float] = []
            undo = [
                _wrap(episode_search, "_candidate_rows", cand_one),
                _wrap(quote_search, "_candidate_rows", qcand_one),
            ]
            try:
                for kind, q, target in qs:
                    before, copied_before = len(tries), len(copied)
                    cand_one.clear()
                    qcand_one.clear()
                    t0, c0 = time.perf_counter(), time.process_time()
                    answer = call_tool(m, "recall_memory", {"query": q})
                    cpu.append((time.process_time() - c0) * 1000)
                    answers.append(orjson.dumps(answer, option=orjson.OPT_SORT_KEYS))
                    by_kind.setdefault(kind, []).append(cpu[-1])
                    windowed_kind.setdefault(kind, []).append(any(t["windowed"] for t in tries[before:]))
                    wall.append((time.perf_counter() - t0) * 1000)
                    cand.append(sum(cand_one))
                    qcand.append(sum(qcand_one))
                    per_call_tries.append(len(tries) - before)
                    raw.append(raw_fts(m.conn, q))
                    if not any(t["visible"] for t in tries[before:]) and not any(copied[copied_before:]):
                        fell_back[kind] = fell_back.get(kind, 0) + 1
                        fallbacks.append((agent, user, q))
                    if target:
                        found_ids = [mem["episode_id"] for mem in answer.get("memories", [])]
                        hits["first"] += bool(found_ids) and found_ids[0] == target
                        hits["any"] += target in found_ids
                        hits["asked"] += 1
            finally:
                episode_search._walk = walk
                own_episodes.OwnEpisodes.candidates = own_candidates  # type: ignore[method-assign]
                for u in undo:
                    u()
        loads.append(os.getloadavg()[0])
    return {
        "calls": len(cpu),
        "tool_cpu_p50": pct(cpu, 0.5),
        "tool_cpu_p99": pct(cpu, 0.99),
        "raw_fts_cpu_p50": pct(raw, 0.5),
        "raw_fts_cpu_p99": pct(raw, 0.99),
        "tool_cpu_mean": round(sum(cpu) / len(cpu), 3),
        "tool_wall_p50": pct(wall, 0.5),
        "tool_wall_p99": pct(wall, 0.99),
        "candidate_cpu_p50": pct(cand, 0.5),
        "candidate_cpu_p99": pct(cand, 0.99),
        "candidate_cpu_mean": round(sum(cand) / len(cand), 3),
        "quote_candidate_cpu_mean": round(sum(qcand) / len(qcand), 3),
        "own_episode_first": round(hits["first"] / max(1, hits["asked"]), 3),
        "own_episode_found": round(hits["any"] / max(1, hits["asked"]), 3),
        "tries_per_call": round(sum(per_call_tries) / len(per_call_tries), 2),
        "own_copy_searches": len(copied),
        "first_call_cpu_p50": pct(first, 0.5),
        "first_call_cpu_max": round(max(first), 3) if first else 0.0,
        "load": round(max(loads), 1),
        "by_kind": {
            k: {
                "cpu_p50": pct(v, 0.5),
                "cpu_p99": pct(v, 0.99),
                "windowed_calls": round(sum(windowed_kind[k]) / len(v), 3),
                "no_try_visible": round(fell_back.get(k, 0) / len(v), 3),
            }
            for k, v in by_kind.items()
        },
        "_tries": tries,
        "_answers": answers,
        "_fallbacks": fallbacks,
    }


def raw_fts(conn: Any, q: str) -> float:
    """CPU ms of the raw SQLite FTS5 query the tool stands on: the question's words (as the search
    writes them, OR-ed) over the whole index, best 60 by plain BM25, no visibility, no Python."""
    terms = episode_search.query_terms(q)
    if not terms:
        return 0.0
    c0 = time.process_time()
    conn.execute(
        "SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH ? ORDER BY rank LIMIT 60",
        [episode_search._fts(terms)],
    ).fetchall()
    return (time.process_time() - c0) * 1000


def count_documents(settings: Settings, tries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per try: the documents its MATCH has in the whole index and in the agent's own episodes."""
    hot = next((settings.data_dir / "hot").glob("*.sqlite"))
    db = sqlite3.connect(f"file:{hot}?mode=ro", uri=True)
    whole, own = [], []
    seen: dict[tuple[str, str], tuple[int, int]] = {}
    for t in tries:
        key = (t["full"], t["agent"])
        if key not in seen:
            a = db.execute(
                "SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ?", [t["full"]]
            ).fetchone()
            b = db.execute(
                "SELECT count(*) FROM episodes_fts JOIN episodes e ON e.rowid = episodes_fts.rowid"
                " WHERE episodes_fts MATCH ? AND e.agent_id = ?",
                [t["full"], t["agent"]],
            ).fetchone()
            seen[key] = (int(a[0]), int(b[0]))
        whole.append(seen[key][0])
        own.append(seen[key][1])
    db.close()
    windowed = [t["windowed"] for t in tries]
    return {
        "tries": len(tries),
        "windowed_share": round(sum(windowed) / len(tries), 3) if tries else 0.0,
        "agent_phrase_share": round(sum(t["agent_phrase"] for t in tries) / len(tries), 3) if tries else 0.0,
        "docs_whole_mean": round(sum(whole) / len(whole), 1) if whole else 0,
        "docs_whole_p50": pct([float(x) for x in whole], 0.5),
        "docs_own_mean": round(sum(own) / len(own), 2) if own else 0,
        "docs_own_max": max(own, default=0),
    }


def missed(settings: Settings, fallbacks: list[tuple[str, str, str]]) -> dict[str, Any]:
    """Of the calls where no try found a visible episode (the search fell back to the most important
    recent ones): how many had a visible episode holding one of the question's words after all."""
    hot = next((settings.data_dir / "hot").glob("*.sqlite"))
    db = sqlite3.connect(f"file:{hot}?mode=ro", uri=True)
    had = 0
    for agent, user, q in fallbacks:
        terms = episode_search.query_terms(q)
        if not terms:
            continue
        row = db.execute(
            "SELECT count(*) FROM episodes_fts JOIN episodes e ON e.rowid = episodes_fts.rowid"
            " WHERE episodes_fts MATCH ? AND e.agent_id = ? AND instr(e.owner, ?) > 0",
            [episode_search._fts(terms), agent, f"\x1f{user}\x1f"],
        ).fetchone()
        had += row[0] > 0
    db.close()
    return {"fell_back": len(fallbacks), "fell_back_with_a_visible_match": had}


def _searched(own_copy: Any) -> None:
    """Both searches answered over the agent's own copy (`own_copy` as shipped) or through the
    index (None): the copies stay kept for the next round."""
    episode_search.own_copy = own_copy or (lambda conn, agent_id: None)
    quote_search.own_copy = episode_search.own_copy


def tool_ab(settings: Settings, agents: int, n: int, rounds: int) -> dict[str, Any]:
    """The whole tool as shipped (an agent with a small share searched over its own copy of its
    episodes, runtime.own_episodes) and through the index (`own_copy` answering None: the agent's
    phrase ANDed with the tries, chosen by its own counts), in alternating rounds on the same
    connections;
    every answer of every round compared between the two, and the "own episode" questions' source
    episode first, per arm."""
    shipped = episode_search.own_copy
    cpu: dict[str, list[float]] = {"copy": [], "index": []}
    answers: dict[str, list[bytes]] = {"copy": [], "index": []}
    firsts: dict[str, list[bool]] = {"copy": [], "index": []}
    loads = []
    for agent in measured(agents):
        user = users_of(agent)[0]
        with open_memory(settings, agent, user=user) as m:
            qs = questions(m.conn, agent, user, n + 4)
            for arm in ("copy", "index"):
                _searched(shipped if arm == "copy" else None)
                try:
                    for _, q, _ in qs[n:]:
                        call_tool(m, "recall_memory", {"query": q})
                finally:
                    _searched(shipped)
            for r in range(rounds):
                for arm in ("copy", "index") if r % 2 == 0 else ("index", "copy"):
                    _searched(shipped if arm == "copy" else None)
                    try:
                        for _, q, target in qs[:n]:
                            m.conn.candidate_memo = None  # the index's arm walks its own tries
                            c0 = time.process_time()
                            answer = call_tool(m, "recall_memory", {"query": q})
                            cpu[arm].append((time.process_time() - c0) * 1000)
                            answers[arm].append(orjson.dumps(answer, option=orjson.OPT_SORT_KEYS))
                            if target:
                                ids = [mem["episode_id"] for mem in answer.get("memories", [])]
                                firsts[arm].append(ids[:1] == [target])
                    finally:
                        _searched(shipped)
        loads.append(os.getloadavg()[0])
    same = sum(a == b for a, b in zip(answers["copy"], answers["index"], strict=True))
    return {
        "calls_per_arm": len(cpu["copy"]),
        **{f"{arm}_cpu_p50": pct(v, 0.5) for arm, v in cpu.items()},
        **{f"{arm}_cpu_p99": pct(v, 0.99) for arm, v in cpu.items()},
        **{f"{arm}_cpu_mean": round(sum(v) / len(v), 3) for arm, v in cpu.items()},
        **{f"{arm}_own_episode_first": round(sum(v) / max(1, len(v)), 3) for arm, v in firsts.items()},
        "same_answers": same,
        "load": round(max(loads), 1),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="where the stores are built (kept for the next run)")
    p.add_argument("--agents", default="1,100,1000,10000", help="agents per store (x 100 episodes each)")
    p.add_argument("--n", type=int, default=40, help="questions per measured agent (20 agents)")
    p.add_argument("--build-only", action="store_true", help="build the stores and stop")
    p.add_argument(
        "--tool-ab",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: the whole tool over the agent's own copy and through the index, ROUNDS alternating rounds",
    )
    p.add_argument(
        "--out", help="default bench/results/recall_agents.json (--tool-ab: recall_agents_tool_ab.json)"
    )
    args = p.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in args.agents.split(",")]
    if args.build_only:
        for a in sizes:
            store(root, a)
        return 0
    results: dict[str, Any] = {
        "machine": {"nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
        "sizes": [],
    }
    args.out = args.out or str(
        RESULTS / ("recall_agents_tool_ab.json" if args.tool_ab else "recall_agents.json")
    )
    if args.tool_ab:
        results["tool_ab"] = []
        for a in sizes:
            ab = {"agents": a, **tool_ab(store(root, a), a, args.n, args.tool_ab)}
            results["tool_ab"].append(ab)
            print(orjson.dumps(ab).decode(), flush=True)
        Path(args.out).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
        return 0
    for a in sizes:
        settings = store(root, a)
        row: dict[str, Any] = {"agents": a, "episodes": a * PER_AGENT}
        row.update(run_tool(settings, a, args.n))
        tries = row.pop("_tries")
        row.pop("_answers")
        row.update(missed(settings, row.pop("_fallbacks")))
        row.update(count_documents(settings, tries))
        results["sizes"].append(row)
        print(orjson.dumps(row).decode(), flush=True)
    Path(args.out).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(
        f"\n{'episodes':>9s} {'tool p50/p99':>14s} {'cand p50/p99':>14s} {'raw FTS5 p50/p99':>17s} "
        f"{'windowed':>8s} {'docs whole/own':>16s} {'agent phrase':>12s}"
    )
    for r in results["sizes"]:
        print(
            f"{r['episodes']:9,d} {r['tool_cpu_p50']:6.2f}/{r['tool_cpu_p99']:6.2f} "
            f"{r['candidate_cpu_p50']:6.2f}/{r['candidate_cpu_p99']:6.2f} "
            f"{r['raw_fts_cpu_p50']:7.2f}/{r['raw_fts_cpu_p99']:8.2f} {r['windowed_share']:8.2f} "
            f"{r['docs_whole_mean']:9.0f}/{r['docs_own_mean']:6.1f} {r['agent_phrase_share']:12.2f}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
