"""Does one agent's `recall_memory` grow with the number of OTHER agents in the store? (issue 18)

    nice -n 10 .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents --build-only   # stores first
    .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents                          # every size
    .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents --agents 1,1000 --n 20 --no-proto
    .venv/bin/python bench/bench_recall_agents.py --root /tmp/s11/agents --n 40 --tool-ab 2       # the tool, A/B

Stores of A agents x 100 episodes each (`--agents`, default 1,100,1000,10000: the one-agent
control, then 10k, 100k and 1M episodes), built under --root once and reused. The episodes are
`bench_runtime.episode_event`'s (names, summaries and quotes from the same Zipf vocabulary, so a
common word is common across agents), dealt round-robin over the agents (agent `i % A`, so every
agent's episodes are spread over the whole range of rowids, as in a store many agents write at
once), each agent with its own 10 users as participants.

For 20 fixed agents (the same names at every size), each serving one of its own users, the tool
is asked `--n` questions per agent: half made like `profile_recall.py`'s (3 words of the
vocabulary), half of 3 words of one episode the user may see (found first? found at all?). Per
size: the tool's CPU and wall p50/p99, the episode search's candidate query (`episode_search._candidate_rows`), and per
candidate try walked (`episode_search._walk`): windowed or not, and the documents its MATCH has
in the whole index against in the agent's own episodes (counted afterwards, not timed); and the
calls where no try found a visible episode (the search fell back to the most important recent
ones), with how many of them had a visible episode holding one of the question's words.

With the prototype (default; `--no-proto` to skip): the index copied into a scratch database
(`ROOT/agentsA/agent_token_proto.sqlite`, built once; the hot store is only read) with one more
FTS5 column, `agent`, holding one token per episode (`a` + hex of a hash of its agent). Every try
recorded above is then asked again, best of 3 each: today's walk on the hot store, today's query
on the copy (the control: the same index, no token) and `(terms) AND agent : "<token>"` on the
copy (the visibility join on the hot store's `episode_access`, attached read-only); the rows are
compared (the same rowids in the same order for a windowed try, the same set for an unwindowed
one) and the BM25 ranks. The generator's documents are all of one length, so the extra token moves
no rank there; for the stores of `--rank-sizes`, two more copies with the summaries cut to 5-25
words (without and with the token) say how many unwindowed tries change their candidate order.

With `--tool-ab ROUNDS`, instead: the whole tool with `_walk` and `_ranked_rows` answered from
the copy with the token, alternating with today's, and every answer of the first round compared.

Prints a table and writes bench/results/recall_agents.json (`--tool-ab`: recall_agents_tool_ab.json).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sqlite3
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime import episode_search, quote_search
from tiermem.runtime.hotstore import keeps_episode_access
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings

RESULTS = Path(__file__).resolve().parent / "results"
PER_AGENT = 100
USERS_PER_AGENT = 10
MEASURED_AGENTS = 20
PROTO = "agent_token_proto.sqlite"
WEIGHTS = "2.0, 1.0, 1.2, 0.5, 0.0"  # episode_search.COLUMN_WEIGHTS, the agent column weighs nothing
PLAIN = "1.0, 1.0, 1.0, 1.0, 0.0"


def users_of(agent: str) -> list[str]:
    return [f"{agent}u{j}" for j in range(USERS_PER_AGENT)]


def agent_token(agent: str) -> str:
    """One token of FTS5's default tokenizer per agent, whatever its name."""
    return "a" + hashlib.blake2b(agent.encode(), digest_size=8).hexdigest()


def store(root: Path, agents: int) -> Settings:
    settings = resolve_settings(data_dir=root / f"agents{agents}", env={}, fsync="none")
    if (settings.data_dir / "hot").exists():
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
    walk = episode_search._walk

    def recording(
        conn: Any, source: str, agent_id: str, where: str, params: list[Any], full: str, windowed: bool
    ) -> Any:
        found = walk(conn, source, agent_id, where, params, full, windowed)
        tries.append(
            {
                "agent": agent_id,
                "source": source,
                "where": where,
                "params": list(params),
                "full": full,
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
            for _, q, _ in qs[n:]:  # warm-up: the connection and its caches, on questions not timed
                call_tool(m, "recall_memory", {"query": q})
            qs = qs[:n]
            episode_search._walk = recording
            cand_one: list[float] = []
            qcand_one: list[float] = []
            undo = [
                _wrap(episode_search, "_candidate_rows", cand_one),
                _wrap(quote_search, "_candidate_rows", qcand_one),
            ]
            try:
                for kind, q, target in qs:
                    before = len(tries)
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
                    if not any(t["visible"] for t in tries[before:]):
                        fell_back[kind] = fell_back.get(kind, 0) + 1
                        fallbacks.append((agent, user, q))
                    if target:
                        found_ids = [mem["episode_id"] for mem in answer.get("memories", [])]
                        hits["first"] += bool(found_ids) and found_ids[0] == target
                        hits["any"] += target in found_ids
                        hits["asked"] += 1
            finally:
                episode_search._walk = walk
                for u in undo:
                    u()
        loads.append(os.getloadavg()[0])
    return {
        "calls": len(cpu),
        "tool_cpu_p50": pct(cpu, 0.5),
        "tool_cpu_p99": pct(cpu, 0.99),
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


def build_proto(hot: Path, proto: Path) -> None:
    """The episode index copied with an `agent` column: one token per episode, from its agent."""
    if proto.exists():
        return
    t0 = time.perf_counter()
    tmp = proto.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    db.execute("CREATE VIRTUAL TABLE ep USING fts5(name, summary, quotes, participants, agent)")
    db.execute("ATTACH ? AS hot", [f"file:{hot}?mode=ro"])
    rows = db.execute(
        "SELECT f.rowid, f.name, f.summary, f.quotes, f.participants, e.agent_id"
        " FROM hot.episodes_fts f JOIN hot.episodes e ON e.rowid = f.rowid ORDER BY f.rowid"
    )
    insert = "INSERT INTO ep(rowid, name, summary, quotes, participants, agent) VALUES (?,?,?,?,?,?)"
    while chunk := rows.fetchmany(20_000):
        db.executemany(insert, [(*r[:5], agent_token(r[5])) for r in chunk])
    db.commit()
    db.execute("INSERT INTO ep(ep) VALUES ('optimize')")  # as merged as the hot index may be: compare fairly
    db.commit()
    db.execute("DETACH hot")
    db.close()
    tmp.rename(proto)
    print(f"  built {proto} in {time.perf_counter() - t0:.0f}s", flush=True)


def _rows(db: sqlite3.Connection, sql: str, args: list[Any]) -> list[Any]:
    return db.execute(sql, args).fetchall()


def best_of(fn: Callable[[], Any], k: int = 3) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(k):
        c0 = time.process_time()
        out = fn()
        best = min(best, (time.process_time() - c0) * 1000)
    return best, out


def prototype(settings: Settings, tries: list[dict[str, Any]]) -> dict[str, Any]:
    """Every recorded try: today's walk against the agent token's MATCH on the copy; rows compared."""
    hot = next((settings.data_dir / "hot").glob("*.sqlite"))
    proto = settings.data_dir / PROTO
    build_proto(hot, proto)
    px = sqlite3.connect(f"file:{proto}?mode=ro", uri=True)
    px.execute("PRAGMA cache_size=-65536")  # as the hot store's reading connection
    px.execute("ATTACH ? AS hot", [f"file:{hot}?mode=ro"])
    today_ms, proto_ms, copy_ms = [], [], []
    same_rows = differ_rows = order_same = order_moved = ranks_equal = ranks_total = 0
    worst_rel = 0.0
    with open_memory(settings, tries[0]["agent"] if tries else "agent0") as m:
        conn = m.conn
        access = "hot.episode_access" if keeps_episode_access(conn) else "hot.episodes"
        done = set()
        for t in tries:
            key = (t["full"], t["agent"], t["where"], tuple(t["params"]))
            if key in done:
                continue
            done.add(key)
            where, params, full, windowed = t["where"], t["params"], t["full"], t["windowed"]
            source = t["source"]
            a, found = best_of(
                partial(episode_search._walk, conn, source, t["agent"], where, params, full, windowed)
            )
            if "EXISTS" in where:  # a participant filter needs the episode row (none asked here)
                continue
            match = f'({full}) AND agent : "{agent_token(t["agent"])}"'
            frm = f"FROM ep CROSS JOIN {access} e ON e.rowid = ep.rowid WHERE ep MATCH ?"
            if windowed:
                window = episode_search.fts_terms.WINDOW_DOCS
                sql = f"SELECT ep.rowid, {where} {frm} ORDER BY ep.rowid DESC LIMIT {window}"
                b, got = best_of(partial(_rows, px, sql, [*params, match]))
                # Control: today's query itself on the copy (the same index layout, no token).
                ctl = (
                    f"SELECT ep.rowid, {where} {frm} AND e.agent_id = ? ORDER BY ep.rowid DESC LIMIT {window}"
                )
                c, _ = best_of(partial(_rows, px, ctl, [*params, full, t["agent"]]))
                visible = [r[0] for r in got if r[1]]
                same = visible == found.visible
            else:
                sql = f"SELECT ep.rowid, bm25(ep, {WEIGHTS}), bm25(ep, {PLAIN}) {frm} AND {where}"
                b, got = best_of(partial(_rows, px, sql, [match, *params]))
                c, _ = best_of(partial(_rows, px, sql, [full, *params]))
                today = found.ranked or []
                same = {r[0] for r in today} == {r[0] for r in got}
                ranks = {r[0]: r[1:] for r in today}
                for r in got:
                    for x, y in zip(ranks.get(r[0], ()), r[1:], strict=False):
                        ranks_total += 1
                        ranks_equal += x == y
                        if x:
                            worst_rel = max(worst_rel, abs(y - x) / abs(x))
                # The candidates as the search takes them: best episode rank first, ties to the older.
                cut = episode_search.CANDIDATES
                order_a = [r[0] for r in sorted(today, key=lambda r: (r[1], r[0]))][:cut]
                order_b = [r[0] for r in sorted(got, key=lambda r: (r[1], r[0]))][:cut]
                if order_a == order_b:
                    order_same += 1
                else:
                    order_moved += 1
            same_rows += same
            differ_rows += not same
            today_ms.append(a)
            proto_ms.append(b)
            copy_ms.append(c)
    px.close()
    return {
        "distinct_tries": len(today_ms),
        "today_try_p50": pct(today_ms, 0.5),
        "today_try_p99": pct(today_ms, 0.99),
        "today_try_mean": round(sum(today_ms) / len(today_ms), 3) if today_ms else 0,
        "copy_try_p50": pct(copy_ms, 0.5),
        "copy_try_p99": pct(copy_ms, 0.99),
        "copy_try_mean": round(sum(copy_ms) / len(copy_ms), 3) if copy_ms else 0,
        "proto_try_p50": pct(proto_ms, 0.5),
        "proto_try_p99": pct(proto_ms, 0.99),
        "proto_try_mean": round(sum(proto_ms) / len(proto_ms), 3) if proto_ms else 0,
        "rows_same": same_rows,
        "rows_differ": differ_rows,
        "unwindowed_order_same": order_same,
        "unwindowed_order_moved": order_moved,
        "ranks_bit_equal": ranks_equal,
        "ranks_total": ranks_total,
        "ranks_worst_rel": float(f"{worst_rel:.2e}"),
    }


RANKS = "agent_token_ranks.sqlite"


def _cut(rowid: int, summary: str) -> str:
    """The summary cut to 5-25 words (by rowid): the generator's documents are all one length, and
    with every document as long as the average an extra token moves no rank."""
    words = summary.split()
    return " ".join(words[: 5 + (rowid * 2654435761) % 21])


def build_ranks(hot: Path, path: Path) -> None:
    """Two scratch copies of the index with documents of varied length: `v` as today, `vt` with the token."""
    if path.exists():
        return
    t0 = time.perf_counter()
    tmp = path.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    db.execute("CREATE VIRTUAL TABLE v USING fts5(name, summary, quotes, participants)")
    db.execute("CREATE VIRTUAL TABLE vt USING fts5(name, summary, quotes, participants, agent)")
    db.execute("ATTACH ? AS hot", [f"file:{hot}?mode=ro"])
    rows = db.execute(
        "SELECT f.rowid, f.name, f.summary, f.quotes, f.participants, e.agent_id"
        " FROM hot.episodes_fts f JOIN hot.episodes e ON e.rowid = f.rowid ORDER BY f.rowid"
    )
    while chunk := rows.fetchmany(20_000):
        cut = [(r[0], r[1], _cut(r[0], r[2]), r[3], r[4], r[5]) for r in chunk]
        db.executemany(
            "INSERT INTO v(rowid, name, summary, quotes, participants) VALUES (?,?,?,?,?)",
            [r[:5] for r in cut],
        )
        db.executemany(
            "INSERT INTO vt(rowid, name, summary, quotes, participants, agent) VALUES (?,?,?,?,?,?)",
            [(*r[:5], agent_token(r[5])) for r in cut],
        )
    db.commit()
    db.execute("DETACH hot")
    db.close()
    tmp.rename(path)
    print(f"  built {path} in {time.perf_counter() - t0:.0f}s", flush=True)


def rank_check(settings: Settings, tries: list[dict[str, Any]]) -> dict[str, Any]:
    """Unwindowed tries on documents of varied length: ranks and candidate order with and without the token."""
    hot = next((settings.data_dir / "hot").glob("*.sqlite"))
    path = settings.data_dir / RANKS
    build_ranks(hot, path)
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.execute("ATTACH ? AS hot", [f"file:{hot}?mode=ro"])
    equal = total = same = moved = top3_moved = 0
    worst = 0.0
    done = set()
    for t in tries:
        key = (t["full"], t["agent"], t["where"], tuple(t["params"]))
        if t["windowed"] or key in done or "EXISTS" in t["where"]:
            continue
        done.add(key)
        where, params = t["where"], t["params"]
        frm = "CROSS JOIN hot.episode_access e ON e.rowid = {0}.rowid WHERE {0} MATCH ? AND " + where
        a = db.execute(
            f"SELECT v.rowid, bm25(v, 2.0, 1.0, 1.2, 0.5), bm25(v) FROM v {frm.format('v')}",
            [t["full"], *params],
        ).fetchall()
        match = f'({t["full"]}) AND agent : "{agent_token(t["agent"])}"'
        b = db.execute(
            f"SELECT vt.rowid, bm25(vt, {WEIGHTS}), bm25(vt, {PLAIN}) FROM vt {frm.format('vt')}",
            [match, *params],
        ).fetchall()
        ranks = {r[0]: r[1:] for r in a}
        for r in b:
            for x, y in zip(ranks.get(r[0], ()), r[1:], strict=False):
                total += 1
                equal += x == y
                if x:
                    worst = max(worst, abs(y - x) / abs(x))
        cut = episode_search.CANDIDATES
        oa = [r[0] for r in sorted(a, key=lambda r: (r[1], r[0]))]
        ob = [r[0] for r in sorted(b, key=lambda r: (r[1], r[0]))]
        if oa[:cut] == ob[:cut]:
            same += 1
        else:
            moved += 1
        top3_moved += oa[:3] != ob[:3]
    db.close()
    return {
        "unwindowed_tries": same + moved,
        "order_same": same,
        "order_moved": moved,
        "top3_moved": top3_moved,
        "ranks_bit_equal": equal,
        "ranks_total": total,
        "ranks_worst_rel": float(f"{worst:.2e}"),
    }


def token_walks(settings: Settings) -> tuple[Callable[..., Any], Callable[..., Any], sqlite3.Connection]:
    """`episode_search._walk` and `_ranked_rows` answered from the prototype copy with the agent token
    (the visibility join on the hot store's `episode_access`, attached read-only)."""
    hot = next((settings.data_dir / "hot").glob("*.sqlite"))
    px = sqlite3.connect(f"file:{settings.data_dir / PROTO}?mode=ro", uri=True)
    px.execute("PRAGMA cache_size=-65536")
    px.execute("ATTACH ? AS hot", [f"file:{hot}?mode=ro"])
    frm = "FROM ep CROSS JOIN hot.episode_access e ON e.rowid = ep.rowid WHERE ep MATCH ?"

    def token_match(full: str, agent_id: str) -> str:
        return f'({full}) AND agent : "{agent_token(agent_id)}"'

    def ranked(conn: Any, source: str, where: str, params: list[Any], full: str) -> list[tuple[Any, ...]]:
        sql = f"SELECT ep.rowid, bm25(ep, {WEIGHTS}), bm25(ep, {PLAIN}) {frm} AND {where}"
        return [tuple(r) for r in px.execute(sql, [token_match(full, params[0]), *params])]

    def walk(
        conn: Any, source: str, agent_id: str, where: str, params: list[Any], full: str, windowed: bool
    ) -> Any:
        if "EXISTS" in where:  # a participant filter needs the episode row (none asked here)
            return today_walk(conn, source, agent_id, where, params, full, windowed)
        if windowed:
            window = episode_search.fts_terms.WINDOW_DOCS
            sql = f"SELECT ep.rowid, {where} {frm} ORDER BY ep.rowid DESC LIMIT {window}"
            newest = px.execute(sql, [*params, token_match(full, agent_id)]).fetchall()
            return episode_search._Matches([r[0] for r in newest if r[1]], newest=len(newest) >= window)
        rows = ranked(conn, source, where, params, full)
        return episode_search._Matches([r[0] for r in rows], newest=False, ranked=rows)

    today_walk = episode_search._walk
    return walk, ranked, px


def tool_ab(settings: Settings, agents: int, n: int, rounds: int) -> dict[str, Any]:
    """The whole tool, today's walk against the agent token's, alternating rounds; answers compared."""
    walk, ranked, px = token_walks(settings)
    today = (episode_search._walk, episode_search._ranked_rows)
    out: dict[str, list[dict[str, Any]]] = {"today": [], "token": []}
    for r in range(rounds):
        for side in ("today", "token") if r % 2 == 0 else ("token", "today"):
            if side == "token":
                episode_search._walk, episode_search._ranked_rows = walk, ranked
            try:
                out[side].append(run_tool(settings, agents, n))
            finally:
                episode_search._walk, episode_search._ranked_rows = today
    px.close()
    same = sum(a == b for a, b in zip(out["today"][0]["_answers"], out["token"][0]["_answers"], strict=True))
    keys = ("tool_cpu_p50", "tool_cpu_p99", "tool_cpu_mean", "candidate_cpu_p50", "candidate_cpu_p99", "load")
    return {
        "rounds": rounds,
        **{side: [{k: run[k] for k in keys} for run in runs] for side, runs in out.items()},
        "answers_identical": same,
        "answers": len(out["today"][0]["_answers"]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="where the stores are built (kept for the next run)")
    p.add_argument("--agents", default="1,100,1000,10000", help="agents per store (x 100 episodes each)")
    p.add_argument("--n", type=int, default=40, help="questions per measured agent (20 agents)")
    p.add_argument("--build-only", action="store_true", help="build the stores (and prototypes) and stop")
    p.add_argument("--no-proto", action="store_true", help="skip the agent-token prototype")
    p.add_argument(
        "--rank-sizes",
        default="1,100,1000",
        help="agents of the stores whose ranks are checked on varied lengths",
    )
    p.add_argument(
        "--tool-ab",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: the whole tool, today's walk against the agent token's, ROUNDS alternating rounds",
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
            settings = store(root, a)
            if not args.no_proto:
                build_proto(next((settings.data_dir / "hot").glob("*.sqlite")), settings.data_dir / PROTO)
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
        if not args.no_proto:
            row["proto"] = prototype(settings, tries)
            if str(a) in args.rank_sizes.split(","):
                row["ranks_varied"] = rank_check(settings, tries)
        results["sizes"].append(row)
        print(orjson.dumps(row).decode(), flush=True)
    Path(args.out).write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    print(
        f"\n{'episodes':>9s} {'tool p50/p99':>14s} {'cand p50/p99':>14s} {'windowed':>8s} "
        f"{'docs whole/own':>16s} {'try today/proto (mean)':>24s}"
    )
    for r in results["sizes"]:
        pr = r.get("proto", {})
        print(
            f"{r['episodes']:9,d} {r['tool_cpu_p50']:6.2f}/{r['tool_cpu_p99']:6.2f} "
            f"{r['candidate_cpu_p50']:6.2f}/{r['candidate_cpu_p99']:6.2f} {r['windowed_share']:8.2f} "
            f"{r['docs_whole_mean']:9.0f}/{r['docs_own_mean']:6.1f} "
            f"{pr.get('today_try_mean', 0):10.3f}/{pr.get('proto_try_mean', 0):.3f}"
        )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
