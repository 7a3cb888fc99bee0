"""The id index may lag behind a writer's own segment tail; no duplicate check ever sees that lag.

The writers here are real processes: one keeps ids only in memory while another
checks for them, one is killed with SIGKILL mid-run, and the index must answer as
if every append had been indexed.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import orjson
from helpers_log import PYTHON, REPO, OtherWriter, interaction, segment_files
from tiermem.log.seal import StreamLock, seal

from tiermem.eventlog import EventLog, sealing_mark
from tiermem.idindex import INDEX_NAME, LAG_NAME, LagList
from tiermem.settings import Settings, resolve_settings

# Appends `n` records (ids "<who>-<k>") with fsync "always", printing each id once acknowledged;
# then waits for a line on stdin before closing (or until it is killed).
WRITER = """
import sys
from tiermem.eventlog import EventLog, sealing_mark
from tiermem.settings import resolve_settings

settings = resolve_settings(data_dir=sys.argv[1], env={}, fsync="always")
who, n = sys.argv[2], int(sys.argv[3])
with EventLog(settings) as log:
    for k in range(n):
        eid = f"{who}-{k}"
        log.append({"type": "interaction", "agent_id": who, "event_id": eid,
                    "ts": "2026-03-01T10:00:00.000Z", "user_message": "m" * (1 + k % 50),
                    "agent_response": "r" * (k % 300)})
        sys.stdout.write(eid + "\\n")
        sys.stdout.flush()
    sys.stdout.write("done\\n")
    sys.stdout.flush()
    sys.stdin.readline()
"""


def _writer(settings: Settings, tmp_path: Path, who: str, n: int) -> subprocess.Popen[bytes]:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    return subprocess.Popen(
        [str(PYTHON), str(script), str(settings.data_dir), who, str(n)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )


def _indexed(settings: Settings) -> dict[str, str]:
    with sqlite3.connect(settings.log_dir / INDEX_NAME) as conn:
        return dict(conn.execute("SELECT event_id, segment FROM event_ids").fetchall())


def _listed(settings: Settings) -> frozenset[str] | None:
    lag = LagList(settings.log_dir)
    try:
        return lag.read()
    finally:
        lag.close()


def test_ids_a_live_writer_holds_only_in_memory_are_duplicates_for_another_process(
    settings: Settings, tmp_path: Path
) -> None:
    proc = _writer(settings, tmp_path, "w", 40)
    assert proc.stdout is not None and proc.stdin is not None
    acked = [proc.stdout.readline().decode().strip() for _ in range(41)]
    assert acked[-1] == "done"
    try:
        # The writer is alive with its tail unindexed: the index has not got its ids yet.
        [segment] = _listed(settings) or [None]
        assert segment is not None and segment.startswith("interactions/date=2026-03-01/")
        assert not set(acked[:-1]) & set(_indexed(settings))
        with EventLog(replace(settings, fsync="always")) as log:
            # Another day first (a segment the writer never touches), then its own day.
            other = log.append(interaction(2, event_id="w-7", ts="2026-03-04T11:00:00.000Z"))
            same = log.append(interaction(1, event_id="w-3", ts="2026-03-01T11:00:00.000Z"))
            new = log.append(interaction(3, event_id="x-1", ts="2026-03-04T11:00:00.000Z"))
            assert same.duplicate and other.duplicate and not new.duplicate
            # The check brought the listed tail into the index.
            assert set(acked[:-1]) <= set(_indexed(settings))
    finally:
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        assert proc.wait(timeout=60) == 0
    # Both closed: every id indexed, nothing listed.
    assert _listed(settings) == frozenset()
    assert set(acked[:-1]) | {"x-1"} <= set(_indexed(settings))


def test_a_sigkilled_writer_s_unindexed_tail_is_found_by_the_next_writers(
    settings: Settings, tmp_path: Path
) -> None:
    proc = _writer(settings, tmp_path, "k", 10**6)
    assert proc.stdout is not None
    acked = [proc.stdout.readline().decode().strip() for _ in range(200)]
    proc.send_signal(signal.SIGKILL)
    acked += [x for x in proc.stdout.read().decode().split("\n") if x]
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert len(acked) >= 200 and all(acked)
    listed = _listed(settings)
    assert listed  # the killed writer's segment is still listed: its tail may be unindexed
    with EventLog(replace(settings, fsync="always")) as log:
        # Another day first: this writer never opens the killed writer's segment.
        again = log.append_many(
            [interaction(i, event_id=eid, ts="2026-03-05T10:00:00.000Z") for i, eid in enumerate(acked)]
        )
        assert again.duplicates == len(acked) and again.accepted == 0
        same_day = log.append_many(
            [interaction(i, event_id=eid, ts="2026-03-01T10:00:00.000Z") for i, eid in enumerate(acked)]
        )
        assert same_day.duplicates == len(acked)
    lines = [x for p in segment_files(settings.data_dir) for x in p.read_bytes().split(b"\n") if x]
    counts = Counter(orjson.loads(x)["event_id"] for x in lines if x.endswith(b"}"))
    assert set(acked) <= set(counts) and max(counts.values()) == 1
    assert set(acked) <= set(_indexed(settings))


def test_sealing_a_lagging_segment_keeps_its_ids_in_the_index(settings: Settings, tmp_path: Path) -> None:
    with EventLog(replace(settings, fsync="always")) as log:
        for i in range(30):
            log.append(interaction(i, event_id=f"s-{i}", ts="2026-03-01T10:00:00.000Z"))
        assert _listed(settings)
        assert not {f"s-{i}" for i in range(30)} & set(_indexed(settings))
        seal(settings, before="2026-03-02")
        assert segment_files(settings.data_dir) == []  # the JSONL form is gone
        assert {f"s-{i}" for i in range(30)} <= set(_indexed(settings))
        assert _listed(settings) == frozenset()
        # The same log, after the seal: a re-sent record is a duplicate, a new one lands in a new segment.
        assert log.append(interaction(3, event_id="s-3", ts="2026-03-01T10:00:00.000Z")).duplicate
        assert not log.append(interaction(31, event_id="s-31", ts="2026-03-01T10:00:00.000Z")).duplicate


def test_a_damaged_lag_list_makes_checks_read_every_segment_and_is_rebuilt(settings: Settings) -> None:
    with EventLog(replace(settings, fsync="always")) as log:
        for i in range(5):
            log.append(interaction(i, event_id=f"d-{i}", ts="2026-03-01T10:00:00.000Z"))
        (settings.log_dir / LAG_NAME).write_bytes(b"\x07" * 64)  # as if a torn write
        with EventLog(replace(settings, fsync="always")) as other:
            for i in range(5):
                assert other.append(
                    interaction(i, event_id=f"d-{i}", ts="2026-03-03T10:00:00.000Z")
                ).duplicate
            # The check that read every segment rebuilt the record (then unlisted what it indexed).
            assert _listed(settings) is not None
            assert not other.append(interaction(7, event_id="d-7", ts="2026-03-03T10:00:00.000Z")).duplicate
        assert not log.append(interaction(9, event_id="d-9", ts="2026-03-01T10:00:00.000Z")).duplicate
    assert {f"d-{i}" for i in (0, 1, 2, 3, 4, 7, 9)} <= set(_indexed(settings))


def test_a_writer_meeting_a_damaged_list_indexes_the_ids_it_held(settings: Settings) -> None:
    with EventLog(replace(settings, fsync="always")) as log:
        for i in range(5):
            log.append(interaction(i, event_id=f"h-{i}", ts="2026-03-01T10:00:00.000Z"))
        assert not set(_indexed(settings)) & {f"h-{i}" for i in range(5)}  # held in memory only
        (settings.log_dir / LAG_NAME).write_bytes(b"\x07" * 64)
        # Its next append moves the segment's indexed offset past them: they go with it.
        assert not log.append(interaction(5, event_id="h-5", ts="2026-03-01T10:00:00.000Z")).duplicate
        assert {f"h-{i}" for i in range(6)} <= set(_indexed(settings))
        with EventLog(replace(settings, fsync="always")) as other:
            for i in range(6):
                assert other.append(
                    interaction(i, event_id=f"h-{i}", ts="2026-03-04T10:00:00.000Z")
                ).duplicate


def test_a_full_lag_list_makes_writers_index_as_they_write(settings: Settings) -> None:
    # Segments of many days, each lagging, until the list (one page) has no room.
    with EventLog(replace(settings, fsync="none")) as log:
        for day in range(1, 29):
            for month in (1, 2, 3):
                log.append(
                    interaction(
                        day, event_id=f"f-{month}-{day}", ts=f"2026-{month:02d}-{day:02d}T10:00:00.000Z"
                    )
                )
        listed = _listed(settings)
        assert listed is not None and 0 < len(listed) < 84
        ids = set(_indexed(settings))
        assert any(f"f-{m}-{d}" in ids for m in (1, 2, 3) for d in range(1, 29))  # the overflow was indexed
    with EventLog(resolve_settings(data_dir=settings.data_dir, env={})) as log:
        replay = log.append_many(
            [
                interaction(d, event_id=f"f-{m}-{d}", ts="2026-04-01T10:00:00.000Z")
                for m in (1, 2, 3)
                for d in range(1, 29)
            ]
        )
        assert replay.duplicates == 84


def test_a_writer_that_skips_the_seal_marks_still_sees_a_seal_begin(settings: Settings) -> None:
    with EventLog(replace(settings, fsync="always")) as log:
        for i in range(3):  # listed, and its marks checked under the current list: the next appends skip them
            log.append(interaction(i, event_id=f"m-{i}", ts="2026-03-01T10:00:00.000Z"))
        [jsonl] = segment_files(settings.data_dir)
        # What a seal does first, from its own log: under the stream lock, the segment indexed
        # to its end (and so unlisted), then marked as being sealed.
        with EventLog(settings) as sealer, StreamLock(settings, "interactions"):
            fd = os.open(jsonl, os.O_RDWR)
            try:
                sealer.repair_tail("interactions", jsonl.parent.name, jsonl.stem, fd)
            finally:
                os.close(fd)
            sealing_mark(jsonl).touch()
        assert _listed(settings) == frozenset()
        size = jsonl.stat().st_size
        late = log.append(interaction(5, event_id="m-5", ts="2026-03-01T11:00:00.000Z"))
        assert jsonl.stat().st_size == size  # the segment being sealed was not written to
        assert late.segment != f"interactions/{jsonl.parent.name}/{jsonl.stem}"
        assert log.append(interaction(1, event_id="m-1", ts="2026-03-01T10:00:00.000Z")).duplicate


def test_threads_writing_two_streams_keep_every_held_tail_listed(settings: Settings) -> None:
    # One process, one lag-list descriptor, two threads changing it at once: a lost change would
    # leave a segment whose ids only this process holds off the list, unseen by other processes.
    days = 25  # two streams x 25 days of segment names fit the one-page list

    errors: list[BaseException] = []

    def write(kind: str) -> None:
        try:
            append_days(kind)
        except BaseException as exc:  # a thread's failure must fail the test, not only warn
            errors.append(exc)

    def append_days(kind: str) -> None:
        for d in range(days):
            ts = f"2026-05-{d + 1:02d}T10:00:00.000Z"
            if kind == "interaction":
                log.append(interaction(d, event_id=f"t-i-{d}", ts=ts))
            else:
                log.append(
                    {
                        "type": "session_ended",
                        "agent_id": "a",
                        "event_id": f"t-s-{d}",
                        "session_id": "x",
                        "ts": ts,
                    }
                )

    for round_ in range(3):  # each round on a new log: the first appends also create the index
        fresh = resolve_settings(data_dir=settings.data_dir / f"round-{round_}", env={}, fsync="none")
        with EventLog(fresh) as log:
            threads = [threading.Thread(target=write, args=(k,)) for k in ("interaction", "session")]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors
            listed = _listed(fresh)
            assert listed is not None
            held = {s for w in log._writers.values() for s, tail in w.tails.items() if tail.ids}
            assert held and held <= listed


def test_a_writer_that_unlists_a_segment_it_then_appends_to_lists_it_again(
    settings: Settings, tmp_path: Path
) -> None:
    # This process lists its day's segment; another process's first append to that day catches
    # the segment up, unlists it and appends to it, holding its id in memory: the segment must be
    # listed again, or a check from a third segment never reads that id.
    with EventLog(replace(settings, fsync="always")) as log:
        for k in range(3):
            log.append(interaction(k, event_id=f"p-{k}", ts="2026-03-01T10:00:00.000Z"))
        other = OtherWriter(tmp_path, settings)
        try:
            other.append("c-0", "01")
            assert any("date=2026-03-01" in s for s in _listed(settings) or ())
            again = log.append(interaction(5, event_id="c-0", ts="2026-03-02T10:00:00.000Z"))
            assert again.duplicate
        finally:
            other.close()
    lines = [x for p in segment_files(settings.data_dir) for x in p.read_bytes().split(b"\n") if x]
    assert Counter(orjson.loads(x)["event_id"] for x in lines)["c-0"] == 1
