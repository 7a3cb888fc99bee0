"""A measured proposal: who may see an episode checked inside the full-text index, not on its row.

    .venv/bin/python bench/visibility_in_index.py --root /tmp/curves10/read --episodes 1000,10000,100000

The episode search's candidate try walks every document its MATCH finds (up
to 1,500, or the agent's newest 500 of an AND of common words) and joins each
to its episode row to check who may see it; a reader of the benchmark's
archives sees about 1 % of them. This script copies a store's episode index
into a scratch database (`ROOT/recallN/visibility_proto.sqlite`, built once)
with one more FTS5 column, `readers`: one token per (agent, owner) pair
(owner `public` for none). The same try then becomes one MATCH,
`(terms) AND readers : (agent+public OR agent+user)`, so FTS5 intersects the
postings and ranks only the visible documents. For the same questions and
readers as `profile_recall.py` it times (CPU) the try as the search makes it
today (`episode_search._walk`, not kept) against the proposed MATCH, and
checks that an unwindowed try finds the same visible documents. Nothing in
the store is changed; prints a table.

The ranks are not bit for bit today's: FTS5's BM25 counts a document's
length over all its columns, and the `readers` tokens lengthen every document
(the script reports how far the ranks move and whether the order of the
visible candidates changes). A windowed try changes meaning: today the
agent's newest 500 matches, then the visible ones among them (about 5);
with the column, the newest 500 visible matches.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime import episode_search
from tiermem.runtime.fts_terms import WINDOW_DOCS, candidate_matches, needs_window
from tiermem.runtime.hotstore import item_clause
from tiermem.runtime.memory import open_memory
from tiermem.runtime.tools import call_tool

from tiermem.settings import resolve_settings

PROTO = "visibility_proto2.sqlite"


def _token(value: str) -> str:
    """An owner or agent as one token of FTS5's default tokenizer (letters and digits only)."""
    return "".join(ch for ch in value.lower() if ch.isalnum())


def _reader(agent: str, owner: str) -> str:
    """One token per (agent, owner): a try's filter is then the postings of two tokens, not of the agent's
    whole archive (a real schema would hash the pair; the benchmark's names are letters and digits)."""
    return f"r{len(_token(agent))}x{_token(agent)}{_token(owner)}"


def build(hot: Path, proto: Path) -> None:
    """The episode index copied with a `readers` column: one token per (agent, owner), owner `public` for none."""
    if proto.exists():
        return
    t0 = time.perf_counter()
    tmp = proto.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    db.execute("CREATE VIRTUAL TABLE ep USING fts5(name, summary, quotes, participants, readers)")
    db.execute("ATTACH ? AS hot", [str(hot)])
    rows = db.execute(
        "SELECT f.rowid, f.name, f.summary, f.quotes, f.participants, e.agent_id, e.owner"
        " FROM hot.episodes_fts f JOIN hot.episodes e ON e.rowid = f.rowid"
    )
    insert = "INSERT INTO ep(rowid, name, summary, quotes, participants, readers) VALUES (?,?,?,?,?,?)"
    done = 0
    while chunk := rows.fetchmany(20_000):  # in chunks: a million episodes do not fit in a list at once
        batch = []
        for rowid, name, summary, quotes, participants, agent, owner in chunk:
            owners = [o for o in (owner or "").split("\x1f") if o] or ["public"]
            readers = " ".join(_reader(agent, o) for o in owners)
            batch.append((rowid, name, summary, quotes, participants, readers))
        db.executemany(insert, batch)
        done += len(batch)
    db.commit()
    db.execute("DETACH hot")
    db.close()
    tmp.rename(proto)
    print(f"  built {proto} ({done:,} documents) in {time.perf_counter() - t0:.0f}s", flush=True)


def _pct(xs: list[float], q: float) -> float:
    return br.pct(xs, q) if xs else 0.0


def compare(root: Path, episodes: int, n: int) -> None:
    settings = resolve_settings(data_dir=root / f"recall{episodes}", env={}, fsync="none")
    hot = next((settings.data_dir / "hot").glob("*.sqlite"))
    proto = settings.data_dir / PROTO
    build(hot, proto)
    px = sqlite3.connect(f"file:{proto}?mode=ro", uri=True)
    px.execute("PRAGMA cache_size=-65536")  # as the hot store's reading connection
    queries = [br.words(3) for _ in range(256)]  # the questions profile_recall.py asks
    now: dict[str, list[float]] = {}
    new: dict[str, list[float]] = {}
    same_sets = differ_sets = order_same = order_moved = 0
    worst_rel = 0.0
    ranks_equal = ranks_total = 0
    visible_now: dict[str, list[int]] = {}
    visible_new: dict[str, list[int]] = {}
    with open_memory(settings, "npc") as m:
        conn = m.conn
        for i in range(n + 10):
            user = br.PEOPLE[i % 200]
            who = m.principal.as_user(user)
            terms = episode_search.query_terms(queries[i % 256])
            single: dict[str, str] = {}
            freq = episode_search._frequencies(conn, terms, single)
            tries = candidate_matches(freq, lambda t, s=single: episode_search._fts([t], s))  # type: ignore[misc]
            if not tries:
                continue
            match, windowed = tries[0], needs_window(freq)
            where, params = item_clause(who, "e")
            readers = f'readers : ("{_reader(who.agent_id, "public")}" OR "{_reader(who.agent_id, user)}")'
            full = f"({match}) AND {readers}"
            c0 = time.process_time()
            source = episode_search._FROM_EPISODES  # the row join this prototype was measured against
            attempt = episode_search._Try(match, None)  # today's try without the agent's phrase
            found = episode_search._walk(conn, source, who.agent_id, where, params, attempt, windowed)
            a = (time.process_time() - c0) * 1000
            c0 = time.process_time()
            if windowed:
                got = px.execute(
                    f"SELECT rowid FROM ep WHERE ep MATCH ? ORDER BY rowid DESC LIMIT {WINDOW_DOCS}", [full]
                ).fetchall()
            else:
                got = px.execute(
                    "SELECT rowid, bm25(ep, 2.0, 1.0, 1.2, 0.5, 0.0), bm25(ep, 1.0, 1.0, 1.0, 1.0, 0.0)"
                    " FROM ep WHERE ep MATCH ?",
                    [full],
                ).fetchall()
            b = (time.process_time() - c0) * 1000
            if i < 10:
                continue  # warm-up
            kind = "windowed (AND, newest 500)" if windowed else "OR of the rarest terms"
            now.setdefault(kind, []).append(a)
            new.setdefault(kind, []).append(b)
            visible_now.setdefault(kind, []).append(len(found.visible))
            visible_new.setdefault(kind, []).append(len(got))
            if windowed or found.ranked is None:
                continue
            if {r[0] for r in found.ranked} == {r[0] for r in got}:
                same_sets += 1
            else:
                differ_sets += 1
            today = {r[0]: r[1:] for r in found.ranked}
            for r in got:
                for x, y in zip(today.get(r[0], ()), r[1:], strict=False):
                    ranks_total += 1
                    ranks_equal += x == y
                    if x:
                        worst_rel = max(worst_rel, abs(y - x) / abs(x))
            order_a = [r[0] for r in sorted(found.ranked, key=lambda r: (r[1], r[0]))]
            order_b = [r[0] for r in sorted(got, key=lambda r: (r[1], r[0]))]
            order_same, order_moved = (
                (order_same + 1, order_moved) if order_a == order_b else (order_same, order_moved + 1)
            )
    print(f"\n{episodes:,} episodes, {n} questions, load {os.getloadavg()[0]:.1f}; CPU ms per candidate try")
    print(
        f"{'kind of try':28s} {'tries':>5s} {'today p50/p99/mean':>22s} {'in the index p50/p99/mean':>27s} {'visible today/new':>18s}"
    )
    for kind in now:
        a, b = now[kind], new[kind]
        print(
            f"{kind:28s} {len(a):5d} {_pct(a, 0.5):7.2f}/{_pct(a, 0.99):6.2f}/{sum(a) / len(a):6.2f}"
            f"   {_pct(b, 0.5):9.2f}/{_pct(b, 0.99):6.2f}/{sum(b) / len(b):6.2f}"
            f"   {sum(visible_now[kind]) / len(a):8.1f}/{sum(visible_new[kind]) / len(a):.1f}"
        )
    print(
        f"unwindowed tries: same visible documents in {same_sets}, different in {differ_sets}; order by the"
        f" episode ranking the same in {order_same}, moved in {order_moved}; ranks bit for bit equal:"
        f" {ranks_equal} of {ranks_total} (largest relative difference {worst_rel:.1e})"
    )


def _walk_in_index(px: sqlite3.Connection, today: Callable[..., Any]) -> Callable[..., Any]:
    """`episode_search._walk` with an unwindowed try answered from the prototype index (the bench's
    reader: `item_clause`'s parameters are the agent, then the user and its member pattern)."""

    def walk(
        conn: Any, source: str, agent_id: str, where: str, params: list[Any], attempt: Any, windowed: bool
    ) -> Any:
        if windowed or "EXISTS" in where:  # the window keeps today's meaning; a participant filter too
            return today(conn, source, agent_id, where, params, attempt, windowed)
        user = params[1] if len(params) > 1 else None
        owners = [_reader(agent_id, "public")] + ([_reader(agent_id, user)] if user else [])
        readers = " OR ".join(f'"{o}"' for o in owners)
        ranked = [
            tuple(r)
            for r in px.execute(
                "SELECT rowid, bm25(ep, 2.0, 1.0, 1.2, 0.5, 0.0), bm25(ep, 1.0, 1.0, 1.0, 1.0, 0.0)"
                " FROM ep WHERE ep MATCH ?",
                [f"({attempt.match}) AND readers : ({readers})"],
            )
        ]
        return episode_search._Matches([r[0] for r in ranked], newest=False, ranked=ranked)

    return walk


def tool_ab(root: Path, episodes: int, n: int, rounds: int) -> None:
    """The whole `recall_memory` tool, today's walk against the walk in the index, alternating rounds
    on the same questions and readers; every answer of both compared."""
    settings = resolve_settings(data_dir=root / f"recall{episodes}", env={}, fsync="none")
    proto = settings.data_dir / PROTO
    build(next((settings.data_dir / "hot").glob("*.sqlite")), proto)
    px = sqlite3.connect(f"file:{proto}?mode=ro", uri=True)
    px.execute("PRAGMA cache_size=-65536")
    queries = [br.words(3) for _ in range(256)]
    today = episode_search._walk
    proposed = _walk_in_index(px, today)
    cpu: dict[str, list[list[float]]] = {"today": [], "in the index": []}
    answers: dict[str, list[bytes]] = {"today": [], "in the index": []}
    with open_memory(settings, "npc") as m:

        def call(i: int) -> bytes:
            m.user = br.PEOPLE[i % 200]
            return orjson.dumps(
                call_tool(m, "recall_memory", {"query": queries[i % 256]}), option=orjson.OPT_SORT_KEYS
            )

        for r in range(rounds):
            for side in ("today", "in the index") if r % 2 == 0 else ("in the index", "today"):
                episode_search._walk = today if side == "today" else proposed  # type: ignore[assignment]
                for i in range(10):
                    call(i)
                times = []
                for i in range(10, n + 10):
                    c0 = time.process_time()
                    out = call(i)
                    times.append((time.process_time() - c0) * 1000)
                    if r < 2:
                        answers[side].append(out)
                cpu[side].append(times)
    episode_search._walk = today  # type: ignore[assignment]
    same = sum(a == b for a, b in zip(answers["today"], answers["in the index"], strict=True))
    print(
        f"\n{episodes:,} episodes: the whole tool, {rounds} rounds x {n} calls per side, load {os.getloadavg()[0]:.1f}"
    )
    for side, runs in cpu.items():
        p50 = " / ".join(f"{_pct(t, 0.5):.2f}" for t in runs)
        p99 = " / ".join(f"{_pct(t, 0.99):.2f}" for t in runs)
        print(f"  {side:13s} CPU p50 {p50} ms; p99 {p99} ms")
    print(
        f"  answers identical in {same} of {len(answers['today'])} calls (the first two rounds of each side, question by question)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--root", required=True, help="the --root of bench_read_paths.py (bench_cost_curves: ROOT/read)"
    )
    ap.add_argument("--episodes", default="1000,10000,100000")
    ap.add_argument("--n", type=int, default=300, help="questions per size")
    ap.add_argument(
        "--tool", action="store_true", help="the whole tool, today's walk against the one in the index"
    )
    ap.add_argument("--rounds", type=int, default=4, help="--tool: alternating rounds per side")
    args = ap.parse_args(argv)
    for e in (int(x) for x in args.episodes.split(",")):
        if args.tool:
            tool_ab(Path(args.root), e, args.n, args.rounds)
        else:
            compare(Path(args.root), e, args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
