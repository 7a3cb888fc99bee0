"""The README's Python section runs as written, on a fresh data root, and shows a real context."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)


def test_readme_python_section_runs_and_prints_a_context(tmp_path: Path) -> None:
    (snippet,) = _python_blocks()  # one Python block, the one the section promises runs
    assert "from tiermem import Memory" in snippet
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY" and not k.startswith("TIERMEM_")}
    proc = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # a non-empty context: the recorded turn and the stored fact are in the prompt
    tokens = int(re.search(r"^(\d+) tokens in \[", out, re.M).group(1))  # type: ignore[union-attr]
    assert tokens > 100
    assert "## Recent interactions" in out and "I was charged twice for order 1182." in out
    assert "refunds are paid within 5 business days" in out
    assert "<memory-context>" in out  # the query's retrieval, in front of the message
    assert "'found': True" in out  # the tool call
    assert "support-bot" in out and "claude-sonnet-5" in out  # the SQL result
    assert (tmp_path / "data" / "log" / "interactions").is_dir()  # the fresh root it wrote to
