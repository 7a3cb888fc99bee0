"""Helpers for the log and ingest tests: records, files, and running the CLI in-process."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from tiermem.app.cli import main
from tiermem.settings import Settings

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"


def interaction(i: int = 0, **fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "type": "interaction",
        "agent_id": f"agent-{i % 3}",
        "user": f"user-{i % 5}",
        "ts": f"2026-03-{1 + i % 5:02d}T10:{i % 60:02d}:00.{i % 1000:03d}Z",
        "channel": "web",
        "user_message": f"message number {i}",
        "agent_response": f"response number {i}",
        "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 100 + i, "output_tokens": 10 + i % 7},
        "tools_used": ["recall_memory"] if i % 4 == 0 else [],
        "latency_ms": 100.0 + i,
    }
    rec.update(fields)
    return rec


def write_jsonl(path: Path, records: Iterable[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for rec in records:
            fh.write((rec if isinstance(rec, bytes) else orjson.dumps(rec)) + b"\n")
    return path


def segment_files(data_dir: Path, stream: str = "interactions", suffix: str = ".jsonl") -> list[Path]:
    return sorted((data_dir / "log" / stream).glob(f"date=*/*{suffix}"))


def all_lines(data_dir: Path, stream: str = "interactions") -> list[bytes]:
    out: list[bytes] = []
    for path in segment_files(data_dir, stream):
        out.extend(path.read_bytes().splitlines())
    return out


def complete_lines(data_dir: Path, stream: str = "interactions") -> list[bytes]:
    """The newline-terminated lines of a stream's open segments.

    A writer killed mid-write can leave a partial last line: that record was never
    acknowledged, the next open moves it to quarantine, and a re-run stores it again
    as new. Counting it as stored would expect one duplicate too many.
    """
    out: list[bytes] = []
    for path in segment_files(data_dir, stream):
        data = path.read_bytes()
        out.extend(data[: data.rfind(b"\n") + 1].splitlines())
    return out


def run_cli(capsys: pytest.CaptureFixture[str], data_dir: Path, args: Sequence[str]) -> tuple[int, str, str]:
    """Run `tiermem --data-dir DATA ARGS...` in this process; (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = main(["--data-dir", str(data_dir), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


# Another process: appends the ids it is sent, one per line ("ok" once acknowledged), keeping
# them in memory (its segment listed); an empty line lets it close.
HOLDER = """
import sys
from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings
settings = resolve_settings(data_dir=sys.argv[1], env={}, fsync="always")
with EventLog(settings) as log:
    for line in sys.stdin:
        if not line.strip():
            break
        eid, day, *kind = line.split()
        if kind:  # another stream's event
            log.append({"type": "session_ended", "agent_id": "o", "session_id": "s", "event_id": eid,
                        "ts": f"2026-03-{day}T11:00:00.000Z"})
        else:
            log.append({"type": "interaction", "agent_id": "o", "event_id": eid,
                        "ts": f"2026-03-{day}T11:00:00.000Z", "user_message": "m", "agent_response": "r"})
        print("ok", flush=True)
"""


class OtherWriter:
    """Another writer process (`HOLDER`), for tests of what one process sees of another's appends."""

    def __init__(self, tmp_path: Path, settings: Settings) -> None:
        script = tmp_path / "holder.py"
        script.write_text(HOLDER)
        self.proc = subprocess.Popen(
            [str(PYTHON), str(script), str(settings.data_dir)],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def append(self, eid: str, day: str, *, session: bool = False) -> None:
        """Append an interaction (or, with `session`, a `session_ended` of the sessions stream)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{eid} {day}{' session' if session else ''}\n".encode())
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == b"ok\n"

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"\n")
        self.proc.stdin.flush()
        assert self.proc.wait(timeout=60) == 0
