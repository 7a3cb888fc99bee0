"""The package a user installs: real folders (no symbolic links), every component module in the
wheel and the sdist at its `tiermem.<part>` path, built offline from the tracked files alone, and
a normal (non-editable) install of the wheel that works from its own files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COMPONENTS = ("ingest", "log", "compressor", "reviewer", "evolver", "runtime")
SYMLINK_MODE = "120000"  # git's file mode for a symbolic link


def _tracked(*args: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", *args], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [p for p in out.split("\0") if p]


def _git_available() -> bool:
    return shutil.which("git") is not None and (REPO / ".git").exists()


pytestmark = pytest.mark.skipif(not _git_available(), reason="needs the git checkout")


def test_the_repository_holds_no_symbolic_links() -> None:
    staged = _tracked("-s")
    links = [line.split("\t", 1)[1] for line in staged if line.split()[0] == SYMLINK_MODE]
    assert links == []
    on_disk = [p for p in _tracked() if (REPO / p).is_symlink()]
    assert on_disk == []
    # the folders themselves (what `find . -type l` would also report)
    folders = {str(Path(p).parent) for p in _tracked()} - {"."}
    assert [f for f in sorted(folders) if (REPO / f).is_symlink()] == []


def _component_modules() -> dict[str, str]:
    """{repository path: path inside the installed package} for every tracked component .py file."""
    wanted: dict[str, str] = {}
    for path in _tracked(*COMPONENTS):
        if path.endswith(".py"):
            wanted[path] = "tiermem/" + path
    for path in _tracked("tiermem"):
        if path.endswith(".py"):
            wanted[path] = path
    return wanted


@pytest.mark.slow
def test_wheel_and_sdist_hold_every_component_module_at_its_tiermem_path_and_install(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for path in _tracked():
        target = src / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / path, target)
    dist = tmp_path / "dist"
    # sdist first, then the wheel built from the unpacked sdist (build's default): the wheel
    # proves the sdist alone is enough to install the package.
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = dist.glob("tiermem-*.whl")
    (sdist,) = dist.glob("tiermem-*.tar.gz")

    wanted = _component_modules()
    assert sum(p.startswith("runtime/") for p in wanted) >= 5  # the listing itself is not empty

    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    missing_in_wheel = sorted(inside for inside in wanted.values() if inside not in in_wheel)
    assert missing_in_wheel == []
    # no generic top-level modules: everything is under tiermem/ (plus the dist-info)
    top = {name.split("/", 1)[0] for name in in_wheel}
    assert {t for t in top if not t.endswith(".dist-info")} == {"tiermem"}
    # each component is a package in the wheel (its __init__ at tiermem/<part>/)
    for part in COMPONENTS:
        assert f"tiermem/{part}/__init__.py" in in_wheel

    with tarfile.open(sdist) as tf:
        root = tf.getnames()[0].split("/", 1)[0]
        in_sdist = {name.split("/", 1)[1] for name in tf.getnames() if "/" in name}
    assert root == wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1]
    assert sorted(p for p in wanted if p not in in_sdist) == []
    assert "setup.py" in in_sdist and "pyproject.toml" in in_sdist

    # A normal (non-editable) install of that wheel imports and works on its own files.
    target = tmp_path / "installed"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = (
        "import sys, tiermem.runtime.memory as m, tiermem.app.api as api\n"
        "from tiermem import Memory\n"
        "assert m.__file__.startswith(sys.argv[1]) and api.__file__.startswith(sys.argv[1]), m.__file__\n"
        "with Memory.open(sys.argv[2], env={}) as mem:\n"
        "    agent = mem.agent('a')\n"
        "    agent.record_turn('u', 'the wheel works', 'yes')\n"
        "    print(agent.context(user='u').section('recent').text)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(target), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "the wheel works" in out.stdout
