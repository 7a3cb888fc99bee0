"""The README's HTTP quickstart runs as written (its curl commands) against a real server."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers_server import make_key, running_server

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart() -> str:
    text = README.read_text(encoding="utf-8")
    section = text.split("### HTTP quickstart", 1)[1]
    (block,) = re.findall(r"^```bash\n(.*?)^```", section, re.S | re.M)[:1]
    return str(block)


def test_readme_http_quickstart_runs(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    block = quickstart()
    setup, sep, calls = block.partition("API=http://127.0.0.1:8765/v1\n")
    assert sep and "tiermem keys create --operator --json" in setup and "tiermem serve" in setup
    data_dir = tmp_path / "data"
    key = make_key(data_dir, operator=True)
    with running_server(data_dir) as server:
        script = (
            "set -euo pipefail\n"
            # every call must succeed (2xx), and each answer ends its own line
            'curl() { command curl --fail-with-body "$@"; echo; }\n'
            f"KEY={key}\nAPI={server.url}/v1\n{calls}"
        )
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 7  # one answer per curl
    assert '"event_id"' in lines[0]
    assert "I was charged twice for order 1182." in lines[1]  # the context holds the turn
    assert '"stored":true' in lines[3] and '"scope":"project"' in lines[4]
    assert '"user":"alice","turns":1' in lines[5]
    assert '"target":"alice"' in lines[6]
