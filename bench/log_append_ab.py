"""Durable appends before/after in one run: a base commit and the working tree, interleaved.

    .venv/bin/python bench/log_append_ab.py --base main --rounds 3 [--n 2000] [--only-one]

Each round measures the disk's references first (raw 400 B append + fsync one at a
time; 500 records per fsync), then runs `bench_log_append.py --part` once with the
base commit's packages and once with this tree's (the order alternates by round),
each in its own process: one caller with fsync each, 8 one-record callers as
threads and as processes (group commit), and the CPU of one one-record group with
the fsync left out (`--only-one`: the one caller's rows alone, in quicker rounds, to
catch the moments this shared disk flushes fast). The base is exported with `git archive` and mapped the way the
editable install maps this tree (see `read_paths_ab.export_base`); both sides run
this tree's benchmark code. Prints one line per side and round with the ratios to
the round's references, and writes bench/results/log_append_ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_log_reference import (
    batched_fsync_rate,
    ceiling_8,
    compiled_group,
    flush_floor,
    fsync_rate,
    print_compiled_group,
    print_floor,
)
from read_paths_ab import export_base

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data"


def build_extensions(package: Path) -> list[str]:
    """Build the base's compiled modules (`git archive` has only their sources) beside its
    package, as the editable install does for this tree: without them the base would run its
    Python fallbacks and the comparison would credit this tree with the compiled code too."""
    tree = package.parent / "tree"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        check=True,
        capture_output=True,
    )
    built = []
    for so in sorted((tree / "tiermem").glob("*.so")):
        (package / "tiermem" / so.name).write_bytes(so.read_bytes())
        built.append(so.name.split(".")[0])
    return built


def run_side(package: Path | None, n: int, only_one: bool = False) -> dict[str, Any]:
    env = dict(os.environ)
    cmd = [
        sys.executable,
        str(HERE / "bench_log_append.py"),
        "--part",
        str(n),
        *(["--only-one"] if only_one else []),
    ]
    if package is not None:
        # No site processing: the editable install's finder would map tiermem to this tree.
        site = next(p for p in sys.path if p.endswith("site-packages"))
        env["PYTHONPATH"] = f"{package}:{site}:{HERE}"
        cmd = [sys.executable, "-S", *cmd[1:]]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def line(side: str, r: dict[str, Any], raw: float, ceiling: float, compiled: float | None = None) -> str:
    one = r["one"]
    head = (
        f"  {side:4s} one caller {one['rate']:6,.0f}/s ({one['ratio']:.2f} of raw {one['raw_rate']:,.0f}/s "
        f"interleaved; block pairs: median {one['pair_ratio_median']:.2f}, on the fast disk "
        f"{_fmt(one['fast_pair_ratio_median'])} of {one['fast_pairs']}; "
        f"CPU {one['cpu_us']:.0f} vs raw {one['raw_cpu_us']:.0f} us) p99 {one['p99_ms']:.2f} ms | "
        f"one append CPU {r['one_cpu_us']:.1f} us ({r['one_cpu_pause_us']:.0f} with 0.2 ms pauses) | load {r['load']}"
    )
    if "threads8" not in r:
        return head
    t8, p8 = r["threads8"], r["processes8"]
    return (
        f"  {side:4s} one caller {one['rate']:6,.0f}/s ({one['ratio']:.2f} of raw {one['raw_rate']:,.0f}/s "
        f"interleaved; block pairs: median {one['pair_ratio_median']:.2f}, on the fast disk "
        f"{_fmt(one['fast_pair_ratio_median'])} of {one['fast_pairs']}; "
        f"CPU {one['cpu_us']:.0f} vs raw {one['raw_cpu_us']:.0f} us) p99 {one['p99_ms']:.2f} ms | "
        f"8 threads {t8['rate']:6,.0f}/s ({t8['rate'] / (8 * raw):.2f} of 8 x raw, {t8['rate'] / ceiling:.2f} of the "
        f"flush-floor ceiling"
        + ("" if compiled is None else f", {t8['rate'] / compiled:.2f} of the compiled group commit")
        + f") p99 {t8['p99_ms']:.2f} ms "
        f"{t8['records_per_fsync']:.1f}/fsync {t8['cpu_us_per_record']:.0f} us CPU/rec | "
        f"8 processes {p8['rate']:6,.0f}/s p99 {p8['p99_ms']:.2f} ms {p8['records_per_fsync']:.1f}/fsync "
        f"{p8['cpu_us_per_record']:.0f} us CPU/rec | group CPU {r['group_cpu_us']:.1f} us | "
        f"one append CPU {r['one_cpu_us']:.1f} us ({r['one_cpu_pause_us']:.0f} with 0.2 ms pauses) | load {r['load']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="main")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--only-one", action="store_true")
    args = ap.parse_args()
    DATA.mkdir(exist_ok=True)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        package = export_base(args.base, Path(tmp))
        print(
            f"base {args.base}: compiled modules {', '.join(build_extensions(package)) or 'none'}", flush=True
        )
        for k in range(args.rounds):
            with tempfile.TemporaryDirectory(dir=DATA) as ref:
                raw, p50, _p99 = fsync_rate(Path(ref) / "f", n=1000)
                batched = batched_fsync_rate(Path(ref) / "b", batches=100)
                floor = flush_floor(Path(ref), n=400)
                compiled = None if args.only_one else compiled_group(Path(ref))
            print(
                f"round {k + 1}: raw fsync {raw:,.0f}/s (p50 {p50:.3f} ms), 500/fsync {batched:,.0f}/s, "
                f"ceiling of 8 one-record callers 8 x raw = {8 * raw:,.0f}/s",
                flush=True,
            )
            print_floor(floor)
            print_compiled_group(compiled)
            ceiling = ceiling_8(floor)
            row: dict[str, Any] = {
                "raw_fsync": raw,
                "raw_p50_ms": p50,
                "batched": batched,
                "flush_floor": floor,
                "ceiling_8": ceiling,
                "compiled_group": compiled,
            }
            order = ("base", "head") if k % 2 == 0 else ("head", "base")
            for side in order:
                row[side] = run_side(package if side == "base" else None, args.n, args.only_one)
                best = None if compiled is None else max(c["rate"] for c in compiled.values())
                print(line(side, row[side], raw, ceiling, best), flush=True)
            rounds.append(row)
    out = HERE / "results" / ("log_append_ab_one.json" if args.only_one else "log_append_ab.json")
    out.write_text(json.dumps({"base": args.base, "rounds": rounds}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
