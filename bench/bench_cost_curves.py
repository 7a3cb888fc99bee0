"""How each path's cost grows with the size of the log: one curve per path, fitted on log-log.

    .venv/bin/python bench/bench_cost_curves.py --root /tmp/cost_curves            # 10k, 100k, 1M turns
    .venv/bin/python bench/bench_cost_curves.py --root /tmp/cost_curves --quick    # 1k, 10k turns (minutes)
    .venv/bin/python bench/bench_cost_curves.py --root /tmp/cost_curves --only append,context --turns 10000,100000

Sizes are logged turns (10k -> 100k -> 1M); the agent axis (100 -> 10k agents) is
the same day of 100 turns per agent, so review, compress and the cold agent are
plotted against agents as well. Every path is measured by the benchmark that
owns it, called as a function (or, for the batch jobs, run as the command it
documents), so the curves follow the code when those paths change:

    append (one caller, fsync each; group commit, 8 callers of one record)
                               bench_log_append: record, calls, threads_on, on a log of N turns
    bulk ingest                tiermem.ingest.pipeline.ingest_file on a file of N sample turns
    seal                       tiermem.log.seal.seal of the N ingested turns (closed days)
    analyst query              bench_log_query.timed: its GROUP BY and one-day query, N sealed rows
    context (+ retrieval)      bench_read_paths.bench_context at N turns
    recall_memory              bench_read_paths.bench_recall at N / 10 episodes
    cold agent                 bench_read_paths.bench_cold at N / 100 agents (both catch-up modes)
    review, compress           bench_batch_scale.py --job review|compress at N / 100 agents x 100 turns

The physical references are measured in the same run: the raw fsync rate, the
batched-fsync rate, buffered writes, and (inside the read paths) a raw SQLite
FTS5 query on the same index. Each path is classified by the slope of
log(time) over log(size): flat (< 0.2: the request paths must be), sublinear,
linear (0.8-1.2: the batch paths should be, i.e. a constant cost per turn) or
worse. Timings are wall and CPU with the load average (the machine is shared).

Writes bench/results/cost_curves.json and cost_curves.png; stores are kept
under --root for the next run (delete it to rebuild). `--only` and the size
lists make partial runs; a partial run merges into the existing JSON.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_log_append as bla
import bench_log_query as blq
import bench_read_paths as brp
from batch_data import generate
from bench_log_reference import batched_fsync_rate, buffered_rate, fsync_rate
from tiermem.ingest.pipeline import ingest_file
from tiermem.log.seal import seal

from tiermem.app import samples
from tiermem.eventlog import EventLog
from tiermem.ids import utcnow
from tiermem.settings import resolve_settings

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TURNS_PER_AGENT = 100  # the batch day: N turns are N / 100 agents of 100 turns
BATCH_DAY = date(2026, 11, 23)
PATHS = ("append", "ingest", "seal", "query", "context", "recall", "cold", "review", "compress")
# Which paths serve a request (must stay flat) and which are batch work (should be linear).
REQUEST_PATHS = {"append", "context", "recall", "cold"}


def load() -> float:
    return round(os.getloadavg()[0], 1)


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (ingest workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_once(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """Run fn once: (result, wall s, CPU s)."""
    t0, c0 = time.perf_counter(), cpu_s()
    out = fn()
    return out, time.perf_counter() - t0, cpu_s() - c0


# ------------------------------------------------------------------ references


def references(root: Path) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        rate, p50, p99 = fsync_rate(Path(tmp) / "f", n=1000)
        ref = {
            "fsync_rate": round(rate),
            "fsync_p50_ms": round(p50, 3),
            "fsync_p99_ms": round(p99, 3),
            "batched_fsync_rate": round(batched_fsync_rate(Path(tmp) / "b", batches=100)),
            "buffered_rate": round(buffered_rate(Path(tmp) / "w", n=200_000)),
            "load": load(),
        }
    print(f"reference: {ref}", flush=True)
    return ref


# ------------------------------------------------------------------ the batch day (append, review, compress)


def batch_day(root: Path, turns: int) -> Path:
    """The deterministic day of `turns` turns (N / 100 agents), made once; returns its folder."""
    agents = max(1, turns // TURNS_PER_AGENT)
    source = root / "batch" / f"{agents}x{TURNS_PER_AGENT}"
    if not (source / "log").exists():
        t0 = time.perf_counter()
        generate(source, agents, TURNS_PER_AGENT, BATCH_DAY)
        print(f"  made the day of {turns:,} turns in {time.perf_counter() - t0:.0f}s", flush=True)
    return source


def bench_append(root: Path, turns: int, n: int) -> dict[str, Any]:
    """Durable appends into a log that already holds `turns` turns (a copy of the batch day)."""
    source = batch_day(root, turns)
    out: dict[str, Any] = {"turns": turns}
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        shutil.copytree(source / "log", Path(tmp) / "log")
        settings = bla._settings(tmp, "always")
        with EventLog(settings) as log:
            (_, open_s, open_cpu) = timed_once(lambda: log.append(bla.record(-1, "first")))
            t0, c0 = time.perf_counter(), time.process_time()
            lat = bla.calls(log, "one", n, 1, 0)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        out["first_append_ms"] = round(open_s * 1000, 2)
        out["first_append_cpu_ms"] = round(open_cpu * 1000, 2)
        out["one_caller"] = {
            "rate": round(n / elapsed),
            "p50_ms": round(bla.pct(lat, 0.5), 3),
            "p99_ms": round(bla.pct(lat, 0.99), 3),
            "cpu_us_per_record": round(cpu / n * 1e6, 1),
        }
        out["group8"] = group_commit(bla._settings(tmp, "group"), callers=8, per_caller=max(50, n // 2))
    out["load"] = load()
    print(f"  append into {turns:,} turns: {out}", flush=True)
    return out


def group_commit(settings: Any, callers: int, per_caller: int) -> dict[str, Any]:
    """bench_log_append's thread harness, on the given (pre-filled) log instead of an empty one."""
    with EventLog(settings) as log:
        log.append(bla.record(-1, "g"))
        summary = bla.threads_on(log, callers, per_caller, who="g")
    return {
        k: (round(v, 1) if k == "cpu_us_per_record" else round(v, 3)) if isinstance(v, float) else v
        for k, v in summary.items()
    }


def bench_batch_job(root: Path, job: str, turns: int) -> dict[str, Any]:
    """`bench_batch_scale.py --job JOB` on the batch day (its own process: a fresh copy of the log)."""
    agents = max(1, turns // TURNS_PER_AGENT)
    batch_day(root, turns)
    cmd = [
        sys.executable,
        str(HERE / "bench_batch_scale.py"),
        "--job",
        job,
        "--agents",
        str(agents),
        "--turns",
        str(TURNS_PER_AGENT),
        "--cache",
        str(root / "batch"),
    ]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    line = done.stdout.strip().splitlines()[-1]
    out: dict[str, Any] = {"turns": turns, "agents": agents, **orjson.loads(line)}
    out["process_wall_s"] = round(time.perf_counter() - t0, 1)
    print(f"  {job} of {turns:,} turns: {out}", flush=True)
    return out


# ------------------------------------------------------------------ ingest -> seal -> query (one data root)


def bench_ingest_seal_query(root: Path, turns: int, parts: set[str]) -> dict[str, dict[str, Any]]:
    """Ingest N sample turns over 5 closed days (fsync always), seal them, query the sealed rows."""
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        src = Path(tmp) / "turns.jsonl"
        yesterday = (utcnow() - timedelta(days=1)).date()
        samples.write_jsonl(src, samples.generate(days=5, per_day=turns // 5, end=yesterday, seed=3))
        settings = resolve_settings(data_dir=Path(tmp) / "data", env={})
        info, wall, cpu = timed_once(lambda: ingest_file(settings, src, progress=False, fsync="always"))
        src.unlink()
        out["ingest"] = {
            "turns": turns,
            "wall_s": round(wall, 3),
            "cpu_s": round(cpu, 3),
            "rate": round(info.accepted / wall),
            "cpu_us_per_record": round(cpu / turns * 1e6, 1),
            "load": load(),
        }
        print(f"  ingest {turns:,}: {out['ingest']}", flush=True)
        if parts & {"seal", "query"}:
            sealed, wall, cpu = timed_once(lambda: seal(settings))
            out["seal"] = {
                "turns": turns,
                "rows": sealed.sealed_rows,
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "load": load(),
            }
            print(f"  seal {turns:,}: {out['seal']}", flush=True)
        if "query" in parts:
            day = str(yesterday - timedelta(days=2))
            group_by, opened, groups = blq.timed(settings.data_dir, blq.GROUP_BY)
            one_day, _, _ = blq.timed(settings.data_dir, blq.ONE_DAY.format(day=day))
            out["query"] = {
                "turns": turns,
                "group_by_ms": round(group_by * 1000, 1),
                "one_day_ms": round(one_day * 1000, 1),
                "catalog_open_ms": round(opened * 1000, 1),
                "groups": groups,
                "load": load(),
            }
            print(f"  query over {turns:,}: {out['query']}", flush=True)
    return out


# ------------------------------------------------------------------ the series and their slopes

# (path, series label, x key, y getter in seconds or ms, unit)
Series = tuple[str, str, str, Callable[[dict[str, Any]], float], str]
SERIES: list[Series] = [
    ("append", "one caller, fsync each: p50", "turns", lambda r: r["one_caller"]["p50_ms"], "ms"),
    ("append", "group commit, 8 callers: p50", "turns", lambda r: r["group8"]["p50_ms"], "ms"),
    (
        "append",
        "one caller, CPU per record",
        "turns",
        lambda r: r["one_caller"]["cpu_us_per_record"] / 1000,
        "ms",
    ),
    (
        "append",
        "group commit, CPU per record",
        "turns",
        lambda r: r["group8"]["cpu_us_per_record"] / 1000,
        "ms",
    ),
    ("append", "first append (opens the log)", "turns", lambda r: r["first_append_ms"], "ms"),
    ("append", "first append, CPU", "turns", lambda r: r["first_append_cpu_ms"], "ms"),
    ("ingest", "bulk ingest, wall", "turns", lambda r: r["wall_s"], "s"),
    ("ingest", "bulk ingest, CPU", "turns", lambda r: r["cpu_s"], "s"),
    ("seal", "seal, wall", "turns", lambda r: r["wall_s"], "s"),
    ("query", "GROUP BY over all rows", "turns", lambda r: r["group_by_ms"], "ms"),
    ("query", "one-day query", "turns", lambda r: r["one_day_ms"], "ms"),
    ("context", "context, CPU p99", "turns", lambda r: r["no_query"]["cpu_p99_ms"], "ms"),
    ("context", "context + retrieval, CPU p99", "turns", lambda r: r["with_query"]["cpu_p99_ms"], "ms"),
    ("context", "context + retrieval, CPU p50", "turns", lambda r: r["with_query"]["cpu_p50_ms"], "ms"),
    ("context", "raw FTS5 query, CPU p99", "turns", lambda r: r["raw_fts"]["cpu_p99_ms"], "ms"),
    ("recall", "recall_memory tool, CPU p99", "turns", lambda r: r["recall_memory_tool"]["cpu_p99_ms"], "ms"),
    ("recall", "recall_memory tool, CPU p50", "turns", lambda r: r["recall_memory_tool"]["cpu_p50_ms"], "ms"),
    ("recall", "raw FTS5 query, CPU p99", "turns", lambda r: r["raw_fts"]["cpu_p99_ms"], "ms"),
    ("cold", "catch_up=background, CPU p50", "agents", lambda r: r["background"]["cpu_p50_ms"], "ms"),
    ("cold", "catch_up=background, wall p50", "agents", lambda r: r["background"]["wall_p50_ms"], "ms"),
    ("cold", "catch_up=inline, wall p50", "agents", lambda r: r["inline"]["wall_p50_ms"], "ms"),
    ("review", "review, wall", "agents", lambda r: r["wall_s"], "s"),
    ("compress", "compress, wall", "agents", lambda r: r["wall_s"], "s"),
]
# The series whose slope classifies the path (the others are shown for reference).
MAIN = {
    "append": "group commit, 8 callers: p50",
    "ingest": "bulk ingest, CPU",
    "seal": "seal, wall",
    "query": "GROUP BY over all rows",
    "context": "context + retrieval, CPU p99",
    "recall": "recall_memory tool, CPU p99",
    "cold": "catch_up=background, CPU p50",
    "review": "review, wall",
    "compress": "compress, wall",
}


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) over log(x): 0 flat, 1 linear, 2 quadratic."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def classify(s: float | None) -> str:
    if s is None:
        return "n/a"
    if s < 0.2:
        return "flat"
    if s < 0.8:
        return "sublinear"
    if s <= 1.2:
        return "linear"
    return "worse than linear"


def series_points(
    results: dict[str, Any], path: str, getter: Callable[[dict[str, Any]], float], x: str
) -> tuple[list[float], list[float]]:
    rows = results.get(path, [])
    return [float(r[x]) for r in rows], [float(getter(r)) for r in rows]


def fits(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for path, label, x, getter, unit in SERIES:
        xs, ys = series_points(results, path, getter, x)
        if not xs:
            continue
        s = slope(xs, ys)
        out.append(
            {
                "path": path,
                "series": label,
                "x": x,
                "unit": unit,
                "points": [[a, round(b, 3)] for a, b in zip(xs, ys, strict=True)],
                "slope": None if s is None else round(s, 2),
                "class": classify(s),
                "main": MAIN.get(path) == label,
                "request_path": path in REQUEST_PATHS,
            }
        )
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fitted = results.get("fits", [])
    present = [p for p in PATHS if any(f["path"] == p for f in fitted)]
    if not present:
        return
    cols = 3
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.8 * rows), squeeze=False)
    latest = results.get("reference", {})

    def ref_for(path: str) -> dict[str, Any]:
        """The references of the run that measured `path` (a partial run keeps older paths)."""
        runs = [r for r in results.get("runs", []) if path in r["paths"]]
        return dict(runs[-1]["reference"]) if runs else dict(latest)

    def run_of(path: str) -> str:
        """When the run that measured `path` started, and its load (shown in the panel's title)."""
        runs = [r for r in results.get("runs", []) if path in r["paths"]]
        return f"{runs[-1]['when'][5:16]}, load {runs[-1]['reference'].get('load', '?')}" if runs else ""

    for ax, name in zip(axes.flat, present, strict=False):
        ref = ref_for(name)
        for f in (f for f in fitted if f["path"] == name):
            xs = [p[0] for p in f["points"]]
            ys = [p[1] for p in f["points"]]
            style = "o-" if f["main"] else "x--"
            ax.plot(xs, ys, style, label=f"{f['series']} (slope {f['slope']})")
            unit, xlabel = f["unit"], "agents" if f["x"] == "agents" else "logged turns"
        if name == "append" and ref.get("fsync_p50_ms"):
            ax.axhline(ref["fsync_p50_ms"], color="grey", ls=":", label="raw fsync p50 (same run)")
        if name == "ingest" and ref.get("batched_fsync_rate"):
            xs = [r["turns"] for r in results.get("ingest", [])]
            ax.plot(
                xs,
                [x / ref["batched_fsync_rate"] for x in xs],
                color="grey",
                ls=":",
                label="batched fsync time",
            )
        kind = "request path" if name in REQUEST_PATHS else "batch"
        main = next((f for f in fitted if f["path"] == name and f["main"]), None)
        verdict = f"{main['class']} (slope {main['slope']})" if main else ""
        ax.set(xscale="log", yscale="log", xlabel=xlabel, ylabel=unit)
        ax.set_title(f"{name} [{kind}]: {verdict}\n({run_of(name)})", fontsize=9)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    fig.suptitle(
        f"cost vs size (last run {results.get('when', '')}, {os.cpu_count()} cores, "
        f"load {latest.get('load', '?')} at its start; references: each path's own run)",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ------------------------------------------------------------------ driver


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="where stores are built (kept for the next run)")
    p.add_argument("--only", help=f"comma-separated paths among {','.join(PATHS)}")
    p.add_argument("--turns", default="10000,100000,1000000", help="logged turns per point")
    p.add_argument("--quick", action="store_true", help="small sizes: 1k and 10k turns, fewer calls")
    p.add_argument("--n", type=int, default=200, help="timed calls per read-path point")
    p.add_argument("--appends", type=int, default=300, help="appends per caller per append point")
    p.add_argument("--rounds", type=int, default=3, help="cold agent: first contexts per mode")
    p.add_argument("--out", type=Path, default=RESULTS / "cost_curves.json")
    args = p.parse_args(argv)
    if args.quick:
        args.turns, args.n, args.appends, args.rounds = "1000,10000", 50, 100, 2
    parts = set(PATHS) if not args.only else set(args.only.split(","))
    unknown = parts - set(PATHS)
    if unknown:
        p.error(f"unknown path(s) {sorted(unknown)}; known: {', '.join(PATHS)}")
    sizes = [int(x) for x in args.turns.split(",")]
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = orjson.loads(args.out.read_bytes()) if args.out.exists() else {}
    results["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    results["machine"] = {"nproc": os.cpu_count(), "load_at_start": load()}
    results["command"] = "bench/bench_cost_curves.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results["reference"] = references(root)
    # A partial run replaces only its paths: each run's references stay beside the paths it measured.
    results.setdefault("runs", []).append(
        {
            "when": results["when"],
            "command": results["command"],
            "paths": sorted(parts),
            "sizes": sizes,
            "reference": results["reference"],
        }
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after each path, so a long run keeps what it measured
        results["fits"] = fits(results)
        args.out.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
        plot(results, args.out.with_suffix(".png"))

    started: dict[str, float] = {}

    def run(path: str, fn: Callable[[int], dict[str, Any]]) -> None:
        if path not in parts:
            return
        started[path] = time.perf_counter()
        results[path] = []
        for size in sizes:
            results[path].append(fn(size))
            save()
        print(f"{path}: done in {time.perf_counter() - started[path]:.0f}s", flush=True)

    run("append", lambda n: bench_append(root, n, args.appends))
    if parts & {"ingest", "seal", "query"}:
        chain = {k: [] for k in ("ingest", "seal", "query") if k in parts | {"ingest"}}
        for size in sizes:
            got = bench_ingest_seal_query(root, size, parts)
            for k, v in got.items():
                chain.setdefault(k, []).append(v)
                results[k] = chain[k]
            save()
    run("context", lambda n: brp.bench_context(root / "read", n, args.n))
    # An archive of N turns holds about N / 10 episodes (the compressor's grouping).
    run("recall", lambda n: {**brp.bench_recall(root / "read", max(100, n // 10), args.n), "turns": n})
    run(
        "cold",
        lambda n: brp.bench_cold(root / "read", max(10, n // TURNS_PER_AGENT), args.rounds),
    )
    run("review", lambda n: bench_batch_job(root, "review", n))
    run("compress", lambda n: bench_batch_job(root, "compress", n))
    save()
    for f in results["fits"]:
        if f["main"]:
            kind = "request" if f["request_path"] else "batch"
            print(f"{f['path']:>9} [{kind}]: {f['class']:<18} slope {f['slope']}  ({f['series']})")
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
