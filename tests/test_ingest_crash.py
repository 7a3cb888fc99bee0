"""A bulk ingest killed with SIGKILL and re-run loses nothing and doubles nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from helpers_log import PYTHON, REPO, all_lines, complete_lines, segment_files, write_jsonl
from tiermem.ingest.pipeline import ingest_file

from tiermem.app import samples
from tiermem.settings import Settings

INGEST = """
import sys
from tiermem.ingest.pipeline import ingest_file
from tiermem.settings import resolve_settings
settings = resolve_settings(data_dir=sys.argv[1], env={})
ingest_file(settings, sys.argv[2], progress=False, batch_records=int(sys.argv[3]))
"""


def _source(tmp_path: Path, n_days: int, per_day: int) -> Path:
    recs = list(samples.generate(days=n_days, per_day=per_day, seed=11))
    for rec in recs[::97]:  # some records carry no ts at all
        rec.pop("ts", None)
        rec.pop("timestamp", None)
    return write_jsonl(tmp_path / "bulk.jsonl", recs)


def _stored_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in (data_dir / "log").rglob("*.jsonl") if "_" not in p.parts[-3])


@pytest.mark.slow
def test_sigkilled_bulk_ingest_rerun_loses_nothing_and_doubles_nothing(
    settings: Settings, tmp_path: Path
) -> None:
    src = _source(tmp_path, 4, 15_000)
    script = tmp_path / "ingest.py"
    script.write_text(INGEST)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed_at = []
    for attempt in range(2):  # kill it twice at different points, then let a run finish
        proc = subprocess.Popen([str(PYTHON), str(script), str(settings.data_dir), str(src), "3000"], env=env)
        threshold = (attempt + 1) * 4_000_000
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if settings.log_dir.exists() and _stored_bytes(settings.data_dir) > threshold:
                break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # Only whole lines were stored: a kill between two writes of a batch leaves a
        # partial last line, which the re-run quarantines and stores again as new.
        killed_at.append(len(complete_lines(settings.data_dir)))
    assert 0 < killed_at[0] < 59_000, killed_at  # the kill really interrupted the load
    info = ingest_file(settings, src, progress=False)
    # Two byte-identical lines without id are one event (same derived id): count distinct lines.
    source = src.read_bytes().splitlines()
    distinct = len(set(source))
    lines = all_lines(settings.data_dir)
    assert len(lines) == distinct
    ids = [orjson.loads(x)["event_id"] for x in lines]
    assert len(set(ids)) == distinct
    assert info.accepted + info.duplicates == len(source) and info.duplicates >= killed_at[-1]
    # Same content as the file, each record once.
    want = Counter(orjson.loads(x).get("user_message") for x in set(source))
    got = Counter(orjson.loads(x)["user_message"] for x in lines)
    assert want == got
    again = ingest_file(settings, src, progress=False)
    assert (again.accepted, again.duplicates) == (0, len(source))


def test_partial_last_line_left_by_a_kill_is_stored_again_not_counted_duplicate(
    settings: Settings, tmp_path: Path
) -> None:
    """The mechanism behind a kill that lands between two writes of one batch, made deterministic."""
    # Every record carries its ts: a record without one takes its file's mtime, and the
    # first 25 lines are loaded here from a second file.
    src = write_jsonl(tmp_path / "bulk.jsonl", samples.generate(days=1, per_day=40, seed=11))
    source = src.read_bytes().splitlines()
    head = write_jsonl(tmp_path / "head.jsonl", source[:25])
    assert ingest_file(settings, head, progress=False).accepted == 25
    (segment,) = segment_files(settings.data_dir)
    with open(segment, "ab") as fh:
        fh.write(source[25][: len(source[25]) // 2])  # the writer died mid-line
    assert len(all_lines(settings.data_dir)) == 26  # a naive count takes the fragment for a line
    assert len(complete_lines(settings.data_dir)) == 25
    info = ingest_file(settings, src, progress=False)
    assert (info.accepted, info.duplicates, info.rejected) == (15, 25, 0)
    lines = complete_lines(settings.data_dir)
    assert len(lines) == len(all_lines(settings.data_dir)) == 40
    assert len({orjson.loads(x)["event_id"] for x in lines}) == 40
    assert (settings.quarantine_dir / "torn.jsonl").exists()


def test_rerun_of_a_file_without_ids_is_idempotent(settings: Settings, tmp_path: Path) -> None:
    src = _source(tmp_path, 2, 500)
    first = ingest_file(settings, src, progress=False)
    second = ingest_file(settings, src, progress=False)
    assert (first.accepted, first.duplicates, first.rejected) == (1000, 0, 0)
    assert (second.accepted, second.duplicates) == (0, 1000)
    assert len(all_lines(settings.data_dir)) == 1000


def test_stdin_stream_ingest(settings: Settings, tmp_path: Path) -> None:
    src = _source(tmp_path, 1, 50)
    with open(src, "rb") as fh:
        info = ingest_file(settings, fh, progress=False)
    assert info.accepted == 50 and info.source


def test_bulk_ids_are_the_documented_derived_ids() -> None:
    from tiermem.ingest.pipeline import line_event_id

    from tiermem.ids import derived_event_id, parse_ts

    for ts in ("1970-01-01T00:00:00.000Z", "2026-11-20T10:00:00.123Z", "9999-12-31T23:59:59.999Z"):
        line = '{"user_message": "héllo \\"x\\""}'.encode()
        assert line_event_id(parse_ts(ts), line) == derived_event_id(parse_ts(ts), "ingest", line.decode())
