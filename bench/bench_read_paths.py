"""Read paths vs size: recall_memory, context with per-turn retrieval, a cold agent's first context.

    .venv/bin/python bench/bench_read_paths.py --root /tmp/read_paths            # everything
    .venv/bin/python bench/bench_read_paths.py --root /tmp/read_paths --only recall --sizes 10000,100000

Stores are built once under --root and reused by later runs (delete the folder
to rebuild). Every timing is given as wall time and as this process's CPU
time (the machine is shared: CPU time is what the read costs, wall time adds
the wait for a core), with the load average. Next to each path, the physical
reference measured in the same run: a raw SQLite FTS5 query (the query's words
OR-ed, BM25-ranked, top 60) on the same index.

Writes bench/results/read_paths.json and the curves bench/results/read_paths.png.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime.context import assemble_context
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem import Memory
from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings

RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn: Callable[[], Any], n: int, warmup: int = 10) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    wall, cpu = [], []
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu.append((time.process_time() - c0) * 1000)
        wall.append((time.perf_counter() - t0) * 1000)
    return {
        "n": n,
        "wall_p50_ms": round(br.pct(wall, 0.5), 3),
        "wall_p99_ms": round(br.pct(wall, 0.99), 3),
        "cpu_p50_ms": round(br.pct(cpu, 0.5), 3),
        "cpu_p99_ms": round(br.pct(cpu, 0.99), 3),
        "load": round(os.getloadavg()[0], 1),
    }


def settings_at(path: Path) -> Settings:
    return resolve_settings(data_dir=path, env={}, fsync="none")


def raw_fts(conn: Any, query: str) -> list[Any]:
    """The physical reference: the query's words OR-ed, ranked by FTS5's BM25, top 60."""
    words = [w for w in dict.fromkeys(query.lower().split()) if w.isalnum()]
    match = " OR ".join(f'"{w}"' for w in words)
    return conn.execute(
        "SELECT rowid, bm25(episodes_fts) AS r FROM episodes_fts WHERE episodes_fts MATCH ? ORDER BY r LIMIT 60",
        (match,),
    ).fetchall()


# ------------------------------------------------------------------ recall_memory


def recall_store(root: Path, episodes: int) -> Settings:
    settings = settings_at(root / f"recall{episodes}")
    if not (settings.data_dir / "hot").exists():
        with EventLog(settings) as log:
            for start in range(0, episodes, 20_000):
                log.append_many(
                    [br.episode_event("npc", i) for i in range(start, min(episodes, start + 20_000))]
                )
        project(settings)
    return settings


def bench_recall(root: Path, episodes: int, n: int) -> dict[str, Any]:
    settings = recall_store(root, episodes)
    queries = [br.words(3) for _ in range(256)]
    qi = iter(range(10**9))
    with open_memory(settings, "npc") as m:

        def tool() -> None:
            i = next(qi)
            m.user = br.PEOPLE[i % 200]  # the memory serves one of the episodes' participants
            call_tool(m, "recall_memory", {"query": queries[i % 256]})

        out = {
            "episodes": episodes,
            "raw_fts": timed(lambda: raw_fts(m.conn, queries[next(qi) % 256]), n),
            "recall_memory_tool": timed(tool, n),
        }
    out["ratio_p99_cpu"] = round(out["recall_memory_tool"]["cpu_p99_ms"] / out["raw_fts"]["cpu_p99_ms"], 1)
    print(f"  recall {episodes:,}: {out}", flush=True)
    return out


# ------------------------------------------------------------------ context with per-turn retrieval


def context_store(root: Path, turns: int) -> Settings:
    settings = settings_at(root / f"ctx{turns}")
    if not (settings.data_dir / "hot").exists():
        br.load_interactions(settings, turns, max(1, turns // 10_000))
        br.add_agent_memory(settings, "agent0")
    return settings


def bench_context(root: Path, turns: int, n: int) -> dict[str, Any]:
    settings = context_store(root, turns)
    queries = [br.words(4) for _ in range(64)]
    qi = iter(range(10**9))
    with open_memory(settings, "agent0", agent_type="support", project_id="web", user=br.PEOPLE[0]) as m:
        out = {
            "turns": turns,
            "raw_fts": timed(lambda: raw_fts(m.conn, queries[next(qi) % 64]), n),
            "no_query": timed(lambda: assemble_context(m, level="project"), n),
            "with_query": timed(lambda: assemble_context(m, query=queries[next(qi) % 64]), n),
        }
    out["ratio_p99_cpu"] = round(out["with_query"]["cpu_p99_ms"] / out["raw_fts"]["cpu_p99_ms"], 1)
    print(f"  context {turns:,}: {out}", flush=True)
    return out


# ------------------------------------------------------------------ a cold agent's first context

TURNS_PER_AGENT = 20
TAIL = 5_000  # turns other processes appended after the last projection


def agents_store(root: Path, agents: int) -> Settings:
    settings = settings_at(root / f"agents{agents}")
    if not (settings.data_dir / "hot").exists():
        br.load_interactions(settings, agents * TURNS_PER_AGENT, agents)
    return settings


def append_tail(settings: Settings, agents: int, k: int) -> None:
    with EventLog(settings) as log:
        log.append_many(
            [
                {
                    "type": "interaction",
                    "agent_id": f"agent{(k * 7919 + i) % agents}",
                    "user": br.PEOPLE[i % len(br.PEOPLE)],
                    "user_message": f"tail {k}.{i} about the weather",
                    "agent_response": "noted",
                }
                for i in range(TAIL)
            ]
        )


def bench_cold(root: Path, agents: int, rounds: int) -> dict[str, Any]:
    """First context of an agent never opened, with a fresh unprojected tail in the log each time."""
    settings = agents_store(root, agents)
    out: dict[str, Any] = {"agents": agents, "turns": agents * TURNS_PER_AGENT}
    for mode in ("background", "inline"):
        wall, cpu = [], []
        for k in range(rounds):
            append_tail(settings, agents, k + (0 if mode == "background" else rounds))
            agent = f"agent{(k * 104729) % agents}"
            t0, c0 = time.perf_counter(), time.process_time()
            with Memory.open(settings.data_dir, env={}, fsync="none", runtime={"catch_up": mode}) as mem:
                ctx = mem.agent(agent, user=br.PEOPLE[0]).context(user=br.PEOPLE[0], query="weather plan")
                cpu.append((time.process_time() - c0) * 1000)
                wall.append((time.perf_counter() - t0) * 1000)
                assert ctx.total_tokens > 0
                if mem.projector is not None:
                    mem.projector.wait()  # let the tail in before the next round (not timed)
        out[mode] = {
            "rounds": rounds,
            "wall_p50_ms": round(br.pct(wall, 0.5), 2),
            "wall_max_ms": round(max(wall), 2),
            "cpu_p50_ms": round(br.pct(cpu, 0.5), 2),
            "cpu_max_ms": round(max(cpu), 2),
            "load": round(os.getloadavg()[0], 1),
        }
    print(f"  cold agent, {agents:,} agents: {out}", flush=True)
    return out


# ------------------------------------------------------------------ long conversations of long turns

LONG_TURNS = 2000
TURNS_PER_EPISODE = 10


def long_store(root: Path) -> Settings:
    settings = settings_at(root / "long")
    if not (settings.data_dir / "hot").exists():
        with EventLog(settings) as log:
            log.append_many(
                [
                    {
                        "type": "interaction",
                        "agent_id": "talker",
                        "user": "ada",
                        "user_message": br.words(30),
                        "agent_response": br.words(700),  # about 1,000 tokens
                    }
                    for _ in range(LONG_TURNS)
                ]
            )
            log.append_many(
                [
                    {
                        **br.episode_event("talker", i),
                        "participants": ["ada"],
                        "key_quotes": [
                            {"text": br.words(700), "event_id": f"t{i}.{j}", "speaker": "Talker"}
                            for j in range(TURNS_PER_EPISODE)
                        ],
                    }
                    for i in range(LONG_TURNS // TURNS_PER_EPISODE)
                ]
            )
        project(settings)
    return settings


def bench_long(root: Path, n: int) -> dict[str, Any]:
    """A user with 2,000 turns whose replies run ~1,000 tokens (episodes of 10 such turns)."""
    settings = long_store(root)
    queries = [br.words(4) for _ in range(64)]
    qi = iter(range(10**9))
    with open_memory(settings, "talker", user="ada") as m:
        out = {
            "turns": LONG_TURNS,
            "raw_fts": timed(lambda: raw_fts(m.conn, queries[next(qi) % 64]), n, warmup=2),
            "recall_memory_tool": timed(
                lambda: call_tool(m, "recall_memory", {"query": queries[next(qi) % 64]}), n, warmup=2
            ),
            "context_with_query": timed(
                lambda: assemble_context(m, query=queries[next(qi) % 64]), n, warmup=2
            ),
        }
    print(f"  long conversation: {out}", flush=True)
    return out


# ------------------------------------------------------------------ curves


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    rec = results.get("recall", [])
    if rec:
        ax = axes[0]
        xs = [r["episodes"] for r in rec]
        for key, label in (("recall_memory_tool", "recall_memory (tool)"), ("raw_fts", "raw FTS5 query")):
            ax.plot(xs, [r[key]["cpu_p99_ms"] for r in rec], "o-", label=f"{label}, CPU p99")
            ax.plot(xs, [r[key]["cpu_p50_ms"] for r in rec], "x--", label=f"{label}, CPU p50")
        ax.axhline(10, color="red", lw=0.8, ls=":", label="target 10 ms")
        ax.set(
            xscale="log", xlabel="episodes in the store", ylabel="ms", title="recall_memory vs archive size"
        )
        ax.legend(fontsize=7)
    ctx = results.get("context", [])
    if ctx:
        ax = axes[1]
        xs = [r["turns"] for r in ctx]
        for key, label in (
            ("with_query", "context + retrieval"),
            ("no_query", "context"),
            ("raw_fts", "raw FTS5"),
        ):
            ax.plot(xs, [r[key]["cpu_p99_ms"] for r in ctx], "o-", label=f"{label}, CPU p99")
        ax.axhline(5, color="red", lw=0.8, ls=":", label="target 5 ms")
        ax.set(xscale="log", xlabel="logged turns", ylabel="ms", title="context assembly vs log size")
        ax.legend(fontsize=7)
    cold = results.get("cold", [])
    if cold:
        ax = axes[2]
        xs = [r["agents"] for r in cold]
        for mode in ("background", "inline"):
            ax.plot(xs, [r[mode]["wall_p50_ms"] for r in cold], "o-", label=f"catch_up={mode}, wall p50")
            ax.plot(xs, [r[mode]["cpu_p50_ms"] for r in cold], "x--", label=f"catch_up={mode}, CPU p50")
        ax.axhline(50, color="red", lw=0.8, ls=":", label="target 50 ms")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="agents in the store",
            ylabel="ms",
            title=f"cold agent's first context ({TAIL:,} unprojected turns)",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="where the stores are built (kept for the next run)")
    p.add_argument("--only", choices=["recall", "context", "cold", "long"])
    p.add_argument("--episodes", default="1000,10000,100000", help="recall: archive sizes")
    p.add_argument("--turns", default="10000,100000,1000000", help="context: logged turns")
    p.add_argument("--agents", default="100,1000,10000", help="cold agent: agents in the store")
    p.add_argument("--n", type=int, default=500, help="timed calls per measurement")
    p.add_argument("--rounds", type=int, default=5, help="cold agent: first contexts per mode")
    p.add_argument("--n-long", type=int, default=20, help="long conversation: timed calls (each is slow)")
    args = p.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    out_json = RESULTS / "read_paths.json"
    results: dict[str, Any] = orjson.loads(out_json.read_bytes()) if out_json.exists() else {}
    results["machine"] = {"nproc": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    RESULTS.mkdir(exist_ok=True)

    def save() -> None:  # after each part, so a long run keeps what it measured
        out_json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
        plot(results, RESULTS / "read_paths.png")

    if args.only in (None, "recall"):
        results["recall"] = [bench_recall(root, int(x), args.n) for x in args.episodes.split(",")]
        save()
    if args.only in (None, "context"):
        results["context"] = [bench_context(root, int(x), args.n) for x in args.turns.split(",")]
        save()
    if args.only in (None, "cold"):
        results["cold"] = [bench_cold(root, int(x), args.rounds) for x in args.agents.split(",")]
        save()
    if args.only in (None, "long"):
        results["long"] = bench_long(root, args.n_long)
        save()
    print(f"wrote {out_json} and {RESULTS / 'read_paths.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
