"""The one-step append to a writer's own segment behaves exactly as the full protocol.

A writer that appends again to the segment it last appended to skips the
protocol when nothing has moved. These tests make things move between appends
(another process writing to the same segment or holding ids in memory in
another, a file replaced under its name, another day, a duplicate) and check
that every answer, line number and stored byte is what the full path gives;
and that a writer killed with SIGKILL in the middle of one-step appends loses
no acknowledged record.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers_log import PYTHON, REPO, OtherWriter, interaction, segment_files

from tiermem import steady_append
from tiermem.eventlog import AppendResult, EventLog
from tiermem.settings import Settings, resolve_settings


@pytest.fixture
def steady_count(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many appends took the one-step path, from Python or in the compiled whole append
    (both wrapped, not changed)."""
    count = [0]
    real = steady_append.append_steady
    real_appender = steady_append.appender

    def counted(*args: Any, **kwargs: Any) -> AppendResult | None:
        out = real(*args, **kwargs)
        count[0] += out is not None
        return out

    def counted_appender(log: Any) -> Any:
        whole = real_appender(log)
        if whole is None:
            return None

        def append(record: dict[str, Any]) -> Any:
            out = whole(record)
            count[0] += type(out) is AppendResult
            return out

        return append

    monkeypatch.setattr(steady_append, "append_steady", counted)
    monkeypatch.setattr(steady_append, "appender", counted_appender)
    yield count


def _ops(log: EventLog, settings: Settings, tmp_path: Path) -> list[tuple[Any, ...]]:
    """A run of appends with things moving between them; (duplicate, day, line) of each answer."""
    out: list[tuple[Any, ...]] = []

    def put(i: int, eid: str, day: int = 1) -> None:
        r = log.append(interaction(i, event_id=eid, ts=f"2026-03-0{day}T10:00:00.000Z"))
        out.append((r.duplicate, r.segment.split("/")[1] if r.segment else "", r.line))

    for k in range(5):
        put(k, f"p-{k}")
    put(9, "p-2")  # a duplicate held in the writer's own tail
    # Another process appends to the same segment, between this writer's appends. Its first
    # append unlists and lists the segment again; its second moves nothing but the file's size.
    other = OtherWriter(tmp_path, settings)
    try:
        other.append("c-0", "01")
        put(11, "p-5")
        other.append("c-1", "01")
        put(12, "p-6")  # after its line
        put(10, "c-1")  # its id: a duplicate
    finally:
        other.close()
    put(13, "p-7", day=2)  # another day, then back
    put(14, "p-8")
    put(15, "p-7")  # a duplicate from the other day's tail
    # The file replaced under its name (as an erasure does): its first two lines kept.
    (seg,) = [p for p in segment_files(settings.data_dir) if "date=2026-03-01" in str(p)]
    kept = b"".join(x + b"\n" for x in seg.read_bytes().split(b"\n")[:2])
    tmp = seg.with_name(".tmp")
    tmp.write_bytes(kept)
    os.replace(tmp, seg)
    put(16, "p-9")
    put(17, "p-10")
    return out


def _day_lines(settings: Settings) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for path in segment_files(settings.data_dir):
        lines = [orjson.loads(x)["event_id"] for x in path.read_bytes().split(b"\n") if x]
        out.setdefault(path.parent.name, []).extend(lines)
    return out


def test_answers_and_bytes_are_those_of_the_full_path_whatever_moves_between_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steady_count: list[int]
) -> None:
    runs = {}
    for name in ("steady", "step", "python", "full"):
        settings = resolve_settings(data_dir=tmp_path / name, env={}, fsync="always")
        if name == "step":  # the compiled one step called from Python, not the whole append
            monkeypatch.setattr(steady_append, "appender", lambda log: None)
        if name == "python":  # the one step in Python alone, as without the compiled module
            monkeypatch.setattr(steady_append, "_steady", None)
        if name == "full":  # the writer never keeps a state to skip from
            monkeypatch.setattr(steady_append, "remember", lambda *a, **k: None)
        with EventLog(settings) as log:
            runs[name] = (_ops(log, settings, tmp_path), _day_lines(settings))
    assert runs["steady"] == runs["full"] == runs["python"] == runs["step"]
    answers, lines = runs["steady"]
    assert [a[0] for a in answers] == [False] * 5 + [
        True,
        False,
        False,
        True,
        False,
        False,
        True,
        False,
        False,
    ]
    assert [a[2] for a in answers[6:8]] == [6, 8]  # after the other process's lines
    assert lines["date=2026-03-01"] == ["p-0", "p-1", "p-9", "p-10"]  # the replaced file, then the new lines
    assert lines["date=2026-03-02"] == ["p-7"]
    # The one step for the appends after the second (the first two list the segment).
    assert steady_count[0] >= 3


def test_ids_another_process_holds_in_memory_are_duplicates_for_a_writer_in_one_step(
    settings: Settings, tmp_path: Path, steady_count: list[int]
) -> None:
    with EventLog(replace(settings, fsync="always")) as log:
        for k in range(3):
            assert not log.append(interaction(k, event_id=f"p-{k}", ts="2026-03-02T10:00:00.000Z")).duplicate
        taken = steady_count[0]
        assert taken >= 1
        other = OtherWriter(tmp_path, settings)
        try:
            other.append("h-0", "04")  # held in its memory, its segment listed
            # This writer's own day: the lag list moved, so the full path runs and reads the other's tail.
            again = log.append(interaction(7, event_id="h-0", ts="2026-03-02T10:00:00.000Z"))
            assert again.duplicate
            assert steady_count[0] == taken
        finally:
            other.close()
        for k in range(3, 6):
            assert not log.append(interaction(k, event_id=f"p-{k}", ts="2026-03-02T10:00:00.000Z")).duplicate
        assert steady_count[0] > taken  # and back to one step once things are still again
    counts = Counter(x for lines in _day_lines(settings).values() for x in lines)
    assert max(counts.values()) == 1 and counts["h-0"] == 1


# Appends with fsync "always", printing each id once acknowledged and, once, that the
# one-step path was taken; killed with SIGKILL mid-run.
KILLED = """
import sys
from tiermem import steady_append
from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings

from tiermem.appended import AppendResult
real = steady_append.append_steady
real_appender = steady_append.appender
said = []
def say():
    if not said:
        said.append(1)
        sys.stdout.write("steady\\n")
def counted(*args, **kwargs):
    out = real(*args, **kwargs)
    if out is not None:
        say()
    return out
def counted_appender(log):
    whole = real_appender(log)
    if whole is None:
        return None
    def append(record):
        out = whole(record)
        if type(out) is AppendResult:
            say()
        return out
    return append
steady_append.append_steady = counted
steady_append.appender = counted_appender
settings = resolve_settings(data_dir=sys.argv[1], env={}, fsync="always")
with EventLog(settings) as log:
    k = 0
    while True:
        eid = f"k-{k}"
        log.append({"type": "interaction", "agent_id": "k", "event_id": eid,
                    "ts": "2026-03-01T10:00:00.000Z", "user_message": "m" * (1 + k % 50),
                    "agent_response": "r" * (k % 300)})
        sys.stdout.write(eid + "\\n")
        sys.stdout.flush()
        k += 1
"""


def test_a_writer_killed_in_one_step_appends_loses_no_acknowledged_record(
    settings: Settings, tmp_path: Path
) -> None:
    script = tmp_path / "killed.py"
    script.write_text(KILLED)
    proc = subprocess.Popen(
        [str(PYTHON), str(script), str(settings.data_dir)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    said = [proc.stdout.readline().decode().strip() for _ in range(300)]
    proc.send_signal(signal.SIGKILL)
    said += [x for x in proc.stdout.read().decode().split("\n") if x]
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert "steady" in said
    acked = [x for x in said if x != "steady"]
    assert len(acked) >= 299
    with EventLog(replace(settings, fsync="always")) as log:
        again = log.append_many(
            [interaction(i, event_id=eid, ts="2026-03-01T10:00:00.000Z") for i, eid in enumerate(acked)]
        )
        assert again.duplicates == len(acked) and again.accepted == 0
    data = b"".join(p.read_bytes() for p in segment_files(settings.data_dir))
    counts = Counter(orjson.loads(x)["event_id"] for x in data.split(b"\n") if x.endswith(b"}"))
    assert set(acked) <= set(counts) and max(counts.values()) == 1


# Sends the same ids as the other copies of itself, in its own order; prints how many it stored.
RACER = """
import random, sys
from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings
settings = resolve_settings(data_dir=sys.argv[1], env={}, fsync=sys.argv[3])
ids = [f"s-{k}" for k in range(150)]
random.Random(int(sys.argv[2])).shuffle(ids)
stored = 0
with EventLog(settings) as log:
    for eid in ids:
        r = log.append({"type": "interaction", "agent_id": "s", "event_id": eid,
                        "ts": "2026-03-01T10:00:00.000Z", "user_message": "m", "agent_response": "r"})
        stored += not r.duplicate
print(stored)
"""


@pytest.mark.parametrize("fsync", ["always", "group"])
def test_processes_sending_the_same_ids_at_once_store_each_once(
    settings: Settings, tmp_path: Path, fsync: str
) -> None:
    # Each appends after the others' lines in one segment, which it takes into its own tail.
    script = tmp_path / "racer.py"
    script.write_text(RACER)
    procs = [
        subprocess.Popen(
            [str(PYTHON), str(script), str(settings.data_dir), str(seed), fsync],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
        )
        for seed in range(3)
    ]
    stored = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0
        stored.append(int(out))
    assert sum(stored) == 150
    counts = Counter(x for lines in _day_lines(settings).values() for x in lines)
    assert counts == Counter({f"s-{k}": 1 for k in range(150)})


def test_ids_a_bulk_write_sent_to_the_index_are_duplicates_for_the_next_one_step_append(
    tmp_path: Path, steady_count: list[int]
) -> None:
    # A bulk write on the same log pushes the writer's tail (its own ids with it) to the index
    # while a one-step state is kept: the next append of one of those ids must be refused.
    from tiermem.events import validate

    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    log = EventLog(settings)
    try:
        ts = "2026-03-01T10:00:00.000Z"
        for k in range(3):
            log.append(interaction(k, event_id=f"a-{k}", ts=ts))
        assert steady_count[0] >= 1  # the one-step path was in use
        events = [validate(interaction(k, event_id=f"b-{k}", ts=ts)) for k in range(4100)]
        log.append_encoded(
            "interactions",
            [e["event_id"] for e in events],
            ["date=2026-03-01"] * len(events),
            [orjson.dumps(e) + b"\n" for e in events],
        )
        assert log.append(interaction(7, event_id="b-5", ts=ts)).duplicate
        assert log.append(interaction(8, event_id="a-1", ts=ts)).duplicate
        assert not log.append(interaction(9, event_id="c-1", ts=ts)).duplicate
    finally:
        log.close()
    assert Counter(i for ids in _day_lines(settings).values() for i in ids)["b-5"] == 1


def test_a_writer_idle_after_a_one_step_append_holds_no_read_transaction_on_the_index(
    tmp_path: Path, steady_count: list[int]
) -> None:
    # A read transaction kept open between appends would pin the index's write-ahead log (no
    # checkpoint could reset it) for as long as the writer stays idle.
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    log = EventLog(settings)
    try:
        for k in range(4):
            log.append(interaction(k, event_id=f"a-{k}", ts="2026-03-01T10:00:00.000Z"))
        assert steady_count[0] >= 2
        conns = [c for w in log._writers.values() for c in (w._conn, w._snap) if c is not None]
        assert conns and not any(c.in_transaction for c in conns)
    finally:
        log.close()


def test_the_one_step_goes_on_after_the_writer_s_first_midnight_and_its_first_other_stream(
    settings: Settings, steady_count: list[int]
) -> None:
    # The events carry their own times (this test's clock): day 1, then day 2, then a session
    # event (another stream), then day 2 again. Each change lists one more segment.
    def run(day: int, first: int) -> int:
        before = steady_count[0]
        for k in range(first, first + 20):
            r = log.append(interaction(k, event_id=f"d{day}-{k}", ts=f"2026-03-0{day}T10:00:00.000Z"))
            assert not r.duplicate
        return steady_count[0] - before

    with EventLog(replace(settings, fsync="always")) as log:
        assert run(1, 0) >= 18
        assert run(2, 0) >= 18  # was 0: the day before's segment stays listed
        log.append(
            {
                "type": "session_ended",
                "agent_id": "a",
                "session_id": "s",
                "event_id": "se-0",
                "ts": "2026-03-02T10:00:01.000Z",
            }
        )
        assert run(2, 20) >= 18  # was 0: the session's segment stays listed
        assert len(log._lag_list().read() or ()) == 3
        # Ids in the other listed segments are still duplicates for an append in one step.
        taken = steady_count[0]
        assert log.append(interaction(1, event_id="d1-3", ts="2026-03-02T10:00:00.000Z")).duplicate
        assert log.append(interaction(1, event_id="se-0", ts="2026-03-02T10:00:00.000Z")).duplicate
        assert steady_count[0] == taken  # the lookups sent both to the full path
        assert run(2, 40) >= 18
    counts = Counter(x for lines in _day_lines(settings).values() for x in lines)
    assert max(counts.values()) == 1 and "se-0" not in counts and len(counts) == 80


def test_another_stream_s_segment_grown_by_another_process_sends_the_writer_to_the_full_path(
    settings: Settings, tmp_path: Path, steady_count: list[int]
) -> None:
    # The other process's second session event changes nothing in the lag list (its segment is
    # listed already), only that segment's length: its id is held in that process's memory alone.
    with EventLog(replace(settings, fsync="always")) as log:
        for k in range(3):
            log.append(interaction(k, event_id=f"p-{k}", ts="2026-03-02T10:00:00.000Z"))
        other = OtherWriter(tmp_path, settings)
        try:
            other.append("z-0", "02", session=True)  # lists its segment: the list moves
            for k in range(3, 6):
                log.append(interaction(k, event_id=f"p-{k}", ts="2026-03-02T10:00:00.000Z"))
            taken = steady_count[0]
            log.append(interaction(6, event_id="p-6", ts="2026-03-02T10:00:00.000Z"))
            assert steady_count[0] == taken + 1  # in one step, the other's segment listed beside
            other.append("z-1", "02", session=True)
            again = log.append(interaction(7, event_id="z-1", ts="2026-03-02T10:00:00.000Z"))
            assert again.duplicate
            assert steady_count[0] == taken + 1
        finally:
            other.close()
    counts = Counter(x for lines in _day_lines(settings).values() for x in lines)
    assert "z-1" not in counts and max(counts.values()) == 1


@pytest.mark.skipif(steady_append._steady is None, reason="built without the compiled one step")
def test_one_step_appends_are_the_compiled_call_when_it_is_built(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers: list[Any] = []
    real = steady_append._steady.append_one

    def counted(*args: Any) -> Any:
        answers.append(real(*args))
        return answers[-1]

    monkeypatch.setattr(steady_append._steady, "append_one", counted)
    # The one step as Python calls it (the whole append in one call is `test_log_whole_append`'s).
    monkeypatch.setattr(steady_append, "appender", lambda log: None)
    with EventLog(replace(settings, fsync="always")) as log:
        results = [
            log.append(interaction(k, event_id=f"p-{k}", ts="2026-03-01T10:00:00.000Z")) for k in range(10)
        ]
        again = log.append(interaction(3, event_id="p-3", ts="2026-03-01T10:00:00.000Z"))
    written = [a for a in answers if isinstance(a, int) and a > 0]
    assert len(written) >= 8 and [r.line for r in results] == list(range(10))
    assert again.duplicate and answers[-1] == -1  # found in the tail: the Python path answered
    lines = [orjson.loads(x) for x in segment_files(settings.data_dir)[0].read_bytes().splitlines()]
    assert [x["event_id"] for x in lines] == [f"p-{k}" for k in range(10)]


def test_the_compiled_call_is_taken_only_beside_python_s_own_copy_of_sqlite() -> None:
    import _sqlite3
    import types

    # A second copy of SQLite in the process would keep its own record of the locks on
    # the id index (closing a descriptor in one copy drops the other's): the check must
    # say "same" only when the symbol resolves to one address from both sides.
    assert steady_append._one_sqlite(types.SimpleNamespace(__file__=_sqlite3.__file__))
    records = pytest.importorskip("tiermem._records")  # a compiled module with no SQLite in it
    assert not steady_append._one_sqlite(records)
    assert not steady_append._one_sqlite(types.SimpleNamespace(__file__="/nonexistent/lib.so"))
