"""CPU of the recalls that follow a change of the long conversation's episodes, and a process's first ones.

    .venv/bin/python bench/recall_after_change.py --root /tmp/read_paths_long

Reads a copy of the store `bench_read_paths.py --only long` builds under --root
(the copy goes to --scratch, default <root>/after_change, and is removed at
the end), asks a process's first three questions, then twelve more, then, 8
times, three questions and a new long episode (10 turns of ~700 words,
projected as the compressor's would be) followed by the first question
after it, then 3 times a deleted episode (a plain `DELETE`, no erasure)
followed by the first question after it. Prints each figure (CPU ms) with
the load average; nothing is written.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_runtime as br
from tiermem.runtime.memory import AgentMemory, open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.tools import call_tool

from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings


def _ask(m: AgentMemory) -> float:
    c0 = time.process_time()
    call_tool(m, "recall_memory", {"query": br.words(4)})
    return (time.process_time() - c0) * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="the --root of bench_read_paths.py --only long")
    p.add_argument("--scratch", help="where the store is copied (default: <root>/after_change)")
    args = p.parse_args(argv)
    src = Path(args.root) / "long"
    if not (src / "hot").exists():
        p.error(f"no store at {src}: run bench_read_paths.py --root {args.root} --only long first")
    dst = Path(args.scratch) if args.scratch else Path(args.root) / "after_change"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    settings = resolve_settings(data_dir=dst, env={}, fsync="none")
    steady: list[float] = []
    inserted: list[float] = []
    deleted: list[float] = []
    try:
        with open_memory(settings, "talker", user="ada") as m:
            first = [_ask(m) for _ in range(3)]
            for _ in range(12):
                _ask(m)
            for k in range(8):
                steady += [_ask(m) for _ in range(3)]
                quotes = [
                    {"text": br.words(700), "event_id": f"n{k}.{j}", "speaker": "Talker"} for j in range(10)
                ]
                with EventLog(settings) as log:
                    log.append_many(
                        [
                            {
                                **br.episode_event("talker", 10_000 + k),
                                "participants": ["ada"],
                                "key_quotes": quotes,
                            }
                        ]
                    )
                project(settings)
                inserted.append(_ask(m))
            for _ in range(3):
                steady += [_ask(m) for _ in range(3)]
                with m.conn:
                    m.conn.execute("DELETE FROM episodes WHERE rowid = (SELECT max(rowid) FROM episodes)")
                deleted.append(_ask(m))
    finally:
        shutil.rmtree(dst, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.1f}; CPU ms per recall")
    print(f"a process's first three: {[round(x, 1) for x in first]}")
    print(f"steady p50 (the questions between changes): {sorted(steady)[len(steady) // 2]:.1f}")
    print(f"first after a new episode: {[round(x, 1) for x in inserted]}")
    print(f"first after a deleted episode: {[round(x, 1) for x in deleted]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
