"""Why `recall_memory` grows with the archive: its episode candidate query taken apart, at each size.

    .venv/bin/python bench/profile_recall_growth.py --root /tmp/curves10/read --episodes 1000,10000,100000
    .venv/bin/python bench/profile_recall_growth.py --root /tmp/read_paths_recall --episodes 100000 --n 500

Reads the stores `bench_read_paths.py --only recall` builds under --root
(`bench_cost_curves.py --root R` builds them under `R/read`), asks the
questions `profile_recall.py` asks in the same way (agent `npc`, the user
changing per call among the episodes' 200 participants), and, per call, times
with the process's CPU clock what the episode search does before scoring:

* the document counts of the question's terms and their per-agent IDF;
* each candidate try's walk of the index (`_walk`: the FTS5 query joined to
  the episode rows to check who may see them, BM25 ranks included, or, when
  every term is too common, the newest 500 matches of an AND of terms);
* the ranking a windowed-but-small try asks for afterwards, the chosen
  rows read by rowid, and the no-match fallback;
* the preparation of the candidates' text (kept per process).

Per try it also counts (untimed, after the call) how many documents the
try's MATCH has in the index and how many of them the reader may see. The
table says which part grows and by how much; the try mix says why. Prints
tables; nothing is written.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime import episode_search
from tiermem.runtime.episode_text import TEXTS
from tiermem.runtime.memory import open_memory
from tiermem.runtime.tools import call_tool

from tiermem.settings import resolve_settings

STAGES = (
    ("_frequencies", "term document counts"),
    ("_idf", "per-agent IDF"),
    ("_walk", "candidate try: index walk + visibility"),
    ("_rows_at", "chosen rows read by rowid"),
)

# What the candidate query is made of (the "query ms" of each kind of call).
CANDIDATE_PARTS = (
    "candidate try: index walk + visibility",
    "ranks asked after a small windowed try",
    "chosen rows read by rowid",
    "no-match fallback (newest 1,000)",
)


class Recorder:
    """Per call: CPU ms per stage, and the tries the episode search walked."""

    def __init__(self) -> None:
        self.calls: list[dict[str, float]] = []
        self.tries: list[list[dict[str, Any]]] = []

    def start(self) -> None:
        self.calls.append({})
        self.tries.append([])

    def add(self, label: str, ms: float) -> None:
        self.calls[-1][label] = self.calls[-1].get(label, 0.0) + ms


def _wrap(rec: Recorder, owner: Any, name: str, label: str, after: Callable[..., None] | None = None) -> None:
    fn: Callable[..., Any] = getattr(owner, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0 = time.process_time()
        out = fn(*args, **kwargs)
        rec.add(label, (time.process_time() - c0) * 1000)
        if after is not None:
            after(out, *args, **kwargs)
        return out

    setattr(owner, name, wrapper)


def _instrument(rec: Recorder) -> Callable[[], None]:
    """The timers in place; returns what puts the original functions back."""
    saved = [
        (owner, name, getattr(owner, name))
        for owner, name in [(episode_search, n) for n, _ in STAGES]
        + [(episode_search, "_ranked_rows"), (episode_search, "_kept"), (episode_search, "search_episodes")]
    ]
    _flag_walks(rec)
    for name, label in STAGES:
        after = None
        if name == "_walk":

            def after(
                out: Any,
                conn: Any,
                source: str,
                agent_id: str,
                where: str,
                params: list[Any],
                attempt: Any,
                windowed: bool,
            ) -> None:
                rec.tries[-1].append(
                    {
                        "source": source,
                        "match": attempt.full,  # with the agent's phrase where the search ANDs it
                        "attempt": attempt,
                        "windowed": windowed,
                        "visible": len(out.visible),
                        "newest": out.newest,
                        "where": where,
                        "params": params,
                    }
                )

        _wrap(rec, episode_search, name, label, after)
    _wrap(rec, TEXTS, "prepared", "candidates' text prepared (kept)")
    kept = episode_search._kept

    def timed_kept(conn: Any, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        if key[0] != "fallback":
            return kept(conn, key, compute)
        c0 = time.process_time()
        out = kept(conn, key, compute)
        rec.add("no-match fallback (newest 1,000)", (time.process_time() - c0) * 1000)
        return out

    episode_search._kept = timed_kept  # type: ignore[assignment]
    _wrap(rec, episode_search, "search_episodes", "search_episodes (all of it)")

    def restore() -> None:
        for owner, name, fn in saved:
            setattr(owner, name, fn)
        del TEXTS.prepared  # the instance attribute set by _wrap: the class's method again

    return restore


def _flag_walks(rec: Recorder) -> None:
    # BM25 ranks: inside a walk (an unwindowed try) they are part of it; after a small windowed try
    # (`_chosen`) they are a query of their own.
    ranked = episode_search._ranked_rows
    walk = episode_search._walk
    inside = [False]

    def walk_flagged(*args: Any, **kwargs: Any) -> Any:
        inside[0] = True
        try:
            return walk(*args, **kwargs)
        finally:
            inside[0] = False

    def ranked_timed(*args: Any, **kwargs: Any) -> Any:
        if inside[0]:
            return ranked(*args, **kwargs)
        c0 = time.process_time()
        out = ranked(*args, **kwargs)
        rec.add("ranks asked after a small windowed try", (time.process_time() - c0) * 1000)
        return out

    episode_search._walk = walk_flagged  # type: ignore[assignment]
    episode_search._ranked_rows = ranked_timed  # type: ignore[assignment]


def _pct(xs: list[float], q: float) -> float:
    return br.pct(xs, q) if xs else 0.0


def profile(
    root: Path, episodes: int, n: int, dissecting: bool = False, cache_mib: int | None = None
) -> dict[str, Any]:
    settings = resolve_settings(data_dir=root / f"recall{episodes}", env={}, fsync="none")
    if not (settings.data_dir / "hot").exists():
        raise SystemExit(f"no store at {settings.data_dir}: run bench_read_paths.py --only recall first")
    queries = [br.words(3) for _ in range(256)]  # the questions profile_recall.py asks
    rec = Recorder()
    total: list[float] = []
    with open_memory(settings, "npc") as m:
        if cache_mib is not None:  # SQLite's page cache of this connection (the store's default: 64 MiB)
            m.conn.execute(f"PRAGMA cache_size=-{cache_mib * 1024}")

        def call(i: int) -> None:
            m.user = br.PEOPLE[i % 200]
            call_tool(m, "recall_memory", {"query": queries[i % 256]})

        for i in range(10):
            call(i)
        restore = _instrument(rec)
        for i in range(10, n + 10):
            rec.start()
            c0 = time.process_time()
            call(i)
            total.append((time.process_time() - c0) * 1000)
        restore()  # what follows is neither timed per call nor counted in the calls' stages
        # Untimed: how many documents each try's MATCH has in the index (before who may see them).
        sizes: dict[str, int] = {}
        for tries in rec.tries:
            for t in tries:
                if t["match"] not in sizes:
                    sizes[t["match"]] = m.conn.execute(
                        "SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ?", [t["match"]]
                    ).fetchone()[0]
                t["matches"] = sizes[t["match"]]
        cut = (
            dissect(m.conn, [t for tries in rec.tries for t in tries if not t["windowed"]])
            if dissecting
            else {}
        )
    return {
        "episodes": episodes,
        "n": n,
        "total": total,
        "rec": rec,
        "load": os.getloadavg()[0],
        "cut": cut,
        "cache_mib": cache_mib,
    }


def dissect(conn: Any, tries: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """The unwindowed tries of the run asked again, piece by piece: (mean CPU ms per try, µs per document).

    Each variant passes over every try once, twice in a row (the second pass
    reported: the pages the first one read are where the calls left them).
    """
    ranks = ", ".join(episode_search._rank_sql(w) for w in episode_search.RANKINGS)
    variants: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        (
            "the index's postings alone (rowids)",
            lambda t: conn.execute(
                "SELECT rowid FROM episodes_fts WHERE episodes_fts MATCH ?", [t["match"]]
            ).fetchall(),
        ),
        (
            "postings + both BM25 ranks",
            lambda t: conn.execute(
                f"SELECT rowid, {ranks} FROM episodes_fts WHERE episodes_fts MATCH ?", [t["match"]]
            ).fetchall(),
        ),
        (
            "postings + each match's episode row (agent, owner)",
            lambda t: conn.execute(
                "SELECT f.rowid, e.agent_id, e.owner FROM episodes_fts f CROSS JOIN episodes e"
                " ON e.rowid = f.rowid WHERE episodes_fts MATCH ?",
                [t["match"]],
            ).fetchall(),
        ),
        (
            "postings + each match's narrow access row (agent, owner)",
            lambda t: conn.execute(
                "SELECT f.rowid, e.agent_id, e.owner FROM episodes_fts f CROSS JOIN episode_access e"
                " ON e.rowid = f.rowid WHERE episodes_fts MATCH ?",
                [t["match"]],
            ).fetchall(),
        ),
        (
            "the walk as the search makes it (join, visibility, ranks)",
            lambda t: episode_search._ranked_rows(conn, t["source"], t["where"], t["params"], t["attempt"]),
        ),
    ]
    docs = sum(t["matches"] for t in tries) or 1
    out: dict[str, tuple[float, float]] = {}
    for label, run in variants:
        for _ in range(2):
            c0 = time.process_time()
            for t in tries:
                run(t)
            spent = (time.process_time() - c0) * 1000
        out[label] = (spent / max(1, len(tries)), spent * 1000 / docs)
    out["(tries, documents per try)"] = (len(tries), docs / max(1, len(tries)))
    return out


def report(p: dict[str, Any]) -> None:
    rec: Recorder = p["rec"]
    n = p["n"]
    cache = f", page cache {p['cache_mib']} MiB" if p.get("cache_mib") else ""
    print(f"\n{p['episodes']:,} episodes, {n} calls{cache}, load {p['load']:.1f} (CPU ms per call)")
    print(f"{'stage':45s} {'p50':>7s} {'p99':>7s} {'mean':>7s} {'calls':>6s}")
    total = p["total"]
    print(
        f"{'the whole tool':45s} {_pct(total, 0.5):7.2f} {_pct(total, 0.99):7.2f} {sum(total) / n:7.2f} {n:6d}"
    )
    labels = list(dict.fromkeys(k for c in rec.calls for k in c))
    for label in labels:
        per = [c.get(label, 0.0) for c in rec.calls]
        hit = sum(1 for c in rec.calls if label in c)
        print(f"{label:45s} {_pct(per, 0.5):7.2f} {_pct(per, 0.99):7.2f} {sum(per) / n:7.2f} {hit:6d}")
    # The try mix: which kind of candidate query the calls made, and what each kind cost.
    kinds: dict[str, list[tuple[float, int, int]]] = {}
    for c, tries in zip(rec.calls, rec.tries, strict=True):
        if not tries:
            kind = "no usable term (fallback only)"
        elif tries[0]["windowed"]:
            kind = f"windowed: {len(tries)} AND/rarest tr{'y' if len(tries) == 1 else 'ies'}"
        else:
            kind = "one OR of the rarest terms (<= 1,500 docs)"
        if "no-match fallback (newest 1,000)" in c:
            kind += " + fallback"
        query_ms = sum(c.get(k, 0.0) for k in CANDIDATE_PARTS)
        walked = sum(t["matches"] if not t["windowed"] else min(t["matches"], 500) for t in tries)
        visible = sum(t["visible"] for t in tries)
        kinds.setdefault(kind, []).append((query_ms, walked, visible))
    print(
        f"{'kind of candidate query':52s} {'calls':>5s} {'query ms':>9s} {'docs walked':>11s} {'visible':>7s}"
    )
    for kind, rows in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        k = len(rows)
        print(
            f"{kind:52s} {k:5d} {sum(r[0] for r in rows) / k:9.2f} {sum(r[1] for r in rows) / k:11.0f}"
            f" {sum(r[2] for r in rows) / k:7.1f}"
        )
    if p["cut"] and p["cut"]["(tries, documents per try)"][0]:
        tries, per_try = p["cut"]["(tries, documents per try)"]
        print(f"the {tries:.0f} unwindowed tries asked again ({per_try:.0f} documents each on average):")
        print(f"{'variant':60s} {'ms/try':>7s} {'µs/doc':>7s}")
        for label, (ms, us) in p["cut"].items():
            if not label.startswith("("):
                print(f"{label:60s} {ms:7.2f} {us:7.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--root", required=True, help="the --root of bench_read_paths.py (bench_cost_curves: ROOT/read)"
    )
    ap.add_argument("--episodes", default="1000,10000,100000")
    ap.add_argument("--n", type=int, default=300, help="timed calls per size")
    ap.add_argument(
        "--cache-mib", type=int, help="SQLite page cache of the reading connection (default: the store's)"
    )
    ap.add_argument("--dissect", action="store_true", help="the unwindowed tries asked again piece by piece")
    args = ap.parse_args(argv)
    for e in (int(x) for x in args.episodes.split(",")):
        report(profile(Path(args.root), e, args.n, args.dissect, args.cache_mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
