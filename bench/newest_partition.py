"""The windowed candidate try against an index of the newest episodes only: does a partition bound its walk?

    .venv/bin/python bench/newest_partition.py --root /tmp/curves10/read --episodes 100000,1000000 --newest 100000

When every word of a question is in more than 1,500 of the agent's
episodes, the episode search asks FTS5 for the newest 500 matches of an AND
of the words (`fts_terms.newest_window`). On a large archive FTS5 walks
nearly all of those words' postings to answer (descending order and a
LIMIT do not stop it early), so the try grows with the archive. This script
copies the newest `--newest` episodes of a store's index into a scratch
database (`ROOT/recallN/newest_partition.sqlite`, built once) and, for the
same questions as `profile_recall.py` whose try is windowed, times (CPU) the
newest-500 query on the whole index, on the partition, and the count of all
matches; and counts the tries the partition answers alone (at least 500
matches in it) against those that would go on to older episodes. The hot
store is not changed; prints one line per size.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime import episode_search
from tiermem.runtime.fts_terms import WINDOW_DOCS, candidate_matches, needs_window
from tiermem.runtime.memory import open_memory

from tiermem.settings import resolve_settings

NEWEST = "SELECT rowid FROM {t} WHERE {t} MATCH ? ORDER BY rowid DESC LIMIT {n}"


def build(hot: Path, part: Path, newest: int) -> None:
    if part.exists():
        return
    t0 = time.perf_counter()
    tmp = part.with_suffix(".part")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    db.execute("CREATE VIRTUAL TABLE newest USING fts5(name, summary, quotes, participants)")
    db.execute("ATTACH ? AS hot", [str(hot)])
    top = db.execute("SELECT max(rowid) FROM hot.episodes_fts").fetchone()[0]
    db.execute(
        "INSERT INTO newest(rowid, name, summary, quotes, participants)"
        " SELECT rowid, name, summary, quotes, participants FROM hot.episodes_fts WHERE rowid > ?",
        [top - newest],
    )
    db.commit()
    db.execute("DETACH hot")
    db.close()
    tmp.rename(part)
    print(f"  built {part} (the newest {newest:,}) in {time.perf_counter() - t0:.0f}s", flush=True)


def measure(root: Path, episodes: int, newest: int, n: int) -> None:
    settings = resolve_settings(data_dir=root / f"recall{episodes}", env={}, fsync="none")
    hot = next((settings.data_dir / "hot").glob("*.sqlite"))
    part = settings.data_dir / "newest_partition.sqlite"
    build(hot, part, newest)
    px = sqlite3.connect(f"file:{part}?mode=ro", uri=True)
    px.execute("PRAGMA cache_size=-65536")
    queries = [br.words(3) for _ in range(256)]  # the questions profile_recall.py asks
    with open_memory(settings, "npc") as m:
        conn = m.conn
        tries = []
        for i in range(n):
            terms = episode_search.query_terms(queries[i % 256])
            single: dict[str, str] = {}
            freq = episode_search._frequencies(conn, terms, single)
            if freq and needs_window(freq):
                tries.append(candidate_matches(freq, lambda t, s=single: episode_search._fts([t], s))[0])  # type: ignore[misc]
        if not tries:
            print(f"{episodes:,} episodes: no windowed try among {n} questions")
            return
        spent: dict[str, float] = {}
        alone = 0
        for rep in range(2):  # the second pass reported (pages where the first left them)
            for label, db, sql in (
                ("whole index, newest 500", conn, NEWEST.format(t="episodes_fts", n=WINDOW_DOCS)),
                (f"newest {newest:,} only, newest 500", px, NEWEST.format(t="newest", n=WINDOW_DOCS)),
                (
                    "whole index, every match counted",
                    conn,
                    "SELECT count(*) FROM episodes_fts WHERE episodes_fts MATCH ?",
                ),
            ):
                c0 = time.process_time()
                for t in tries:
                    got = db.execute(sql, [t]).fetchall()
                    if rep == 1 and db is px:
                        alone += len(got) >= WINDOW_DOCS
                spent[label] = (time.process_time() - c0) * 1000 / len(tries)
    shown = "; ".join(f"{k} {v:.2f}" for k, v in spent.items())
    print(
        f"{episodes:,} episodes, {len(tries)} windowed tries of {n} questions, load {os.getloadavg()[0]:.1f};"
        f" CPU ms per try: {shown}; the partition answers {alone} of {len(tries)} alone"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--root", required=True, help="the --root of bench_read_paths.py (bench_cost_curves: ROOT/read)"
    )
    ap.add_argument("--episodes", default="100000,1000000")
    ap.add_argument("--newest", type=int, default=100_000, help="episodes in the partition")
    ap.add_argument("--n", type=int, default=300, help="questions (only the windowed tries are timed)")
    args = ap.parse_args(argv)
    for e in (int(x) for x in args.episodes.split(",")):
        measure(Path(args.root), e, args.newest, args.n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
