"""What reading the kept copy of the episode index's counts costs on a costly store: CPU, RSS.

One line: `.venv/bin/python bench/fts_mirror_cost.py unique 1500 2000` (kind: `unique`, every word
met once, or `cjk`, text without spaces; episodes; words per episode). `--module PATH` reads the
copy with another `fts_mirror.py` (e.g. `git show main:runtime/fts_mirror.py > /tmp/m/fts_mirror_main.py`)
for an A/B. The store is built once under /tmp.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sqlite3
import time
from types import ModuleType

from tiermem.runtime.episode_index import agent_token


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def _module(path: str | None) -> ModuleType:
    if path is None:
        from tiermem.runtime import fts_mirror

        return fts_mirror
    spec = importlib.util.spec_from_file_location("fts_mirror_other", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=["unique", "cjk"])
    parser.add_argument("episodes", type=int)
    parser.add_argument("words", type=int)
    parser.add_argument("--module")
    args = parser.parse_args()
    fm = _module(args.module)
    path = f"/tmp/fts_mirror_cost_{args.kind}_{args.episodes}_{args.words}.db"
    if not os.path.exists(path):
        rng = random.Random(1)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(fm.DEFINITION)
        conn.execute("CREATE TABLE erasures (x)")
        conn.execute("BEGIN")
        for i in range(1, args.episodes + 1):
            if args.kind == "unique":
                text = " ".join(f"{rng.getrandbits(48):x}" for _ in range(args.words))
            else:
                text = "".join(
                    "".join(chr(0x4E00 + rng.randrange(20000)) for _ in range(8)) + "，"
                    for _ in range(args.words)
                )
            conn.execute(
                "INSERT INTO episodes_fts (rowid, name, summary, quotes, participants, agent)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [i, "name x", "summary y", text, "alice", agent_token("bench")],
            )
        conn.execute("COMMIT")
        conn.close()
    conn = sqlite3.connect(path, isolation_level=None)
    rss, cpu, wall = _rss_mb(), time.process_time(), time.perf_counter()
    found = fm.documents(conn, ("bench", 0, args.episodes, "0"), "name", False)
    print(
        f"{args.kind} episodes={args.episodes} words={args.words} kept={found is not None}"
        f" rss+={_rss_mb() - rss:.0f} MB cpu={time.process_time() - cpu:.2f} s"
        f" wall={time.perf_counter() - wall:.2f} s load={os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
