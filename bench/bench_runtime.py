"""Runtime benchmarks: context assembly vs log size, recall_memory, record_turn, memory-level savings.

    .venv/bin/python bench/bench_runtime.py                 # everything (about 2-3 minutes)
    .venv/bin/python bench/bench_runtime.py --only levels   # one part: context | recall | record | levels
    .venv/bin/python bench/bench_runtime.py --big 200000    # a smaller "big" log for a quick run

Targets: context assembly p99 <= 2 ms and within 1.5x from 10k to 1M
logged interactions; recall_memory p99 <= 10 ms with 100k episodes in the store.
"""

from __future__ import annotations

import argparse
import itertools
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tiermem.runtime.context import assemble_context
from tiermem.runtime.episode_search import search_episodes
from tiermem.runtime.levels import recent_items
from tiermem.runtime.memory import open_memory, record_turn
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings
from tiermem.tokens import count_tokens

RNG = random.Random(7)
SYLLABLES = ["ka", "lo", "mi", "ra", "to", "ne", "su", "vi", "da", "pe", "qu", "zo", "bi", "fa", "ge", "hu"]
# Three-syllable words: none is a prefix of another (prefix matching stays realistic).
VOCAB = sorted({"".join(RNG.choice(SYLLABLES) for _ in range(3)) for _ in range(6000)})
CUM_ZIPF = list(itertools.accumulate(1.0 / (i + 1) ** 0.9 for i in range(len(VOCAB))))
PEOPLE = [f"person{i}" for i in range(200)]
LEVELS = ["global"] * 6 + ["project"] * 3 + ["task"] * 1


def words(n: int) -> str:
    return " ".join(RNG.choices(VOCAB, cum_weights=CUM_ZIPF, k=n))


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn: Callable[[], Any], n: int, warmup: int = 50) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return {
        "n": n,
        "p50_ms": round(statistics.median(samples), 3),
        "p99_ms": round(pct(samples, 0.99), 3),
        "max_ms": round(max(samples), 3),
    }


def fresh(root: Path, name: str, fsync: str = "none") -> Settings:
    path = root / name
    shutil.rmtree(path, ignore_errors=True)
    return resolve_settings(data_dir=path, env={}, fsync=fsync)


def load_interactions(settings: Settings, total: int, agents: int) -> float:
    """Append `total` interactions round-robin over `agents` agents, then project; returns seconds."""
    started = time.perf_counter()
    chunk = 50_000
    with EventLog(settings) as log:
        for start in range(0, total, chunk):
            batch = []
            for i in range(start, min(total, start + chunk)):
                batch.append(
                    {
                        "type": "interaction",
                        "agent_id": f"agent{i % agents}",
                        "user": PEOPLE[i % len(PEOPLE)],
                        "memory_level": LEVELS[i % len(LEVELS)],
                        "user_message": f"message {i} about the weather and the plan",
                        "agent_response": f"reply {i}: noted, thanks",
                    }
                )
            log.append_many(batch)
    appended = time.perf_counter() - started
    info = project(settings)
    print(
        f"  loaded {total:,} interactions over {agents} agents: append {appended:.1f}s, "
        f"project {info.seconds:.1f}s",
        flush=True,
    )
    return time.perf_counter() - started


def add_agent_memory(settings: Settings, agent: str) -> None:
    """Identity, facts, a relationship and episodes for the agent whose context is measured."""
    with open_memory(settings, agent, agent_type="support", project_id="web") as m:
        m.set_identity("I am a patient support agent. " * 10)
        for i in range(40):
            m.store_fact(f"key{i}", words(8))
            m.add_knowledge(words(12), category="user", participant=PEOPLE[i % 5])
    with EventLog(settings) as log:
        log.append_many(
            [
                {
                    "type": "relationship_updated",
                    "agent_id": agent,
                    "participant": PEOPLE[0],
                    "summary": words(20),
                }
            ]
            + [episode_event(agent, i) for i in range(500)]
        )
    project(settings)


def episode_event(agent: str, i: int) -> dict[str, Any]:
    day = 1 + i % 28
    return {
        "type": "episode",
        "agent_id": agent,
        "name": words(3),
        "summary": words(25),
        "key_quotes": [{"text": words(8), "event_id": f"q{i}"}],
        "participants": RNG.sample(PEOPLE, 2),
        "start_ts": f"2026-03-{day:02d}T10:00:00Z",
        "end_ts": f"2026-03-{day:02d}T11:00:00Z",
        "importance": 1 + i % 10,
        "emotional_context": "calm",
        "source_event_ids": [f"src{agent}{i}"],
    }


def bench_context(root: Path, big: int, n: int) -> dict[str, Any]:
    print("context assembly vs logged interactions", flush=True)
    out: dict[str, Any] = {}
    for label, total in (("10k", 10_000), (f"{big // 1000}k", big)):
        settings = fresh(root, f"ctx{label}")
        agents = max(1, total // 10_000)  # 10k turns per agent, whatever the log size
        load_interactions(settings, total, agents)
        add_agent_memory(settings, "agent0")
        with open_memory(settings, "agent0", agent_type="support", project_id="web", user=PEOPLE[0]) as m:
            queries = [words(4) for _ in range(64)]
            qi = iter(range(10**9))
            out[label] = {
                "no_query": timed(lambda m=m: assemble_context(m, level="project"), n),
                "with_query": timed(
                    lambda m=m, qs=queries, qi=qi: assemble_context(m, query=qs[next(qi) % 64]), n
                ),
                "tokens": assemble_context(m, query=queries[0]).total_tokens,
            }
        print(f"  {label}: {out[label]}", flush=True)
        shutil.rmtree(settings.data_dir, ignore_errors=True)
    keys = list(out)
    for kind in ("no_query", "with_query"):
        out[f"ratio_p99_{kind}"] = round(out[keys[1]][kind]["p99_ms"] / out[keys[0]][kind]["p99_ms"], 2)
        out[f"ratio_p50_{kind}"] = round(out[keys[1]][kind]["p50_ms"] / out[keys[0]][kind]["p50_ms"], 2)
    return out


def simple_search(
    conn: Any, agent_id: str, query: str, participant: str | None = None, limit: int = 3
) -> list[Any]:
    """Reference: plain FTS5 OR-query ranked by BM25 (the runtime's first version of episode search)."""
    terms = list(dict.fromkeys(w for w in query.lower().split() if w.isalnum()))
    return _bm25_rows(conn, agent_id, terms, participant, limit)


def pruned_search(
    conn: Any, agent_id: str, query: str, participant: str | None = None, limit: int = 3
) -> list[Any]:
    """Reference: drop terms found in more than 2% of documents (fts5vocab) before BM25."""
    conn.execute(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.ep_vocab USING fts5vocab(main, episodes_fts, 'row')"
    )
    total = conn.execute("SELECT count(*) FROM episodes").fetchone()[0] or 1
    terms = list(dict.fromkeys(w for w in query.lower().split() if w.isalnum()))
    df = {}
    for t in terms:
        row = conn.execute("SELECT doc FROM temp.ep_vocab WHERE term = ?", (t,)).fetchone()
        df[t] = row[0] if row else 0
    keep = [t for t in terms if 0 < df[t] <= 0.02 * total] or sorted((t for t in terms if df[t]), key=df.get)[
        :1
    ]
    return _bm25_rows(conn, agent_id, keep, participant, limit)


def _bm25_rows(conn: Any, agent_id: str, terms: list[str], participant: str | None, limit: int) -> list[Any]:
    if not terms:
        return []
    part = ""
    params: list[Any] = [" OR ".join(f'"{t}"' for t in terms), agent_id]
    if participant:
        part = " AND EXISTS (SELECT 1 FROM json_each(e.participants) WHERE lower(value) = lower(?))"
        params.append(participant)
    return conn.execute(
        "SELECT e.episode_id, e.name, e.summary, e.key_quotes, bm25(episodes_fts) AS bm FROM episodes_fts"
        f" JOIN episodes e ON e.rowid = episodes_fts.rowid WHERE episodes_fts MATCH ? AND e.agent_id = ?{part}"
        " ORDER BY bm LIMIT ?",
        (*params, limit),
    ).fetchall()


SEARCH_IMPLS: dict[str, Callable[..., Any]] = {
    "current": search_episodes,
    "simple": simple_search,
    "pruned": pruned_search,
}


def bench_recall(root: Path, episodes: int, n: int, impl: str = "current") -> dict[str, Any]:
    print(f"recall_memory with {episodes:,} episodes, search implementation {impl!r}", flush=True)
    search = SEARCH_IMPLS[impl]
    settings = fresh(root, "recall")
    started = time.perf_counter()
    with EventLog(settings) as log:
        for start in range(0, episodes, 20_000):
            log.append_many([episode_event("npc", i) for i in range(start, min(episodes, start + 20_000))])
    info = project(settings)
    print(f"  loaded in {time.perf_counter() - started:.1f}s (project {info.seconds:.1f}s)", flush=True)
    queries = [words(3) for _ in range(256)]
    qi = iter(range(10**9))
    with open_memory(settings, "npc") as m:
        # Episodes belong to their participants: the current search reads as one of them.
        def who() -> Any:
            return m.principal.as_user(PEOPLE[next(qi) % 200]) if impl == "current" else "npc"

        search_only = timed(lambda: search(m.conn, who(), queries[next(qi) % 256]), n, warmup=5)
        with_participant = timed(
            lambda: search(m.conn, who(), queries[next(qi) % 256], PEOPLE[next(qi) % 200]), n, warmup=5
        )
        out: dict[str, Any] = {
            "episodes": episodes,
            "impl": impl,
            "search_episodes": search_only,
            "search_with_participant": with_participant,
        }
        if impl == "current":  # the whole tool: search + retrieval event (fsync none)
            out["recall_memory_tool"] = timed(
                lambda: call_tool(m, "recall_memory", {"query": queries[next(qi) % 256]}), n, warmup=5
            )
    print(f"  {out}", flush=True)
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    return out


def bench_record(root: Path, n: int) -> dict[str, Any]:
    print("record_turn", flush=True)
    out: dict[str, Any] = {}
    for fsync in ("always", "group", "none"):
        settings = fresh(root, f"rec{fsync}", fsync)
        with open_memory(settings, "bot", user="alice", session_id="s") as m:
            i = iter(range(10**9))
            out[f"fsync_{fsync}"] = timed(
                lambda m=m, i=i: record_turn(
                    m,
                    f"message {next(i)}",
                    "reply",
                    model="m",
                    usage={"input_tokens": 10, "output_tokens": 5},
                ),
                n,
            )
        shutil.rmtree(settings.data_dir, ignore_errors=True)
    print(f"  {out}", flush=True)
    return out


def bench_levels(root: Path) -> dict[str, Any]:
    print("memory levels: multi-task scenario", flush=True)
    settings = fresh(root, "levels")
    with open_memory(settings, "orchestrator", project_id="chart") as m:
        m.level = "global"
        record_turn(m, "Please build an organisation chart", "I will plan it as a project.")
        m.level = "project"
        for i in range(4):
            record_turn(m, f"plan step {i}", f"planned step {i}: {words(12)}")
        for task in range(3):
            record_turn(m, f"create task {task}", f"task {task} created and assigned to drone {task}")
            m.level = "task"
            for action in range(20):
                record_turn(
                    m,
                    f"move shape {action}",
                    f"moved shape {action} to x={action * 7} y={task * 40}: {words(10)}",
                )
            m.finish_task(f"I finished task {task}: part {task} of the chart is drawn.")
        for i in range(3):
            record_turn(m, f"review {i}", f"reviewed part {i}: {words(8)}")
        rows = m.conn.execute(
            "SELECT * FROM wm_items WHERE agent_id='orchestrator' AND kind='interaction' AND level != 'global'"
        ).fetchall()
        full_tokens = sum(count_tokens(f"{r['user_message']}\n{r['agent_response']}") for r in rows)
        seen = recent_items(m.conn, m.principal, "project", 10_000)
        seen_tokens = sum(count_tokens(i.render()) for i in seen)
    shutil.rmtree(settings.data_dir, ignore_errors=True)
    out = {
        "unfiltered_items": len(rows),
        "project_level_items": len(seen),
        "unfiltered_tokens": full_tokens,
        "project_level_tokens": seen_tokens,
        "token_saving": round(1 - seen_tokens / full_tokens, 3),
    }
    print(f"  {out}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["context", "recall", "record", "levels"])
    p.add_argument("--big", type=int, default=1_000_000, help="interactions in the big log (default 1M)")
    p.add_argument("--episodes", type=int, default=100_000)
    p.add_argument("--n", type=int, default=2000, help="timed calls per measurement")
    p.add_argument(
        "--recall-impl",
        choices=sorted(SEARCH_IMPLS),
        default="current",
        help="episode search to time: current (tiermem.runtime.episode_search) or a reference",
    )
    p.add_argument("--root", help="scratch directory (default: a temp dir, removed after)")
    args = p.parse_args(argv)
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="bench_runtime_"))
    results: dict[str, Any] = {}
    try:
        if args.only in (None, "levels"):
            results["levels"] = bench_levels(root)
        if args.only in (None, "record"):
            results["record_turn"] = bench_record(root, args.n)
        if args.only in (None, "recall"):
            results["recall"] = bench_recall(root, args.episodes, args.n, args.recall_impl)
        if args.only in (None, "context"):
            results["context"] = bench_context(root, args.big, args.n)
    finally:
        if not args.root:
            shutil.rmtree(root, ignore_errors=True)
    import orjson

    sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
