"""Bulk ingest with encoding worker processes: same stored bytes, counts and rejects as inline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers_log import PYTHON, REPO, interaction, run_cli, write_jsonl
from test_ingest_bad_records import BAD
from tiermem.ingest import pipeline
from tiermem.ingest.pipeline import ingest_file

from tiermem.settings import Settings, resolve_settings


def _mixed_source(path: Path, n: int) -> Path:
    lines: list[Any] = []
    for i in range(n):
        rec = interaction(i)
        if i % 11 == 0:
            rec.pop("ts")  # gets the file's mtime, deterministically
        elif i % 7 == 0:  # (a caller id without ts would get the ingest time: not comparable)
            rec["event_id"] = f"caller-{i}"
        lines.append(rec)
        if i % 50 == 0:
            lines.append(BAD[(i // 50) % len(BAD)][1])
        if i % 40 == 0:
            lines.append(
                {"type": "session_ended", "agent_id": "a", "session_id": f"s{i}", "ts": rec.get("ts")}
            )
        if i % 90 == 0:
            lines.append(b"")
    lines.append(interaction(5))  # an exact repeat of an earlier line: a duplicate
    return write_jsonl(path, lines)


def _stored(settings: Settings) -> dict[str, list[bytes]]:
    """Every stream's lines, segment by segment in name order (segment names differ between roots)."""
    out: dict[str, list[bytes]] = {}
    for stream_dir in sorted(
        p for p in settings.log_dir.iterdir() if p.is_dir() and not p.name.startswith("_")
    ):
        lines: list[bytes] = []
        for seg in sorted(stream_dir.glob("date=*/*.jsonl")):
            lines.extend(seg.read_bytes().splitlines())
        out[stream_dir.name] = lines
    return out


def _rejects(settings: Settings) -> list[tuple[str, str, str]]:
    rows = [
        orjson.loads(x) for p in settings.rejects_dir.rglob("*.jsonl") for x in p.read_bytes().splitlines()
    ]
    return [(r["field"], r["reason"], r["record"]) for r in rows]


def test_workers_store_exactly_what_the_inline_path_stores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _mixed_source(tmp_path / "mixed.jsonl", 3000)
    # Small blocks and no size threshold, so this small file really goes through the pool.
    monkeypatch.setattr(pipeline, "BLOCK_BYTES", 8192)
    monkeypatch.setattr(pipeline, "PARALLEL_AFTER_BYTES", 16384)
    inline = resolve_settings(data_dir=tmp_path / "inline", env={})
    pooled = resolve_settings(data_dir=tmp_path / "pooled", env={})
    a = ingest_file(inline, src, progress=False, workers=0, batch_records=700)
    b = ingest_file(pooled, src, progress=False, workers=2, batch_records=700)
    for info in (a, b):
        assert info.rejected == len(range(0, 3000, 50)) and info.duplicates == 1
        assert info.streams["sessions"] == len(range(0, 3000, 40))
    assert (a.accepted, a.rejected, a.duplicates, a.lines, a.blank_lines, a.streams, a.reject_fields) == (
        b.accepted,
        b.rejected,
        b.duplicates,
        b.lines,
        b.blank_lines,
        b.streams,
        b.reject_fields,
    )
    assert _stored(inline) == _stored(pooled)
    assert _rejects(inline) == _rejects(pooled)
    again = ingest_file(pooled, src, progress=False, workers=2)
    assert (again.accepted, again.duplicates) == (0, a.accepted + a.duplicates)
    assert _stored(inline) == _stored(pooled)


WORKER_INGEST = """
import sys
from tiermem.ingest import pipeline
from tiermem.settings import resolve_settings
pipeline.PARALLEL_AFTER_BYTES = 0
settings = resolve_settings(data_dir=sys.argv[1], env={})
pipeline.ingest_file(settings, sys.argv[2], progress=False, workers=2, batch_records=1000)
"""


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        found.update(int(x) for x in task.read_text().split())
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_a_sigkilled_ingest(settings: Settings, tmp_path: Path) -> None:
    src = write_jsonl(tmp_path / "big.jsonl", (interaction(i) for i in range(60_000)))
    script = tmp_path / "ingest.py"
    script.write_text(WORKER_INGEST)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([str(PYTHON), str(script), str(settings.data_dir), str(src)], env=env)
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and len(workers) < 2:
        workers = _children(proc.pid)
        time.sleep(0.01)
    assert len(workers) >= 2, "the ingest never started its workers"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "encoding workers outlived the killed ingest"
    # And the killed load re-runs to the complete content.
    info = ingest_file(settings, src, progress=False)
    assert info.accepted + info.duplicates == 60_000


def test_cli_workers_flag(settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_jsonl(tmp_path / "few.jsonl", (interaction(i) for i in range(20)))
    code, out, _err = run_cli(capsys, settings.data_dir, ["ingest", str(src), "--workers", "0", "--json"])
    assert code == 0 and orjson.loads(out)["accepted"] == 20
