"""Every optional compiled module is built where a C compiler and SQLite's header are there.

Each compiled module has a Python path with the same results, so a failed build is not an
error for a user; but the tests of a compiled module skip themselves when it is missing, and
a build broken by a change would then pass unnoticed. CI installs the compiler and the header
and sets REQUIRE_COMPILED_MODULES=1: there, each module declared in setup.py must import. (Not
a `TIERMEM_` name: those are settings, and an unknown one is refused.)
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parent.parent / "setup.py"


def declared() -> list[str]:
    """The module names of setup.py's extensions."""
    return re.findall(r'Extension\(\s*"([\w.]+)"', SETUP.read_text())


def test_setup_declares_the_compiled_modules() -> None:
    names = declared()
    assert "tiermem._steady" in names and "tiermem.runtime._blockscore" in names and len(names) >= 5


@pytest.mark.skipif(
    os.environ.get("REQUIRE_COMPILED_MODULES") != "1",
    reason="set REQUIRE_COMPILED_MODULES=1 where a C compiler and SQLite's header are installed",
)
@pytest.mark.parametrize("name", declared())
def test_each_compiled_module_is_built(name: str) -> None:
    importlib.import_module(name)
