"""Group commit (`fsync = "group"`): callers share fsyncs, and none returns before its bytes are durable."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
from helpers_log import PYTHON, REPO, interaction, segment_files

from tiermem.errors import StorageError
from tiermem.eventlog import EventLog
from tiermem.groupcommit import GroupQueue, SharedSync, SyncPoint, forget_synced, group_commit
from tiermem.settings import Settings


def test_no_append_returns_before_an_fsync_covering_its_line(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync
    durable: dict[int, int] = {}  # inode -> bytes known durable (size taken before the fsync)
    lock = threading.Lock()

    def recording_fsync(fd: int) -> None:
        st = os.fstat(fd)
        real_fsync(fd)
        with lock:
            durable[st.st_ino] = max(durable.get(st.st_ino, 0), st.st_size)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    seen: list[tuple[str, int, int]] = []  # (segment, line, durable bytes when append returned)
    with EventLog(replace(settings, fsync="group")) as log:

        def worker(t: int) -> None:
            for k in range(150):
                r = log.append(interaction(k, event_id=f"t{t}-{k}", agent_response="r" * (k % 40)))
                ino = os.stat(log.root / f"{r.segment}.jsonl").st_ino
                with lock:
                    seen.append((r.segment, r.line, durable.get(ino, 0)))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        fsyncs = sum(w.sync.fsyncs for w in log._writers.values() if w.sync is not None)
    ends: dict[str, list[int]] = {}  # segment -> byte offset just past each of its lines
    for segment in {s for s, _line, _d in seen}:  # the records span five days: five segments
        pos, ends[segment] = 0, []
        for line in (settings.log_dir / f"{segment}.jsonl").read_bytes().split(b"\n")[:-1]:
            pos += len(line) + 1
            ends[segment].append(pos)
    assert len(ends) == 5 and sum(len(e) for e in ends.values()) == len(seen) == 900
    late = [(s, line, synced) for s, line, synced in seen if ends[s][line] > synced]
    assert late == []  # every caller returned after an fsync that covered its whole line
    assert fsyncs <= len(seen)


def test_a_fsync_by_one_process_covers_what_another_wrote_before_it(tmp_path: Path) -> None:
    """Two `SharedSync`s on one `.sync` file stand for two processes (each has its own flock)."""
    seg = tmp_path / "seg.jsonl"
    fd_a = os.open(seg, os.O_RDWR | os.O_APPEND | os.O_CREAT)
    fd_b = os.open(seg, os.O_RDWR | os.O_APPEND)
    a, b = SharedSync(tmp_path / ".sync"), SharedSync(tmp_path / ".sync")
    try:
        ino = os.fstat(fd_a).st_ino
        os.write(fd_a, b"a" * 10 + b"\n")  # A's record: bytes [0, 11)
        os.write(fd_b, b"b" * 10 + b"\n")  # B's record: bytes [11, 22)
        assert b.make_durable(SyncPoint("s/date=x/seg", fd_b, 22, ino)) is True
        # A's bytes were below the size B fsynced: A returns without an fsync of its own.
        assert a.make_durable(SyncPoint("s/date=x/seg", fd_a, 11, ino)) is False
        os.write(fd_a, b"c\n")
        assert a.make_durable(SyncPoint("s/date=x/seg", fd_a, 24, ino)) is True  # beyond it: A syncs
        assert b.make_durable(SyncPoint("s/date=x/seg", fd_b, 24, ino)) is False
        # Another segment (same inode numbers could recur after a rewrite) is never taken as covered.
        assert b.make_durable(SyncPoint("s/date=x/other", fd_b, 1, ino)) is True
        assert (a.fsyncs, b.fsyncs) == (1, 2)
    finally:
        for fd in (fd_a, fd_b):
            os.close(fd)
        a.close()
        b.close()


WRITER = """
import sys, threading
from tiermem.errors import StorageError
from tiermem.eventlog import EventLog
from tiermem.settings import resolve_settings
settings = resolve_settings(data_dir=sys.argv[1], env={}, fsync="group")
who, n = sys.argv[2], int(sys.argv[3])
out = threading.Lock()
with EventLog(settings) as log:
    def caller(t):
        for k in range(n):
            eid = f"{who}-{t}-{k}"
            log.append({"type": "interaction", "agent_id": who, "event_id": eid,
                        "ts": "2026-03-01T10:00:00.000Z", "user_message": "m" * (1 + k % 50),
                        "agent_response": "r" * (k % 700)})
            with out:  # acknowledged: append returned
                sys.stdout.write(eid + "\\n")
                sys.stdout.flush()
    threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    for th in threads: th.start()
    for th in threads: th.join()
"""


@pytest.mark.slow
def test_sigkilled_group_commit_writers_lose_no_acknowledged_record(
    settings: Settings, tmp_path: Path
) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def start(who: str, n: int, out: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [str(PYTHON), str(script), str(settings.data_dir), who, str(n)], env=env, stdout=out
        )

    # Far more records than they can write before the kill: the kill always lands mid-run.
    procs = {who: start(who, 10**6, subprocess.PIPE) for who in ("p0", "p1", "p2")}
    acked: list[str] = []
    for proc in procs.values():  # wait for real acknowledgements, then kill mid-run
        assert proc.stdout is not None
        for _ in range(150):
            acked.append(proc.stdout.readline().decode().strip())
    for proc in procs.values():
        proc.send_signal(signal.SIGKILL)
    for proc in procs.values():
        assert proc.stdout is not None
        acked.extend(x for x in proc.stdout.read().decode().split("\n") if x)  # acked before the kill
        assert proc.wait(timeout=60) == -signal.SIGKILL
    stored = [
        orjson.loads(x)["event_id"]
        for p in segment_files(settings.data_dir)
        for x in p.read_bytes().split(b"\n")
        if x.endswith(b"}")  # a torn last line is not a stored record
    ]
    assert all(x for x in acked)
    assert set(acked) <= set(stored)  # nothing acknowledged is missing
    # A re-run of one writer over its first ids: the torn tail (if any) is quarantined, every record
    # it had stored counts as a duplicate, and each id ends up stored exactly once.
    n = 100
    rerun = start("p0", n, subprocess.DEVNULL)
    assert rerun.wait(timeout=120) == 0
    lines = [x for p in segment_files(settings.data_dir) for x in p.read_bytes().split(b"\n") if x]
    counts = Counter(orjson.loads(x)["event_id"] for x in lines)  # every line parses: none torn
    assert max(counts.values()) == 1
    assert {f"p0-{t}-{k}" for t in range(4) for k in range(n)} <= set(counts)


def test_a_failed_fsync_reaches_the_caller_and_the_next_group_still_commits(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_fsync = os.fsync

    def broken(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    with EventLog(replace(settings, fsync="group")) as log:
        log.append(interaction(0, event_id="first"))
        monkeypatch.setattr(os, "fsync", broken)
        with pytest.raises(StorageError, match="may not be durable"):
            log.append(interaction(0, event_id="unsynced"))
        monkeypatch.setattr(os, "fsync", real_fsync)
        # No leader is left behind: the next caller writes and syncs, and the record the failed
        # call wrote is already in the log (a retry of it is a duplicate, now durable).
        assert log.append(interaction(0, event_id="next")).line == 2
        assert log.append(interaction(0, event_id="unsynced")).duplicate


def test_group_commit_across_segment_rollovers_keeps_every_position(settings: Settings) -> None:
    """Segments roll over while groups still wait for their fsync (each group syncs its own copy of the fd)."""
    results = []
    lock = threading.Lock()
    with EventLog(replace(settings, fsync="group", segment_max_bytes=3_000)) as log:

        def worker(t: int) -> None:
            for k in range(60):
                r = log.append(interaction(0, event_id=f"t{t}-{k}"))
                with lock:
                    results.append(r)

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert len({r.segment for r in results}) > 5
    for r in results:
        lines = (settings.log_dir / f"{r.segment}.jsonl").read_bytes().split(b"\n")
        assert orjson.loads(lines[r.line])["event_id"] == r.event_id


def test_a_cut_torn_tail_clears_the_shared_record_so_new_bytes_below_it_get_their_fsync(
    settings: Settings,
) -> None:
    with EventLog(replace(settings, fsync="group")) as log:
        first = log.append(interaction(0, event_id="first"))
        path = settings.log_dir / f"{first.segment}.jsonl"
        with open(path, "ab") as fh:  # a writer killed mid-write: a long partial line
            fh.write(b'{"event_id":"torn","agent_response":"' + b"x" * 2_000)
        other = SharedSync(path.parent.parent / ".sync")  # another process syncs, partial line included
        fd = os.open(path, os.O_RDONLY)
        try:
            assert other.make_durable(SyncPoint(first.segment, fd, os.fstat(fd).st_size, os.fstat(fd).st_ino))
        finally:
            os.close(fd)
            other.close()
        [writer] = log._writers.values()
        assert writer.sync is not None
        before = writer.sync.fsyncs
        second = log.append(interaction(0, event_id="second"))  # cuts the tail, then lands below it
        assert second.segment == first.segment and second.line == 1
        assert path.stat().st_size < 2_000  # the new record lies inside the range once recorded
        assert writer.sync.fsyncs == before + 1  # so it was fsynced, not taken as covered


def _until(condition: Callable[[], bool]) -> None:
    """Wait for a condition another thread brings about (checked, not assumed after a delay)."""
    give_up = time.monotonic() + 60  # only so that a broken hand-off fails instead of hanging
    while not condition():
        assert time.monotonic() < give_up, "the condition never came about"
        time.sleep(0.001)


def _lead_then_queue_three(
    caller: Callable[[str], None], first_entered: threading.Event, queue: GroupQueue
) -> tuple[threading.Thread, list[threading.Thread]]:
    """Start "first", which enters its write and holds it, then three callers that queue behind it."""
    leader = threading.Thread(target=caller, args=("first",))
    leader.start()
    first_entered.wait()
    group = [threading.Thread(target=caller, args=(f"f{i}",)) for i in range(3)]
    for th in group:
        th.start()
    _until(lambda: len(queue.waiting) == 3)
    return leader, group


def test_callers_queued_behind_a_leader_are_written_as_one_group_each_with_its_own_results() -> None:
    queue = GroupQueue()
    first_entered, release_first = threading.Event(), threading.Event()
    batches: list[list[str]] = []

    def write(events: list[dict[str, Any]]) -> tuple[list[Any], list[SyncPoint]]:
        batches.append([e["id"] for e in events])
        if len(batches) == 1:
            first_entered.set()
            release_first.wait()
        return [f"done {e['id']}" for e in events], []

    got: dict[str, list[Any]] = {}

    def caller(name: str) -> None:
        got[name] = group_commit(queue, cast(SharedSync, None), [{"id": name}], write)

    leader = threading.Thread(target=caller, args=("c0",))
    leader.start()
    first_entered.wait()
    others = [threading.Thread(target=caller, args=(f"c{i}",)) for i in range(1, 8)]
    for th in others:
        th.start()
    _until(lambda: len(queue.waiting) == 7)  # all seven asleep behind the leader
    release_first.set()
    for th in [leader, *others]:
        th.join()
    assert batches[0] == ["c0"]
    assert sorted(batches[1]) == [f"c{i}" for i in range(1, 8)] and len(batches) == 2  # one group, one write
    assert got == {f"c{i}": [f"done c{i}"] for i in range(8)}
    assert not queue.leader and not queue.waiting  # the last leader found nobody and let go


def test_a_failed_write_reaches_exactly_its_group_and_the_lead_passes_on() -> None:
    queue = GroupQueue()
    first_entered, release_first = threading.Event(), threading.Event()
    calls = 0

    def write(events: list[dict[str, Any]]) -> tuple[list[Any], list[SyncPoint]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            first_entered.set()
            release_first.wait()
            return ["ok"], []
        if calls == 2:
            raise StorageError("disk full")
        return ["ok"] * len(events), []

    outcome: dict[str, str] = {}

    def caller(name: str) -> None:
        try:
            group_commit(queue, cast(SharedSync, None), [{"id": name}], write)
            outcome[name] = "ok"
        except StorageError as exc:
            outcome[name] = str(exc)

    leader, failing = _lead_then_queue_three(caller, first_entered, queue)
    release_first.set()
    for th in [leader, *failing]:
        th.join()
    caller("after")  # nobody holds the lead: a new caller leads and commits
    assert outcome == {"first": "ok", "f0": "disk full", "f1": "disk full", "f2": "disk full", "after": "ok"}


def _blocking_fsync(
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[threading.Event, threading.Event, list[int]]:
    """os.fsync replaced: the first call signals `entered` and waits for `release`; all are counted."""
    real_fsync = os.fsync
    entered, release = threading.Event(), threading.Event()
    calls: list[int] = []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            entered.set()
            release.wait()
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return entered, release, calls


@pytest.fixture
def shared_segment(tmp_path: Path) -> Iterator[tuple[int, int, SharedSync]]:
    """An empty segment open for appends (descriptor, inode) and its stream's shared sync record."""
    fd = os.open(tmp_path / "seg.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT)
    sync = SharedSync(tmp_path / ".sync")
    try:
        yield fd, os.fstat(fd).st_ino, sync
    finally:
        os.close(fd)
        sync.close()


def test_a_caller_covered_by_a_running_fsync_waits_for_it_instead_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_segment: tuple[int, int, SharedSync]
) -> None:
    fd, ino, sync = shared_segment
    os.write(fd, b"a\nb\n")
    entered, release, calls = _blocking_fsync(monkeypatch)
    results: dict[str, bool] = {}
    a = threading.Thread(target=lambda: results.update(a=sync.make_durable(SyncPoint("s/x/seg", fd, 4, ino))))
    a.start()
    entered.wait()  # A's fsync, of all 4 bytes, is running
    b = threading.Thread(target=lambda: results.update(b=sync.make_durable(SyncPoint("s/x/seg", fd, 2, ino))))
    b.start()
    release.set()
    a.join()
    b.join()
    assert results == {"a": True, "b": False} and len(calls) == 1 and sync.fsyncs == 1


def test_a_tail_cut_while_a_fsync_runs_keeps_that_fsync_from_recording_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_segment: tuple[int, int, SharedSync]
) -> None:
    fd, ino, sync = shared_segment
    os.write(fd, b"whole\n" + b"partial" * 10)  # the size the fsync notes includes a partial line
    entered, release, calls = _blocking_fsync(monkeypatch)
    a = threading.Thread(target=sync.make_durable, args=(SyncPoint("s/x/seg", fd, 6, ino),))
    a.start()
    entered.wait()
    os.ftruncate(fd, 6)  # another writer cuts the partial line meanwhile ...
    forget_synced(tmp_path / ".sync")  # ... and clears the record, as `repair_tail` does
    release.set()
    a.join()
    os.write(fd, b"new\n")  # bytes [6, 10): below the size that fsync noted, not yet durable
    assert sync.make_durable(SyncPoint("s/x/seg", fd, 10, ino)) is True  # so they get their own
    assert len(calls) == 2


def test_a_process_alone_keeps_its_durable_size_in_memory_and_a_cut_still_voids_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_segment: tuple[int, int, SharedSync]
) -> None:
    fd, ino, sync = shared_segment
    os.write(fd, b"one\n")
    assert sync.make_durable(SyncPoint("s/x/seg", fd, 4, ino)) is True  # recorded: now it seems alone
    recorded = os.pread(sync.fd, 64, 0)
    os.write(fd, b"two\n")
    assert sync.make_durable(SyncPoint("s/x/seg", fd, 8, ino)) is True
    assert os.pread(sync.fd, 64, 0) == recorded  # alone: the record is left as it was ...
    assert sync.make_durable(SyncPoint("s/x/seg", fd, 8, ino)) is False  # ... its memory answers
    # A fsync running while another writer cuts a torn tail must not vouch for the bytes after it.
    os.write(fd, b"whole\n" + b"partial" * 10)
    entered, release, calls = _blocking_fsync(monkeypatch)
    a = threading.Thread(target=sync.make_durable, args=(SyncPoint("s/x/seg", fd, 14, ino),))
    a.start()
    entered.wait()
    os.ftruncate(fd, 14)
    forget_synced(tmp_path / ".sync")
    release.set()
    a.join()
    os.write(fd, b"new\n")  # bytes [14, 18): below the size that fsync noted
    assert sync.make_durable(SyncPoint("s/x/seg", fd, 18, ino)) is True
    assert len(calls) == 2
    # Another SharedSync on the same record (another process) is never covered by that memory.
    other = SharedSync(tmp_path / ".sync")
    try:
        assert other.make_durable(SyncPoint("s/x/seg", fd, 18, ino)) is True
    finally:
        other.close()


_ANNOUNCER = """
import fcntl, os, sys
from tiermem.groupcommit import _FLIGHT_AT, _SLOT
path, key, ino, size = sys.argv[1], bytes.fromhex(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fd = os.open(path, os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX, 1, _FLIGHT_AT)  # as SharedSync does while its fsync runs
os.pwrite(fd, _SLOT.pack(b"", 0, 0, 0, key, ino, size, os.getpid(), 0), 0)
print("announced", flush=True)
if sys.stdin.readline().strip() == "land":  # its fsync is over: record it, end the announcement
    os.pwrite(fd, _SLOT.pack(key, ino, size, 0, b"", 0, 0, 0, os.getpid()), 0)
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, _FLIGHT_AT)
    print("landed", flush=True)
    sys.stdin.readline()
"""


def _announcer(sync_path: Path, sync: SharedSync, segment: str, ino: int, size: int) -> subprocess.Popen[str]:
    """Another process that announced a fsync of `size` bytes of `segment` and holds the flight lock."""
    key = sync._key(segment).hex()
    proc = subprocess.Popen(
        [PYTHON, "-c", _ANNOUNCER, str(sync_path), key, str(ino), str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "announced"
    return proc


def _blocked_on(path: Path) -> bool:
    """Whether some process waits for a POSIX lock on `path` (Linux lists waiters with "->")."""
    ino = f":{os.stat(path).st_ino} "
    return any(
        "->" in line and "POSIX" in line and ino in line
        for line in Path("/proc/locks").read_text().splitlines()
    )


def test_a_caller_covered_by_another_process_s_running_fsync_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_segment: tuple[int, int, SharedSync]
) -> None:
    fd, ino, sync = shared_segment
    calls: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda f: (calls.append(f), real_fsync(f)))
    os.write(fd, b"a\nb\n")
    other = _announcer(tmp_path / ".sync", sync, "s/x/seg", ino, 4)
    result: list[bool] = []
    waiter = threading.Thread(
        target=lambda: result.append(sync.make_durable(SyncPoint("s/x/seg", fd, 2, ino)))
    )
    waiter.start()
    _until(lambda: _blocked_on(tmp_path / ".sync"))  # it waits on the other process's flight lock
    assert other.stdin is not None and other.stdout is not None
    other.stdin.write("land\n")
    other.stdin.flush()
    assert other.stdout.readline().strip() == "landed"
    waiter.join()
    other.stdin.write("bye\n")
    other.stdin.flush()
    assert other.wait(timeout=30) == 0
    assert result == [False] and calls == []  # covered by the other process's fsync, none of its own


def test_an_announced_fsync_of_a_killed_process_is_not_waited_for(
    tmp_path: Path, shared_segment: tuple[int, int, SharedSync]
) -> None:
    fd, ino, sync = shared_segment
    os.write(fd, b"a\nb\n")
    other = _announcer(tmp_path / ".sync", sync, "s/x/seg", ino, 4)
    other.send_signal(signal.SIGKILL)  # killed mid-fsync: the kernel drops its lock, the record stays
    other.wait(timeout=30)
    assert sync.make_durable(SyncPoint("s/x/seg", fd, 2, ino)) is True  # so it syncs for itself


def _sync_record(path: Path) -> list[Any]:
    shared = SharedSync(path)
    try:
        return shared._read()
    finally:
        shared.close()


def test_an_erasure_rewrite_clears_the_durable_size_of_its_stream(settings: Settings) -> None:
    # The rewritten file may get the old inode number back (ext4 recycles them) and is
    # shorter: a kept "durable up to" would then cover bytes appended later, unsynced.
    from tiermem.log.erasure import rewrite_jsonl

    settings = replace(settings, fsync="group")
    with EventLog(settings) as log:
        results = log.append_many([interaction(i, event_id=f"e{i}") for i in range(5)]).results
        sync_path = settings.log_dir / "interactions" / ".sync"
        before = _sync_record(sync_path)
        assert before[2] > 0  # a durable size is recorded
        segment = settings.log_dir / f"{results[2].segment}.jsonl"
        assert rewrite_jsonl(settings, log, segment, {"e2"}) == 1
    after = _sync_record(sync_path)
    assert (after[0], after[2]) == (bytes(8), 0) and after[3] == before[3] + 1


def test_a_waiter_on_a_failed_fsync_is_not_acknowledged(tmp_path: Path) -> None:
    # The kernel reports a failed writeback once per open file: a second fsync of the same
    # file would succeed for pages it lost, so the waiters of a failed fsync fail with it.
    fd = os.open(tmp_path / "seg.jsonl", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, b"a" * 99 + b"\n")
    ino = os.fstat(fd).st_ino
    shared = SharedSync(tmp_path / ".sync")
    from tiermem.groupcommit import _Flight

    failed = _Flight(shared._key("s/p/seg"), ino, 100)
    failed.failed = True
    failed.over.release()  # over, and failed
    shared._flights.append(failed)
    try:
        with pytest.raises(StorageError, match="failed in this process"):
            shared.make_durable(SyncPoint("s/p/seg", os.dup(fd), 100, ino))
        assert shared.fsyncs == 0
        # The flight that failed says so to its waiters.
        shared._flights.clear()
        landed: list[bool] = []
        real_land = shared._land

        def spy(mine: Any, generation: int, synced: bool) -> None:
            landed.append(mine.failed)
            real_land(mine, generation, synced)

        shared._land = spy  # type: ignore[method-assign]

        def broken_fsync(_fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        real_fsync = os.fsync
        os.fsync = broken_fsync
        try:
            with pytest.raises(StorageError):
                shared.make_durable(SyncPoint("s/p/seg", os.dup(fd), 100, ino))
        finally:
            os.fsync = real_fsync
        assert landed == [True]
    finally:
        shared.close()
        os.close(fd)


def test_a_duplicate_is_answered_only_once_its_first_copy_is_durable(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first copy was written (and indexed) by another writer that has not synced it yet:
    # here a writer with fsync "none" stands in for one still waiting for its fsync.
    with EventLog(replace(settings, fsync="none")) as other:
        other.append(interaction(1, event_id="dup-1", ts="2026-03-01T10:00:00Z"))
    synced: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)
        real_fsync(fd)

    first = next(p for p in (settings.log_dir / "interactions").rglob("*.jsonl"))
    for mode in ("always", "group"):
        synced.clear()
        monkeypatch.setattr(os, "fsync", recording_fsync)
        with EventLog(replace(settings, fsync=mode)) as log:
            # Another day: this writer never opens the first copy's segment for writing.
            result = log.append(interaction(1, event_id="dup-1", ts="2026-03-01T10:00:00Z"))
            assert result.duplicate
        monkeypatch.undo()
        assert first.stat().st_ino in synced, mode


def test_a_close_failing_after_the_sync_still_wakes_every_follower_with_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiermem import heldio

    queue = GroupQueue()
    first_entered, release_first = threading.Event(), threading.Event()
    calls = 0
    opened: list[int] = []

    def write(events: list[dict[str, Any]]) -> tuple[list[Any], list[SyncPoint]]:
        nonlocal calls
        calls += 1
        if calls == 1:
            first_entered.set()
            release_first.wait()
            return ["ok"], []
        fd = os.open(tmp_path / "seg.jsonl", os.O_RDWR | os.O_CREAT, 0o644)
        opened.append(fd)
        return ["ok"] * len(events), [SyncPoint("interactions/date=2026-03-01/seg", fd, 0, 0)]

    class Synced:
        def make_durable(self, point: SyncPoint) -> bool:
            return False  # already durable: only the close is left

    real_close = heldio.close_now

    def failing_close(fd: int) -> None:
        real_close(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(heldio, "close_now", failing_close)
    outcome: dict[str, str] = {}

    def caller(name: str) -> None:
        try:
            group_commit(queue, cast(SharedSync, Synced()), [{"id": name}], write)
            outcome[name] = "ok"
        except StorageError as exc:
            outcome[name] = str(exc)

    leader, group = _lead_then_queue_three(caller, first_entered, queue)
    release_first.set()
    leader.join()
    for th in group:
        th.join(timeout=60)  # a follower left asleep never returns: fail, do not hang
    assert not any(th.is_alive() for th in group), "a follower was never woken"
    assert outcome["first"] == "ok" and len(opened) == 1
    assert {outcome[f"f{i}"] for i in range(3)} == {
        "closing a synced segment of this write: input/output error"
    }
    assert not queue.leader and not queue.waiting


def _numbered_writes(
    batches: list[list[str]],
) -> Callable[[list[dict[str, Any]]], tuple[list[Any], list[SyncPoint]]]:
    """A group's write: noted in `batches`, its sync point numbered by the group's rank."""

    def write(events: list[dict[str, Any]]) -> tuple[list[Any], list[SyncPoint]]:
        batches.append([e["id"] for e in events])
        fd = os.open(os.devnull, os.O_RDONLY)
        return [f"done {e['id']}" for e in events], [SyncPoint("s", fd, len(batches), 0)]

    return write


class _FirstSyncHeld:
    """A group's sync record in which the first group's sync runs until `release` is set; the
    groups made durable are noted in order."""

    def __init__(self) -> None:
        self.syncing, self.release = threading.Event(), threading.Event()
        self.durable: list[int] = []

    def make_durable(self, point: SyncPoint) -> bool:
        if point.end == 1:
            self.syncing.set()
            self.release.wait()
        self.durable.append(point.end)
        return True


def _first_group_syncing(
    queue: GroupQueue,
) -> tuple[_FirstSyncHeld, list[list[str]], dict[str, list[Any]], Callable[[str], None], threading.Thread]:
    """A caller "first" whose group is being synced (held until `sync.release`), in a thread of its
    own; `caller(name)` appends one numbered record through the same queue, its answer in `got`."""
    sync = _FirstSyncHeld()
    batches: list[list[str]] = []
    write = _numbered_writes(batches)
    got: dict[str, list[Any]] = {}

    def caller(name: str) -> None:
        got[name] = group_commit(queue, cast(SharedSync, sync), [{"id": name}], write)

    first = threading.Thread(target=caller, args=("first",), daemon=True)
    first.start()
    sync.syncing.wait()
    return sync, batches, got, caller, first


def test_the_next_group_waits_for_this_one_to_be_durable_and_is_written_whole() -> None:
    """One group of a process in flight at a time: callers that come while a group syncs are
    not written beside it (a second fsync of their own) but after it, all together."""
    queue = GroupQueue(overlap_after=3600.0)  # a sync never counts as long here
    sync, batches, got, caller, leader = _first_group_syncing(queue)
    others = [threading.Thread(target=caller, args=(f"c{i}",), daemon=True) for i in range(3)]
    for th in others:
        th.start()
    _until(lambda: len(queue.waiting) == 3)  # all three queued while the first group syncs
    assert batches == [["first"]]  # and nothing of theirs written meanwhile
    sync.release.set()
    for th in [leader, *others]:
        th.join()
    assert len(batches) == 2 and sorted(batches[1]) == ["c0", "c1", "c2"]
    assert sync.durable == [1, 2]
    assert got == {name: [f"done {name}"] for name in ["first", "c0", "c1", "c2"]}
    assert not queue.leader and not queue.waiting


def test_a_queued_caller_takes_the_lead_when_the_running_sync_lasts_past_overlap_after() -> None:
    """A sync that runs long (a busy disk) does not hold the next group back: the first caller
    queued behind it writes its group beside it, and the first leader does not hand the lead on."""
    queue = GroupQueue(overlap_after=0.001)
    sync, batches, got, caller, first = _first_group_syncing(queue)
    second = threading.Thread(target=caller, args=("second",), daemon=True)
    second.start()
    second.join(timeout=60)  # written, synced and answered while the first group's sync still runs
    assert not second.is_alive(), "the second caller waited for the first group's sync"
    assert batches == [["first"], ["second"]] and sync.durable == [2] and first.is_alive()
    caller("third")  # the lead is free again (the second leader let it go), not held by the first
    assert batches[2] == ["third"]
    sync.release.set()
    first.join()
    assert got == {name: [f"done {name}"] for name in ["first", "second", "third"]}
    assert sync.durable == [2, 3, 1]
    assert not queue.leader and not queue.waiting and not queue.syncing


def test_the_overlap_counts_from_the_start_of_the_sync_not_from_the_queueing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A caller queued during a long write must not take the lead as soon as a short sync
    begins: the sync itself has to run past `overlap_after`. Group commit's clock is the
    test's own (it moves only when the test says), so no timing decides the outcome."""
    import tiermem.groupcommit as groupcommit

    now = [100.0]
    read_by: list[int] = []

    class Clock:
        @staticmethod
        def monotonic() -> float:
            read_by.append(threading.get_ident())
            return now[0]

        sleep = staticmethod(time.sleep)

    monkeypatch.setattr(groupcommit, "time", Clock)
    queue = GroupQueue(overlap_after=0.001)
    batches: list[list[str]] = []
    sync = _FirstSyncHeld()
    write = _numbered_writes(batches)

    def caller(name: str) -> None:
        group_commit(queue, cast(SharedSync, sync), [{"id": name}], write)

    first = threading.Thread(target=caller, args=("first",), daemon=True)
    second = threading.Thread(target=caller, args=("second",), daemon=True)
    try:
        first.start()
        sync.syncing.wait()
        second.start()
        # The second caller is first in the queue and reads the clock on each of its polls: two
        # readings while the clock stands still mean it saw the sync young and kept waiting.
        _until(lambda: read_by.count(second.ident or 0) >= 2)
        assert batches == [["first"]] and second.is_alive()
        now[0] += 0.002  # the sync has now run past overlap_after
        second.join(timeout=60)
        assert not second.is_alive() and batches == [["first"], ["second"]]
    finally:
        sync.release.set()
        first.join(timeout=60)
    assert not queue.leader and not queue.waiting and not queue.syncing


def test_an_old_leader_finishing_after_a_takeover_leaves_the_lead_alone() -> None:
    """The first leader's sync ends while the caller that took its lead still syncs: the old
    leader must not hand the lead over a second time, nor leave `syncing` set for a third
    caller to take the lead in the middle of the second group's write."""
    queue = GroupQueue(overlap_after=0.001)
    gates = {1: threading.Event(), 2: threading.Event()}
    in_sync = {1: threading.Event(), 2: threading.Event()}
    write_gate, in_write = threading.Event(), threading.Event()
    batches: list[list[str]] = []
    plain = _numbered_writes(batches)

    def write(events: list[dict[str, Any]]) -> tuple[list[Any], list[SyncPoint]]:
        if batches:  # the second group: held in its write
            in_write.set()
            write_gate.wait()
        return plain(events)

    class Sync:
        def make_durable(self, point: SyncPoint) -> bool:
            if point.end in gates:
                in_sync[point.end].set()
                gates[point.end].wait()
            return True

    def caller(name: str) -> None:
        group_commit(queue, cast(SharedSync, Sync()), [{"id": name}], write)

    a = threading.Thread(target=caller, args=("a",), daemon=True)
    b = threading.Thread(target=caller, args=("b",), daemon=True)
    try:
        a.start()
        in_sync[1].wait()
        b.start()
        in_write.wait()  # b took the lead and writes while a's sync runs
        assert not queue.syncing
        write_gate.set()
        in_sync[2].wait()  # b's group syncs too
        gates[1].set()
        a.join(timeout=60)  # a's sync ends while b still leads
        assert not a.is_alive()
        assert queue.leader and queue.epoch == 2, (queue.leader, queue.epoch)
    finally:
        for gate in gates.values():
            gate.set()
        write_gate.set()
        a.join(timeout=60)
        b.join(timeout=60)
    assert not queue.leader and not queue.waiting and not queue.syncing


class _Interrupted(BaseException):
    """What a signal handler raises in the main thread here (as Ctrl-C raises KeyboardInterrupt)."""


def test_a_caller_interrupted_while_queued_leaves_the_queue_and_the_lead_goes_on() -> None:
    """Ctrl-C in a caller queued behind a group: the caller raises, and the group's leader must
    not hand the lead to it (nobody would take it, and every later caller would wait for ever)."""
    import signal
    import sys

    queue = GroupQueue(overlap_after=3600.0)  # no takeover: the hand-over alone decides
    writing, release_write = threading.Event(), threading.Event()
    batches: list[list[str]] = []
    plain = _numbered_writes(batches)

    def write(events: list[dict[str, Any]]) -> tuple[list[Any], list[SyncPoint]]:
        if not batches:  # the first group's write runs until the test lets it end
            writing.set()
            release_write.wait()
        return plain(events)

    class Sync:
        def make_durable(self, point: SyncPoint) -> bool:
            return True

    def caller(name: str) -> None:
        group_commit(queue, cast(SharedSync, Sync()), [{"id": name}], write)

    def interrupt(_signum: int, _frame: Any) -> None:
        raise _Interrupted

    main = threading.get_ident()
    previous = signal.signal(signal.SIGUSR1, interrupt)
    first = threading.Thread(target=caller, args=("first",), daemon=True)
    try:
        first.start()
        writing.wait()

        # Signalled only once this (main) thread sleeps in its wait, queued behind the first group.
        def waiting_in_main() -> bool:
            frame = sys._current_frames().get(main)
            return len(queue.waiting) == 1 and frame is not None and frame.f_code.co_name == "_wait"

        threading.Thread(
            target=lambda: (_until(waiting_in_main), signal.pthread_kill(main, signal.SIGUSR1)), daemon=True
        ).start()
        with pytest.raises(_Interrupted):
            caller("interrupted")
    finally:
        signal.signal(signal.SIGUSR1, previous)
        release_write.set()
        first.join(timeout=60)
    assert not queue.waiting and not queue.leader
    later = threading.Thread(target=caller, args=("later",), daemon=True)
    later.start()
    later.join(timeout=60)
    assert not later.is_alive(), "a later caller waited for a lead handed to the interrupted one"
    assert batches == [["first"], ["later"]]
