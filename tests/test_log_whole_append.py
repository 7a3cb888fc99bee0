"""The usual append of one interaction in one compiled call (`steady_append.appender`).

`EventLog.append` hands an ordinary interaction to the compiled appender, which checks
it, takes the stream's locks, appends it in one step, flushes it and answers the result,
or, when anything is not the usual case, answers the checked event with nothing done and
the Python path goes on. These tests check that what it answers is what the Python path
answers, that it lets go of both locks whatever happens, that a write or a flush that
fails leaves the log as the Python path leaves it, and that it steps aside (nothing
written) when another thread or process holds a lock.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import subprocess
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers_log import PYTHON, REPO, interaction, segment_files

from tiermem import steady_append
from tiermem.errors import StorageError, ValidationError
from tiermem.eventlog import AppendResult, EventLog
from tiermem.events import CALLER
from tiermem.settings import Settings

pytestmark = pytest.mark.skipif(steady_append._steady is None, reason="built without the compiled one step")

TS = "2026-03-01T10:00:00.000Z"


def _ids_on_disk(settings: Settings) -> list[str]:
    return [
        orjson.loads(x)["event_id"]
        for p in segment_files(settings.data_dir)
        for x in p.read_bytes().splitlines()
    ]


def _steady_log(settings: Settings) -> tuple[EventLog, Any]:
    """A log whose writer has a one-step state kept (two appends made), and its compiled appender."""
    log = EventLog(replace(settings, fsync="always"))
    for k in range(2):
        log.append(interaction(k, event_id=f"p-{k}", ts=TS))
    assert log._append_fast is not None
    return log, log._append_fast


def _assert_unlocked(log: EventLog) -> None:
    """Neither the stream's thread lock nor its `flock` is held (another open file would conflict)."""
    w = log._writers["interactions"]
    assert w.thread_lock.acquire(blocking=False)
    w.thread_lock.release()
    other = os.open(log.root / "interactions" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises BlockingIOError while held
        fcntl.flock(other, fcntl.LOCK_UN)
    finally:
        os.close(other)


def test_the_result_is_the_one_the_python_path_builds(settings: Settings) -> None:
    log, fast = _steady_log(settings)
    try:
        done = fast(interaction(2, event_id="p-2", ts=TS))
        assert type(done) is AppendResult  # appended in the one call
        expected = AppendResult("p-2", "interactions", done.segment, 2)
        assert done == expected and hash(done) == hash(expected) and repr(done) == repr(expected)
        assert vars(done) == vars(expected)
        with pytest.raises(dataclasses.FrozenInstanceError):
            done.line = 7  # type: ignore[misc]
        _assert_unlocked(log)
        # The writer's bookkeeping is the Python path's: the next append, Python or compiled, goes on from it.
        w = log._writers["interactions"]
        tail = w.tails[done.segment]
        assert "p-2" in tail.ids and log._line_counts[done.segment] == (tail.ino, tail.end, 3)
        assert log._indexed_to[done.segment] == (tail.ino, tail.end)
        assert os.path.getsize(str(settings.data_dir / "log" / f"{done.segment}.jsonl")) == tail.end
        assert log.append(interaction(3, event_id="p-3", ts=TS)).line == 3
    finally:
        log.close()
    assert _ids_on_disk(settings) == ["p-0", "p-1", "p-2", "p-3"]


def test_what_is_not_the_usual_case_comes_back_with_nothing_done(settings: Settings) -> None:
    log, fast = _steady_log(settings)
    try:
        w = log._writers["interactions"]
        # A duplicate (in the writer's tail): the checked event, for the Python path to answer.
        back = fast(interaction(9, event_id="p-1", ts=TS))
        assert type(back) is dict and back["event_id"] == "p-1"
        # Another day than the kept segment's.
        back = fast(interaction(9, event_id="q-1", ts="2026-03-02T10:00:00.000Z"))
        assert type(back) is dict
        # Not an interaction, not a dict, or a record the compiled check leaves to Python: None.
        assert fast({"type": "session_ended", "agent_id": "a", "session_id": "s", "ts": TS}) is None
        assert fast([("type", "interaction")]) is None
        assert fast(interaction(9, event_id="q-2", ts=TS, agent_id=7)) is None
        # Another thread of this process in the middle of an append (its thread lock held).
        with w.thread_lock:
            assert type(fast(interaction(9, event_id="q-3", ts=TS))) is dict
        # Another process holding the stream's `flock` (another open file: it conflicts).
        other = os.open(log.root / "interactions" / ".lock", os.O_RDWR)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the one call kept it
            assert type(fast(interaction(9, event_id="q-4", ts=TS))) is dict
            fcntl.flock(other, fcntl.LOCK_UN)
        finally:
            os.close(other)
        assert _ids_on_disk(settings) == ["p-0", "p-1"]
        # Both locks were let go each time: the one call goes on.
        assert type(fast(interaction(9, event_id="q-5", ts=TS))) is AppendResult
        # The public call answers as before for each of them.
        assert log.append(interaction(9, event_id="p-1", ts=TS)).duplicate
        assert not log.append(interaction(9, event_id="q-1", ts="2026-03-02T10:00:00.000Z")).duplicate
        with pytest.raises(ValidationError):
            log.append(interaction(9, event_id="q-2", ts=TS, agent_id=7))
        # A caller's record goes through the caller's checks, not the compiled appender.
        assert not log.append(interaction(9, event_id="q-6", ts=TS), writer=CALLER).duplicate
    finally:
        log.close()
    assert sorted(_ids_on_disk(settings)) == ["p-0", "p-1", "q-1", "q-5", "q-6"]


def test_a_failed_flush_raises_the_python_path_s_error_and_lets_go_of_the_locks(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, fast = _steady_log(settings)
    real_fsync = os.fsync
    try:

        def broken(fd: int) -> None:
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "fsync", broken)
        with pytest.raises(StorageError, match="may not be durable"):
            fast(interaction(2, event_id="p-2", ts=TS))
        assert log._writers["interactions"].steady is None  # the kept state went, as on the Python path
        _assert_unlocked(log)
        monkeypatch.setattr(os, "fsync", real_fsync)
        # Not acknowledged, but written: a re-send is a duplicate whose first copy gets synced.
        assert log.append(interaction(2, event_id="p-2", ts=TS)).duplicate
        assert not log.append(interaction(3, event_id="p-3", ts=TS)).duplicate
    finally:
        log.close()
    assert _ids_on_disk(settings) == ["p-0", "p-1", "p-2", "p-3"]


# Appends until the steady state is kept, then lowers the file-size limit below the next line's
# end: the compiled call's write fails part way. Prints what it saw, one word per line.
FULL_DISK = """
import os, resource, signal, sys
from tiermem.appended import AppendResult
from tiermem.errors import StorageError
from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
settings = resolve_settings(data_dir=sys.argv[1], env={}, fsync="always")
def rec(k):
    return {"type": "interaction", "agent_id": "a", "event_id": f"p-{k}", "ts": "2026-03-01T10:00:00.000Z",
            "user_message": "m" * 200, "agent_response": "r" * 200}
with EventLog(settings) as log:
    for k in range(3):
        log.append(rec(k))
    w = log._writers["interactions"]
    size = os.fstat(next(iter(w.fds.values()))).st_size
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, hard))
    try:
        log._append_fast(rec(3))
        print("no error")
    except StorageError as exc:
        print("failed" if "whole records only" in str(exc) else f"other {exc}")
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    print("size", os.fstat(next(iter(w.fds.values()))).st_size == size)
    print("steady", w.steady is None)
    free = w.thread_lock.acquire(blocking=False)
    if free:
        w.thread_lock.release()
    print("free", free)
    import fcntl
    other = os.open(log.root / "interactions" / ".lock", os.O_RDWR)
    try:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while the failed call still holds it
        fcntl.flock(other, fcntl.LOCK_UN)
        print("unlocked", True)
    finally:
        os.close(other)
    r = log.append(rec(3))
    print("again", type(r) is AppendResult and not r.duplicate and r.line == 3)
"""


def test_a_write_that_fails_part_way_is_cut_back_to_whole_lines(settings: Settings, tmp_path: Path) -> None:
    # In its own process: the file-size limit applies to every file the process writes.
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    out = subprocess.run(
        [str(PYTHON), str(script), str(settings.data_dir)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    assert out[:6] == ["failed", "size True", "steady True", "free True", "unlocked True", "again True"]
    assert _ids_on_disk(settings) == ["p-0", "p-1", "p-2", "p-3"]


def test_threads_appending_at_once_each_get_their_own_line(settings: Settings) -> None:
    # The compiled call lets go of the interpreter lock in the flush; a thread that finds the
    # stream's thread lock held takes the Python path and waits for it.
    log, _fast = _steady_log(settings)
    results: list[AppendResult] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        for k in range(50):
            r = log.append(interaction(k, event_id=f"t{t}-{k}", ts=TS))
            with lock:
                results.append(r)

    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        log.close()
    assert not any(r.duplicate for r in results)
    assert sorted(r.line for r in results) == list(range(2, 202))
    on_disk = _ids_on_disk(settings)
    assert len(on_disk) == len(set(on_disk)) == 202
    assert {r.event_id: r.line for r in results} == {eid: n for n, eid in enumerate(on_disk) if n >= 2}


@pytest.mark.parametrize("policy", ["always", "none"])
def test_the_one_call_flushes_as_the_policy_says(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    flushed: list[int] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        flushed.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    with EventLog(replace(settings, fsync=policy)) as log:  # type: ignore[arg-type]
        for k in range(2):
            log.append(interaction(k, event_id=f"p-{k}", ts=TS))
        before = len(flushed)
        done = log._append_fast(interaction(2, event_id="p-2", ts=TS))  # type: ignore[misc]
        assert type(done) is AppendResult
        assert len(flushed) - before == (1 if policy == "always" else 0)
        if policy == "always":  # the file flushed is the segment's, not another one the writer holds
            tail = log._writers["interactions"].tails[done.segment]
            assert os.fstat(flushed[-1]).st_ino == tail.ino
    assert _ids_on_disk(settings) == ["p-0", "p-1", "p-2"]


def test_group_commit_keeps_its_own_path(settings: Settings) -> None:
    # Its callers share their flushes: the one call, which flushes its own record, is not used.
    with EventLog(replace(settings, fsync="group")) as log:
        assert log._append_fast is None
        assert not log.append(interaction(0, event_id="p-0", ts=TS)).duplicate


def test_a_tail_about_to_be_flushed_into_the_index_is_left_to_the_python_path(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tail's ids go into the index at a bound; the one call steps aside before it, so that
    # the Python path flushes them. A low bound makes the step reachable here.
    monkeypatch.setattr(steady_append, "TAIL_FLUSH_IDS", 4)
    log, fast = _steady_log(settings)
    try:
        tail = log._writers["interactions"].tails[fast(interaction(2, event_id="p-2", ts=TS)).segment]
        assert len(tail.ids) == 3
        back = fast(interaction(3, event_id="p-3", ts=TS))
        assert type(back) is dict and back["event_id"] == "p-3"  # nothing done
        assert _ids_on_disk(settings) == ["p-0", "p-1", "p-2"]
        assert not log.append(interaction(3, event_id="p-3", ts=TS)).duplicate
        assert log.append(interaction(2, event_id="p-2", ts=TS)).duplicate
    finally:
        log.close()
    assert _ids_on_disk(settings) == ["p-0", "p-1", "p-2", "p-3"]


def test_an_appender_that_was_never_set_up_raises_instead_of_crashing() -> None:
    kind = steady_append._steady.Appender  # type: ignore[union-attr]
    with pytest.raises(RuntimeError, match="__init__"):
        kind.__new__(kind).append(interaction(0, event_id="p-0", ts=TS))


def test_a_compiled_module_without_the_appender_appends_through_python(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A build from before the appender existed: the log works, without the one call.
    compiled = steady_append._steady

    class OlderBuild:
        Index = compiled.Index  # type: ignore[union-attr]
        append_one = compiled.append_one  # type: ignore[union-attr]

    monkeypatch.setattr(steady_append, "_steady", OlderBuild)
    with EventLog(replace(settings, fsync="always")) as log:
        assert log._append_fast is None
        for k in range(3):
            assert not log.append(interaction(k, event_id=f"p-{k}", ts=TS)).duplicate
    assert _ids_on_disk(settings) == ["p-0", "p-1", "p-2"]
