"""Robustness: late appends while sealing, report names, a full or read-only disk."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pytest
from helpers_log import interaction, run_cli, write_jsonl
from tiermem.ingest.pipeline import ingest_file
from tiermem.log import seal as seal_module
from tiermem.log.seal import seal
from tiermem.log.sql import run_query
from tiermem.reviewer.job import report_name, report_paths, run_review

from tiermem import durable_files
from tiermem.errors import StorageError
from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings

DAY = "2026-03-02"


def _turn(i: int, **fields: Any) -> dict[str, Any]:
    return interaction(i, ts=f"{DAY}T10:00:{i % 60:02d}.{i % 1000:03d}Z", **fields)


def _count(settings: Settings) -> int:
    return int(run_query(settings, "SELECT count(*) FROM interactions").rows[0][0])


def _files(settings: Settings, suffix: str) -> list[Path]:
    return sorted((settings.log_dir / "interactions" / f"date={DAY}").glob(f"*{suffix}"))


# ------------------------------------------------------------------ late appends


def test_a_late_append_while_a_day_is_being_sealed_goes_to_a_new_segment(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with EventLog(settings) as log:
        log.append_many([_turn(i, event_id=f"early-{i}") for i in range(50)])
    convert = seal_module.write_parquet_from_jsonl
    late = EventLog(settings)
    landed: list[str] = []

    def convert_with_a_late_append(con: Any, stream: str, src: Path, dst: Path) -> None:
        # Every attempt to convert meets a new event for the same day: without the
        # "being sealed" mark it would grow the segment each time (and the seal give up).
        res = late.append(_turn(100 + len(landed), event_id=f"late-{len(landed)}"))
        landed.append(res.segment)
        convert(con, stream, src, dst)

    monkeypatch.setattr(seal_module, "write_parquet_from_jsonl", convert_with_a_late_append)
    info = seal(settings, before="2099-01-01")
    late.close()
    assert info.sealed_segments == 1 and info.sealed_rows == 50
    assert len(landed) == 1 and landed[0].split("/")[-1] != info.segments[0].segment.split("/")[-1]
    assert len(_files(settings, ".jsonl")) == 1 and not list(
        (settings.log_dir / "interactions" / f"date={DAY}").glob(".*.sealing")
    )
    assert _count(settings) == 51
    monkeypatch.setattr(seal_module, "write_parquet_from_jsonl", convert)
    again = seal(settings, before="2099-01-01")
    assert again.sealed_segments == 1 and again.sealed_rows == 1
    assert len(_files(settings, ".parquet")) == 2 and not _files(settings, ".jsonl")
    assert _count(settings) == 51


def test_a_writer_racing_the_seal_loses_nothing(settings: Settings) -> None:
    with EventLog(settings) as log:
        log.append_many([_turn(i, event_id=f"first-{i}") for i in range(2000)])
    stop = threading.Event()
    written: list[int] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            with EventLog(settings) as log:
                k = 0
                while not stop.is_set() or k < 20:
                    log.append(_turn(5000 + k, event_id=f"race-{k}"))
                    written.append(k)
                    k += 1
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        seal(settings, before="2099-01-01")
        seal(settings, before="2099-01-01")
    finally:
        stop.set()
        thread.join()
    assert not errors
    seal(settings, before="2099-01-01")
    assert _count(settings) == 2000 + len(written)
    assert not _files(settings, ".jsonl")


def test_a_late_append_into_a_sealed_day_is_sealed_next_time(settings: Settings) -> None:
    with EventLog(settings) as log:
        log.append_many([_turn(i, event_id=f"a-{i}") for i in range(10)])
    seal(settings, before="2099-01-01")
    with EventLog(settings) as log:
        log.append(_turn(77, event_id="late-one"))
    assert len(_files(settings, ".jsonl")) == 1 and _count(settings) == 11
    assert seal(settings, before="2099-01-01").sealed_rows == 1
    assert len(_files(settings, ".parquet")) == 2 and _count(settings) == 11


# ------------------------------------------------------------------ report names


def test_report_file_names_never_collide(settings: Settings, tmp_path: Path) -> None:
    agents = ["bot.v1", "bot.v2", "bot", "Bot", "a/b", "a_b", "..", "x" * 300, "x" * 301]
    rows = [_turn(i, agent_id=a, event_id=f"r-{i}") for i, a in enumerate(agents)]
    ingest_file(settings, write_jsonl(tmp_path / "r.jsonl", rows), progress=False)
    names = [report_name(a) for a in agents]
    assert len(set(names)) == len(agents) and len({n.lower() for n in names}) == len(agents)
    assert all("/" not in n and "." not in n and len(n) <= 120 for n in names)
    info = run_review(settings, day=DAY)
    assert info.reports == len(agents)
    for agent in agents:
        paths = report_paths(settings, DAY, agent)
        assert orjson.loads(paths["json"].read_bytes())["agent_id"] == agent
        assert paths["png"].exists()
    folder = report_paths(settings, DAY, "bot")["json"].parent
    assert len(list(folder.glob("*.json"))) == len(agents)


# ------------------------------------------------------------------ a full disk


def _whole_lines_only(settings: Settings) -> None:
    for path in settings.log_dir.rglob("seg-*.jsonl"):
        data = path.read_bytes()
        assert not data or data.endswith(b"\n"), f"{path} ends in a partial line"
        for line in data.splitlines():
            orjson.loads(line)


def test_disk_full_during_ingest_leaves_whole_records_and_says_so(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Three days: one write per day and batch, so the third write is the third day's.
    days = ["2026-03-02", "2026-03-03", "2026-03-04"]
    rows = [
        interaction(i, event_id=f"t-{i}", ts=f"{days[i // 100]}T10:00:00.{i % 1000:03d}Z") for i in range(300)
    ]
    src = write_jsonl(tmp_path / "t.jsonl", rows)
    real = durable_files.write_all
    calls = {"n": 0}

    def fills_up(fd: int, payload: bytes) -> None:
        calls["n"] += 1
        if calls["n"] >= 3:  # the third write finds the disk full half-way through
            real(fd, payload[: len(payload) // 2 + 7])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, payload)

    monkeypatch.setattr(durable_files, "write_all", fills_up)
    with pytest.raises(StorageError) as err:
        ingest_file(settings, src, progress=False, workers=0)
    text = str(err.value)
    assert "disk full" in text and "run the same ingest again" in text and "line 301" in text
    assert "stays readable" in text
    _whole_lines_only(settings)
    stored = _count(settings)
    assert 200 < stored < 300  # two days, plus the whole lines of the third before the disk filled
    monkeypatch.setattr(durable_files, "write_all", real)
    # Room again: the same ingest completes the load, each record exactly once.
    info = ingest_file(settings, src, progress=False, workers=0)
    assert info.accepted + info.duplicates == 300 and info.rejected == 0
    assert _count(settings) == 300
    ids = [
        orjson.loads(x)["event_id"]
        for p in settings.log_dir.rglob("seg-*.jsonl")
        for x in p.read_bytes().splitlines()
    ]
    assert len(ids) == len(set(ids)) == 300


def test_disk_full_through_the_cli_is_one_line(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write_jsonl(tmp_path / "t.jsonl", [_turn(i, event_id=f"c-{i}") for i in range(10)])

    def full(fd: int, payload: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(durable_files, "write_all", full)
    code, out, err = run_cli(capsys, settings.data_dir, ["ingest", str(src)])
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1 and "disk full" in err
    code, out, err = run_cli(
        capsys, settings.data_dir, ["append", "--agent", "a", "--message", "q", "--response", "r"]
    )
    assert code == 1 and len(err.strip().splitlines()) == 1 and "disk full" in err


def test_disk_full_during_seal_leaves_the_segment_readable(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with EventLog(settings) as log:
        log.append_many([_turn(i, event_id=f"s-{i}") for i in range(40)])
    before = {p: p.read_bytes() for p in _files(settings, ".jsonl")}

    def no_room(con: Any, stream: str, src: Path, dst: Path) -> None:
        dst.write_bytes(b"PAR1 half a file")
        raise duckdb.IOException("IO Error: Could not write file: No space left on device")

    monkeypatch.setattr(seal_module, "write_parquet_from_jsonl", no_room)
    with pytest.raises(StorageError, match="disk full") as err:
        seal(settings, before="2099-01-01")
    assert "unchanged" in str(err.value) and "run `tiermem seal` again" in str(err.value)
    folder = settings.log_dir / "interactions" / f"date={DAY}"
    assert {p: p.read_bytes() for p in _files(settings, ".jsonl")} == before
    assert not list(folder.glob(".*")) and not _files(settings, ".parquet")
    assert _count(settings) == 40
    code, _out, err_text = run_cli(capsys, settings.data_dir, ["seal", "--before", "2099-01-01"])
    assert code == 1 and len(err_text.strip().splitlines()) == 1 and "disk full" in err_text
    monkeypatch.undo()
    assert seal(settings, before="2099-01-01").sealed_rows == 40 and _count(settings) == 40


# ------------------------------------------------------------------ real small and read-only file systems


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A real 1 MB tmpfs (needs root and mount rights; skipped otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_real_full_disk(small_fs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = resolve_settings(data_dir=small_fs / "data", env={})
    big = write_jsonl(
        tmp_path / "big.jsonl", [_turn(i, event_id=f"b-{i}", agent_response="r" * 2000) for i in range(2000)]
    )
    code, out, err = run_cli(capsys, settings.data_dir, ["ingest", str(big), "--workers", "0"])
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "disk full" in err and "Traceback" not in err
    _whole_lines_only(settings)
    stored = _count(settings)  # the log is readable
    assert 0 < stored < 2000
    code, out, _err = run_cli(
        capsys, settings.data_dir, ["sql", "--json", "SELECT count(*) AS n FROM interactions"]
    )
    assert code == 0 and orjson.loads(out) == [{"n": stored}]


def test_a_real_read_only_data_root(
    small_fs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = resolve_settings(data_dir=small_fs / "data", env={})
    src = write_jsonl(tmp_path / "t.jsonl", [_turn(i, event_id=f"ro-{i}") for i in range(20)])
    assert run_cli(capsys, settings.data_dir, ["ingest", str(src)])[0] == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    for args in (
        ["append", "--agent", "a", "--message", "q", "--response", "r"],
        ["ingest", str(src)],
        ["seal", "--before", "2099-01-01"],
    ):
        code, out, err = run_cli(capsys, settings.data_dir, args)
        assert code == 1 and len(err.strip().splitlines()) == 1, (args, err)
        assert "read-only file system" in err and "Traceback" not in err, (args, err)
    code, out, _err = run_cli(
        capsys, settings.data_dir, ["sql", "--json", "SELECT count(*) AS n FROM interactions"]
    )
    assert code == 0 and orjson.loads(out) == [{"n": 20}]
