"""The PostgreSQL hot store against the SQLite one: ranking agreement, context p99, sizes.

    .venv/bin/python bench/bench_pg_store.py                    # everything, 1M turns (long)
    .venv/bin/python bench/bench_pg_store.py --turns 200000     # a smaller log
    .venv/bin/python bench/bench_pg_store.py --only ranking     # one part: ranking | context

The server is pgserver's bundled PostgreSQL, started in a temporary
directory and stopped at the end (or `--url postgresql://...` for another).

* ranking: the same facts and episodes in both stores, the same queries;
  how much of SQLite's top k the Postgres search returns (overlap@k) and how
  often the first result is the same.
* context: `assemble_context` p50/p99 with and without the per-turn query,
  as bench_runtime.py measures it, with `--turns` interactions (10k per
  agent) projected into each backend; then the Postgres tables' and indexes'
  sizes, scaled per 1M turns.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_runtime import (
    PEOPLE,
    add_agent_memory,
    episode_event,
    fresh,
    load_interactions,
    timed,
    words,
)
from tiermem.runtime.context import assemble_context
from tiermem.runtime.memory import open_memory
from tiermem.runtime.pg_store import PostgresHotStore
from tiermem.runtime.sqlite_store import SQLiteHotStore
from tiermem.runtime.store import HotStore, ProjectionInfo
from tiermem.runtime.visibility import Principal

from tiermem.events import validate


class Server:
    """pgserver's PostgreSQL in a temporary directory, or an existing server by URL."""

    def __init__(self, url: str | None) -> None:
        self.root: Path | None = None
        self.server: Any = None
        if url is None:
            import pgserver  # type: ignore[import-untyped]

            self.root = Path(tempfile.mkdtemp(prefix="tiermem-pgbench-"))
            self.server = pgserver.get_server(self.root, cleanup_mode="stop")
            url = str(self.server.get_uri())
        self.admin_url = url

    def database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'")
        base, _, query = self.admin_url.partition("?")
        return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------- ranking agreement


def ranking_fixture(agents: int = 4, facts: int = 400, episodes: int = 600) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    n = 0

    def add(record: dict[str, Any]) -> None:
        nonlocal n
        ts = f"2026-03-{1 + n % 28:02d}T{n % 24:02d}:{n % 60:02d}:00.000Z"
        events.append(validate({**record, "ts": ts, "event_id": f"r{n:06d}"}))
        n += 1

    for a in range(agents):
        for i in range(episodes // agents):
            ep = episode_event(f"agent{a}", i)
            ep["source_event_ids"] = []
            ep["participants"] = []  # agent-level episodes: every read of the agent sees them
            add(ep)
        for i in range(facts // agents):
            add({"type": "fact_set", "agent_id": f"agent{a}", "key": f"k{i}", "value": words(10)})
    return events


def overlap(a: list[str], b: list[str], k: int) -> float:
    top = a[:k]
    return len(set(top) & set(b[:k])) / len(top) if top else 1.0


def bench_ranking(server: Server, queries: int = 200) -> dict[str, Any]:
    print("ranking agreement, SQLite FTS5/BM25 vs Postgres tsvector", flush=True)
    events = ranking_fixture()
    root = Path(tempfile.mkdtemp(prefix="tiermem-rank-"))
    stores: list[HotStore] = [
        SQLiteHotStore.connect(root / "hot.sqlite"),
        PostgresHotStore.connect(server.database("tm_rank")),
    ]
    for s in stores:
        s.apply_batch(events, {}, ProjectionInfo())
    now = datetime(2026, 4, 1, tzinfo=UTC)
    qs = [words(3) for _ in range(queries)]
    scores: dict[str, list[float]] = {k: [] for k in ("facts@5", "facts_top1", "episodes@3", "episodes_top1")}
    scores |= {"quotes@10": [], "quotes_top1": []}
    for i, q in enumerate(qs):
        who = Principal(f"agent{i % 4}")
        f = [[x.fact_id for x in s.search_facts(who, q, limit=5, now=now)] for s in stores]
        e = [[x["episode_id"] for x in s.search_episodes(who, q, limit=3)] for s in stores]
        r = [[line for line, ids in s.recall_lines(who, q) if ids][:10] for s in stores]
        for name, (lite, pg), k in (("facts", f, 5), ("episodes", e, 3), ("quotes", r, 10)):
            if lite:
                scores[f"{name}@{k}"].append(overlap(lite, pg, k))
                scores[f"{name}_top1"].append(float(lite[0] == (pg[0] if pg else None)))
    for s in stores:
        s.close()
    shutil.rmtree(root, ignore_errors=True)
    out = {k: round(sum(v) / len(v), 3) if v else None for k, v in scores.items()}
    out["queries"] = queries
    print(f"  {out}", flush=True)
    return out


# ---------------------------------------------------------------- context p99 and sizes


def measure_context(settings: Any, n: int) -> dict[str, Any]:
    with open_memory(settings, "agent0", agent_type="support", project_id="web", user=PEOPLE[0]) as m:
        queries = [words(4) for _ in range(64)]
        state = {"i": 0}

        def with_query() -> None:
            state["i"] += 1
            assemble_context(m, query=queries[state["i"] % 64])

        return {
            "no_query": timed(lambda: assemble_context(m, level="project"), n),
            "with_query": timed(with_query, n),
        }


def pg_sizes(url: str, turns: int) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT c.relname, c.reltuples::bigint, pg_table_size(c.oid), pg_indexes_size(c.oid)"
            " FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY pg_total_relation_size(c.oid) DESC"
        ).fetchall()
    scale = 1_000_000 / turns
    tables = {
        name: {
            "rows": int(rows_),
            "table_MB": round(t / 2**20, 1),
            "indexes_MB": round(i / 2**20, 1),
        }
        for name, rows_, t, i in rows
        if t + i > 64 * 1024
    }
    total = sum(t + i for _, _, t, i in rows)
    return {
        "tables": tables,
        "total_MB": round(total / 2**20, 1),
        "MB_per_1M_turns": round(total * scale / 2**20, 1),
        "bytes_per_turn": round(total / turns),
    }


def bench_context(server: Server, turns: int, n: int) -> dict[str, Any]:
    print(f"context assembly at {turns:,} turns: SQLite vs Postgres", flush=True)
    root = Path(tempfile.mkdtemp(prefix="tiermem-pgctx-"))
    out: dict[str, Any] = {"turns": turns}
    try:
        base = fresh(root, "ctx")
        agents = max(1, turns // 10_000)
        out["sqlite_load_s"] = round(load_interactions(base, turns, agents), 1)
        add_agent_memory(base, "agent0")
        out["sqlite"] = measure_context(base, n)
        out["sqlite_file_MB"] = round(base.hot_db.stat().st_size / 2**20, 1)
        print(f"  sqlite: {out['sqlite']}", flush=True)
        # The same log, projected into Postgres (a second data root shares the log by copy).
        url = server.database("tm_ctx")
        pg = dataclasses.replace(base, data_dir=root / "ctx-pg", hot_url=url)
        shutil.copytree(base.log_dir, pg.log_dir)
        from tiermem.runtime.projector import project

        started = time.perf_counter()
        info = project(pg)
        out["pg_project_s"] = round(time.perf_counter() - started, 1)
        print(f"  projected {info.applied:,} events into Postgres in {out['pg_project_s']}s", flush=True)
        with PostgresHotStore.connect(url) as store:
            store.conn.execute("VACUUM ANALYZE")
        out["postgres"] = measure_context(pg, n)
        print(f"  postgres: {out['postgres']}", flush=True)
        out["postgres_sizes"] = pg_sizes(url, turns)
        print(f"  sizes: {json.dumps(out['postgres_sizes'])}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=1_000_000)
    ap.add_argument("--n", type=int, default=1000, help="timed calls per measurement")
    ap.add_argument("--only", choices=["ranking", "context"])
    ap.add_argument("--url", help="an existing server (admin URL) instead of pgserver's")
    args = ap.parse_args()
    server = Server(args.url)
    results: dict[str, Any] = {"date": datetime.now(UTC).isoformat(timespec="seconds")}
    results["load_average"] = [round(x, 2) for x in os.getloadavg()]
    try:
        if args.only in (None, "ranking"):
            results["ranking"] = bench_ranking(server)
        if args.only in (None, "context"):
            results["context"] = bench_context(server, args.turns, args.n)
    finally:
        server.stop()
    results["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
