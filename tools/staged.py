"""Run a checker over the package as installed: `python tools/staged.py mypy|imports`.

The component folders are mapped into `tiermem.<part>` by the build
(setup.py), not by the file tree, and tools that walk folders (mypy, the
import-linter's graph) do not follow setuptools' editable finder. This builds
the installed tree under `build/stage/` with hard links (instant, nothing
copied, no symbolic links), runs the checker there, and prints its findings
with the repository's own paths.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGE = REPO / "build" / "stage"


def package_layout() -> dict[str, str]:
    sys.path.insert(0, str(REPO))
    try:
        from setup import package_layout as layout  # the one definition of the mapping
    finally:
        sys.path.pop(0)
    return layout(REPO)


def build_stage() -> dict[str, str]:
    """Link every package's .py files into STAGE; {staged folder prefix: repository folder prefix}."""
    if STAGE.exists():
        shutil.rmtree(STAGE / "tiermem", ignore_errors=True)
    prefixes: dict[str, str] = {}
    for package, folder in package_layout().items():
        staged = STAGE / package.replace(".", "/")
        staged.mkdir(parents=True, exist_ok=True)
        prefixes[str(staged.relative_to(STAGE)) + "/"] = folder + "/"
        for src in (REPO / folder).glob("*.py"):
            os.link(src, staged / src.name)
        typed = REPO / folder / "py.typed"
        if typed.exists():
            os.link(typed, staged / "py.typed")
    return prefixes


def to_repo_paths(text: str, prefixes: dict[str, str]) -> str:
    # Longest staged prefixes first, so tiermem/app/commands/ wins over tiermem/app/.
    out = []
    for line in text.splitlines():
        for staged in sorted(prefixes, key=len, reverse=True):
            if line.startswith(staged):
                line = prefixes[staged] + line[len(staged) :]
                break
        out.append(line)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("mypy", "imports"):
        print("usage: python tools/staged.py mypy|imports", file=sys.stderr)
        return 2
    prefixes = build_stage()
    bin_dir = Path(sys.executable).parent
    config = str(REPO / "pyproject.toml")
    if argv[0] == "mypy":
        cmd = [str(bin_dir / "mypy"), "--config-file", config, "--cache-dir", str(REPO / ".mypy_cache")]
    else:
        cmd = [str(bin_dir / "lint-imports"), "--config", config]
    env = {**os.environ, "PYTHONPATH": str(STAGE)}
    proc = subprocess.run(cmd, cwd=STAGE, env=env, capture_output=True, text=True, check=False)
    sys.stdout.write(to_repo_paths(proc.stdout, prefixes) + "\n")
    sys.stderr.write(to_repo_paths(proc.stderr, prefixes))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
