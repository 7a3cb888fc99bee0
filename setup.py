"""Build layout: each top-level component folder is the `tiermem.<part>` package.

The folders `ingest/`, `log/`, `compressor/`, `reviewer/`, `evolver/` and
`runtime/` are the homes of their code; this maps them (and every sub-package
found in them) into the `tiermem` namespace, so a new module or sub-package is
picked up with no edit here. Editable installs (`pip install -e .`) resolve the
same names through setuptools' import finder. The rest of the metadata lives
in pyproject.toml.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import Extension, find_packages, setup

ROOT = Path(__file__).resolve().parent
COMPONENTS = ("ingest", "log", "compressor", "reviewer", "evolver", "runtime")


def package_layout(root: Path = ROOT) -> dict[str, str]:
    """{package name: folder relative to the repository} for every package of the distribution."""
    layout = {"tiermem": "tiermem"}
    for sub in find_packages(str(root / "tiermem")):
        layout[f"tiermem.{sub}"] = "tiermem/" + sub.replace(".", "/")
    for part in COMPONENTS:
        layout[f"tiermem.{part}"] = part
        for sub in find_packages(str(root / part)):
            layout[f"tiermem.{part}.{sub}"] = f"{part}/" + sub.replace(".", "/")
    return layout


if __name__ == "__main__":
    LAYOUT = package_layout()
    # The bulk ingest's compiled pass. Optional: without a C compiler the build goes on and
    # ingest runs its Arrow and Python passes alone (same results, more CPU per record).
    SCAN = Extension("tiermem.ingest._scan", ["ingest/_scan.c"], optional=True, extra_compile_args=["-O2"])
    # The append path's check of an ordinary interaction: optional in the same way (without it,
    # `validate` runs its Python fast path, with the same results).
    RECORDS = Extension("tiermem._records", ["tiermem/_records.c"], optional=True, extra_compile_args=["-O2"])
    # Short system calls that keep the interpreter lock (optional too: `tiermem.heldio` falls back
    # to the ordinary calls).
    HELDIO = Extension("tiermem._heldio", ["tiermem/_heldio.c"], optional=True, extra_compile_args=["-O2"])
    # The one-step append in one call, the id lookup through SQLite's own interface (optional too:
    # without it, or without SQLite's header, `tiermem.steady_append` runs its Python path).
    STEADY = Extension(
        "tiermem._steady",
        ["tiermem/_steady.c"],
        optional=True,
        extra_compile_args=["-O2"],
        libraries=["sqlite3"],
    )
    # The quote search's block bounds and exact passage scores (_blockscore.c) and term counts
    # (_blockcounts.c) in one pass per call (optional too: `tiermem.runtime.passage_compiled` falls
    # back to numpy). Multiplies and adds are not contracted: the scores must equal numpy's to the
    # last bit.
    BLOCKSCORE = Extension(
        "tiermem.runtime._blockscore",
        ["runtime/_blockscore.c", "runtime/_blockcounts.c"],
        depends=["runtime/_blockscore.h"],
        optional=True,
        extra_compile_args=["-O2", "-ffp-contract=off"],
    )
    # The quote search's near-duplicate check over a run of results (optional too:
    # `tiermem.runtime.near_duplicates` runs its Python path, which keeps the same results).
    DISTINCT = Extension(
        "tiermem.runtime._distinct", ["runtime/_distinct.c"], optional=True, extra_compile_args=["-O2"]
    )
    setup(
        packages=sorted(LAYOUT),
        package_dir=LAYOUT,
        ext_modules=[SCAN, RECORDS, HELDIO, STEADY, BLOCKSCORE, DISTINCT],
    )
