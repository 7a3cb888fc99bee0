"""Read paths before/after in one run: a base commit and the working tree, interleaved.

    .venv/bin/python bench/read_paths_ab.py --base af9155c --root /tmp/read_paths_ab --rounds 2
    .venv/bin/python bench/read_paths_ab.py --base main --root /tmp/read_paths_ab --parts recall \
        --episodes 1000,10000,100000 --out read_paths_ab_recall.json

The base commit is exported (git archive) next to --root and run with the same
virtualenv, its packages mapped the way the editable install maps this tree's.
Each side reads its own copy of the stores (a store of another hot-store
schema version would be rebuilt on open): --root/base and --root/head, built
by the first run of each side (bench_read_paths builds what is missing).
Parts alternate base, head, base, head... so both see the same machine load;
every line gives CPU and wall percentiles and the load average, as
bench_read_paths measures them. Writes bench/results/read_paths_ab.json (or --out);
with several --episodes sizes, the recall part keeps one entry per size and
its curves go to the same name with .png.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COMPONENTS = ("ingest", "log", "compressor", "reviewer", "evolver", "runtime")
PARTS = {
    "recall": ["--only", "recall", "--episodes", "100000"],
    "context": ["--only", "context", "--turns", "1000000"],
    "long": ["--only", "long"],
}


def export_base(commit: str, into: Path) -> Path:
    """The base commit's tree, and a package folder mapping tiermem.<component> to it (returned)."""
    tree, package = into / "tree", into / "pkg"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    # Its compiled modules built as the editable install builds this tree's (`git archive` has only
    # their sources): without them the base would run its Python fallbacks (the `retrieval` event's
    # append among them) and the comparison would credit this tree with the compiled code.
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        check=True,
        capture_output=True,
    )
    package.mkdir()
    subprocess.run(["cp", "-r", str(tree / "tiermem"), str(package / "tiermem")], check=True)
    for part in COMPONENTS:
        (package / "tiermem" / part).symlink_to(tree / part)
    built = sorted({so.name.split(".")[0] for so in tree.rglob("*.so")})
    print(f"base {commit}: compiled modules {', '.join(built) or 'none'}", flush=True)
    return package


def build_head() -> None:
    """This tree's compiled modules, built in place as for the base: the editable install builds them
    only when it runs, so a C source changed (or added) since would run an old build or the Python
    fallback on this side."""
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    built = sorted(
        {so.name.split(".")[0] for p in ("tiermem", *COMPONENTS) for so in (REPO / p).rglob("*.so")}
    )
    print(f"head: compiled modules {', '.join(built) or 'none'}", flush=True)


def run(side: str, bench: Path, root: Path, args: list[str], package: Path | None) -> dict[str, Any]:
    """One part on one side, in its own process; the part's results as bench_read_paths saved them."""
    env = dict(os.environ)
    cmd = [sys.executable, str(bench), "--root", str(root), *args]
    if package is not None:
        # No site processing: the editable install's finder would map tiermem to this tree.
        site = next(p for p in sys.path if p.endswith("site-packages"))
        env["PYTHONPATH"] = f"{package}:{site}"
        cmd = [sys.executable, "-S", *cmd[1:]]
    out = subprocess.run(cmd, env=env, cwd="/", check=True, capture_output=True, text=True)
    print(f"  {side}: {out.stdout.strip().splitlines()[0]}", flush=True)
    saved = orjson.loads((bench.parent / "results" / "read_paths.json").read_bytes())
    return dict(saved)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, help="the commit to compare against")
    p.add_argument("--root", required=True, help="stores of both sides (kept for the next run)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--n-long", type=int, default=10)
    p.add_argument("--parts", default="recall,context,long")
    p.add_argument("--episodes", default="100000", help="recall: archive sizes")
    p.add_argument(
        "--out", default="read_paths_ab.json", help="file name under bench/results (a .png beside)"
    )
    args = p.parse_args(argv)
    root = Path(args.root)
    out: dict[str, Any] = {"base": args.base, "rounds": []}
    # The head side's runs write this tree's read_paths.json/.png: put them back afterwards.
    kept = {f: f.read_bytes() for f in (HERE / "results").glob("read_paths.*")}
    try:
        _rounds(args, root, out)
    finally:
        for f, data in kept.items():
            f.write_bytes(data)
    (HERE / "results" / args.out).write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    if len(args.episodes.split(",")) > 1 and "recall" in args.parts.split(","):
        plot_recall(out, HERE / "results" / Path(args.out).with_suffix(".png").name)
    return 0


def _rounds(args: argparse.Namespace, root: Path, out: dict[str, Any]) -> None:
    """Every round: each part on the base side, then on the head side."""
    with tempfile.TemporaryDirectory(prefix="read_paths_base_") as tmp:
        package = export_base(args.base, Path(tmp))
        build_head()
        benches = {
            "base": Path(tmp) / "tree" / "bench" / "bench_read_paths.py",
            "head": HERE / "bench_read_paths.py",
        }
        for r in range(args.rounds):
            got: dict[str, Any] = {}
            for part in args.parts.split(","):
                extra = [*PARTS[part], "--n", str(args.n), "--n-long", str(args.n_long)]
                if part == "recall":
                    extra[extra.index("--episodes") + 1] = args.episodes
                for side in ("base", "head"):
                    print(f"round {r + 1}, {part}, {side}", flush=True)
                    saved = run(side, benches[side], root / side, extra, package if side == "base" else None)
                    several = isinstance(saved[part], list) and len(saved[part]) > 1
                    got.setdefault(part, {})[side] = (
                        saved[part][0] if isinstance(saved[part], list) and not several else saved[part]
                    )
            out["rounds"].append(got)


def plot_recall(out: dict[str, Any], path: Path) -> None:
    """recall_memory CPU p99 vs archive size, base and head of every round, with the raw FTS5 query."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r, got in enumerate(out["rounds"]):
        for side, style in (("base", "o--"), ("head", "o-")):
            rows = got["recall"][side]
            xs = [row["episodes"] for row in rows]
            label = f"{side} ({out['base']})" if side == "base" else "head"
            ax.plot(
                xs,
                [row["recall_memory_tool"]["cpu_p99_ms"] for row in rows],
                style,
                color=f"C{r}",
                label=f"recall_memory, {label}, round {r + 1}",
            )
        raw = got["recall"]["head"]
        ax.plot(
            [row["episodes"] for row in raw],
            [row["raw_fts"]["cpu_p99_ms"] for row in raw],
            "x:",
            color=f"C{r}",
            label=f"raw FTS5 query, round {r + 1}",
        )
    ax.axhline(10, color="red", lw=0.8, ls=":", label="target 10 ms")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="episodes in the store",
        ylabel="CPU p99, ms",
        title="recall_memory (tool) vs archive size, interleaved A/B",
    )
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
