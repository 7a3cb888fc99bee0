"""Group commit for `fsync = "group"`: many callers, threads and processes, share each fsync.

Two stages:

1. **Write** (per process). Callers queue their events; the first to find no
   leader leads, and later callers sleep, each on its own lock. A leader takes
   the whole queue, writes it under the stream lock with one id-index
   transaction, makes it durable (stage 2), wakes its callers and only then
   hands the lead to the first caller queued meanwhile. So N threads of one
   process cost one lock round, one index commit, one write and one fsync, not
   N, and each wake-up wakes exactly the thread it concerns. One group of a
   process is in flight at a time: the callers that come while it syncs are
   the next group, written and synced together; only if that sync runs past
   `OVERLAP_AFTER` (a busy disk) does the first of them take the lead and write
   the next group beside it. (Handing the lead over before the sync, so that
   the next group was written while this one waited for the disk, was
   measured: each process then ran two fsyncs at once with ~2.9 records each
   instead of one with ~4.5, and paid a hand-off and a yield of the interpreter
   lock per group besides: ~30 % more CPU per record with 8 thread callers.)
2. **Sync** (across processes). A caller returns only once the bytes of its
   records are on disk. The stream's `.sync` file holds, under its own `flock`,
   the last segment fsynced and how far (`SharedSync`). A caller reads it; if
   its end is below the recorded size it returns at once, if a fsync already
   running will cover it, it waits for that one; otherwise it notes the
   segment's size, fsyncs (the lock released meanwhile) and records the size.
   fsync on any descriptor flushes the whole file, whichever process wrote the
   bytes, which is what makes sharing across processes sound.

Why not a writer process per data directory: every record would then cross a
pipe twice and wait for a process the caller does not control (one that can die
or lag); with the shared sync record nothing runs besides the callers, and a
caller killed at any point leaves nothing for the others to wait on (`flock` is
released with the process).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tiermem import heldio
from tiermem.errors import StorageError, os_reason

# The shared record: which segment (a hash of its name, and its inode, since an
# erasure rewrites a segment under the same name), how many bytes of it are durable,
# and a generation that every cut of a torn tail moves on: a fsync that ran while a
# cut happened may have flushed bytes that no longer exist, so it records nothing.
# Then the fsync running now, if a process announced one: segment, inode, the size it
# covers and the process, which holds the byte at _FLIGHT_AT locked while it runs.
# Last, the `SharedSync` that recorded the durable size (a random mark of its own).
_SLOT = struct.Struct("<8sQQQ8sQQQQ")
_FLIGHT_AT = 1 << 20  # a POSIX lock on one byte past the record; the kernel drops it with the process


class SyncPoint(NamedTuple):  # a tuple: one is built per segment of every group
    """Bytes [0, end) of `segment` must be durable before the caller returns.

    `fd` is this group's own duplicate of the segment's descriptor: the writer may
    roll the segment over (and close its descriptor) while the group still waits.
    `ino` is the segment file's inode (known to the writer, so not asked again here).
    """

    segment: str
    fd: int
    end: int
    ino: int


class _Flight:
    """A fsync running in this process: what it covers, and when it is over.

    `over` is held while the fsync runs; a waiter acquires and at once releases it,
    which lets the next waiter through (a plain lock: cheaper than an Event per fsync).
    """

    __slots__ = ("alone", "failed", "ino", "key", "over", "size")

    def __init__(self, key: bytes, ino: int, size: int, alone: bool = False) -> None:
        self.key, self.ino, self.size = key, ino, size
        self.alone = alone  # when it started, no other process seemed to use the record
        self.failed = False
        self.over = threading.Lock()
        self.over.acquire()


class SharedSync:
    """The cross-process fsync record of one stream (`<stream>/.sync`).

    The record is read and written under its `flock`, but the fsync itself runs
    outside it: a caller whose bytes an earlier fsync already covered must not wait
    behind a fsync it does not need (with the lock held through the fsync, every
    caller queued behind a small group paid a whole extra fsync of latency). A
    caller whose bytes a fsync already running will cover waits for that one
    instead of starting its own: in its own process through `_Flight`, in another
    through the announced flight and its POSIX lock (a caller that finds the lock
    free while the record still announces a flight knows that process died, and
    syncs for itself).
    """

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.lock = threading.Lock()  # flock does not exclude threads sharing one descriptor
        self.fsyncs = 0  # how many fsyncs this process issued here (for benchmarks and tests)
        self._keys: dict[str, bytes] = {}  # segment -> its key in the record (few segments per stream)
        self._flights: list[_Flight] = []
        self._announcing = False  # this process holds the flight lock and announced a flight
        # key -> (inode, size, generation): what this process's own fsyncs made durable. Trusted
        # only while the record's generation is the same (no cut since the fsync began), and
        # kept here instead of in the record while this process seems alone (nobody else
        # would read it), which spares each fsync the record's lock, read and write.
        self._durable: dict[bytes, tuple[int, int, int]] = {}
        self._pid = os.getpid()
        # Who recorded the durable size last: this object's own mark, not the pid, since two
        # logs in one process (each with its own `.sync` descriptor) share nothing else.
        self._me = int.from_bytes(os.urandom(8), "little") | 1

    def close(self) -> None:
        os.close(self.fd)

    def _key(self, segment: str) -> bytes:
        key = self._keys.get(segment)
        if key is None:
            if len(self._keys) > 1024:  # old segments (sealed days) are not written again
                self._keys.clear()
            key = self._keys[segment] = hashlib.blake2b(segment.encode(), digest_size=8).digest()
        return key

    def _read(self) -> list[Any]:
        raw = heldio.pread_now(self.fd, _SLOT.size, 0)
        if len(raw) != _SLOT.size:
            return [b"", 0, 0, 0, b"", 0, 0, 0, 0]
        return list(_SLOT.unpack(raw))

    def _flight_lock(self, mode: int) -> bool:
        try:
            fcntl.lockf(self.fd, mode, 1, _FLIGHT_AT)
        except OSError:  # held by another process (EAGAIN / EACCES)
            return False
        return True

    def make_durable(self, point: SyncPoint) -> bool:
        """Return once bytes [0, point.end) of the segment are on disk; True if this call fsynced."""
        key, ino, end = self._key(point.segment), point.ino, point.end
        while True:
            # Always the shared record, never a copy kept in this process: a torn tail cut
            # off by another process (`forget_synced`) makes an older record wrong.
            remote = False
            with self.lock:
                heldio.lock(self.fd)
                try:
                    rec = self._read()
                    if rec[0] == key and rec[1] == ino and rec[2] >= end:
                        return False
                    mem = self._durable.get(key)
                    if mem is not None and mem[0] == ino and mem[1] >= end and mem[2] == rec[3]:
                        return False
                    flight = next(
                        (f for f in self._flights if f.key == key and f.ino == ino and f.size >= end), None
                    )
                    if (
                        flight is None
                        and rec[4] == key
                        and rec[5] == ino
                        and rec[6] >= end
                        and rec[7] != self._pid
                    ):
                        # Another process announced a fsync covering us: wait for it if it
                        # still runs (its lock is held); a free lock means it died mid-way.
                        remote = not self._flight_lock(fcntl.LOCK_SH | fcntl.LOCK_NB)
                        if not remote:
                            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, _FLIGHT_AT)
                    if flight is None and not remote:
                        # Everything written before this moment is below `size` and is
                        # flushed by the fsync that follows, whoever wrote it.
                        size = heldio.size_of(point.fd)
                        generation = rec[3]
                        self._announce(rec, key, ino, size)
                        alone = rec[8] == self._me and rec[7] in (0, self._pid)
                        mine = _Flight(key, ino, size, alone)  # from here on, `_land` ends it
                        self._flights.append(mine)
                finally:
                    heldio.unlock(self.fd)
            if remote:
                fcntl.lockf(self.fd, fcntl.LOCK_SH, 1, _FLIGHT_AT)  # until that fsync is over
                fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, _FLIGHT_AT)
            elif flight is not None:
                with flight.over:  # then look again: that fsync may have been cut short
                    pass
                if flight.failed:
                    # Its error is not ours to retry: the kernel reports a failed writeback
                    # once per open file, so a second fsync of the same file would return
                    # success for pages it lost.
                    raise StorageError(
                        f"syncing {point.segment}.jsonl to disk failed in this process; "
                        "the records of this write may not be durable"
                    )
            else:
                break
        synced = False
        try:
            try:
                os.fsync(point.fd)
            except OSError as exc:
                raise StorageError(
                    f"syncing {point.segment}.jsonl to disk: {os_reason(exc)}; "
                    "the records of this write may not be durable"
                ) from exc
            synced = True
        finally:
            mine.failed = not synced
            self._land(mine, generation, synced)
        return True

    def _announce(self, rec: list[Any], key: bytes, ino: int, size: int) -> None:
        """Say in the record that this process fsyncs `size` bytes of the segment (locks held).

        Only while this process holds the flight lock: another process's waiters block
        on it. If another process holds it (it announced its own fsync), say nothing.
        Nor while this process seems alone (it recorded the last fsync and nobody else
        announces one): an announcement only helps other processes.
        """
        if not self._announcing and rec[8] == self._me and rec[7] in (0, self._pid):
            return
        if not self._announcing:
            self._announcing = self._flight_lock(fcntl.LOCK_EX | fcntl.LOCK_NB)
        if self._announcing:
            rec[4:8] = key, ino, size, self._pid
            os.pwrite(self.fd, _SLOT.pack(*rec), 0)

    def _land(self, mine: _Flight, generation: int, synced: bool) -> None:
        """A fsync is over: record what it made durable, and end the announcement with the last one.

        Whatever fails here, the flight ends and the flight lock is let go: a waiter in this
        process or another must never wait for a fsync that is over.
        """
        try:
            with self.lock:
                self._flights.remove(mine)
                if synced:
                    self.fsyncs += 1
                    mem = self._durable.get(mine.key)
                    if mem is None or mem[0] != mine.ino or mem[2] != generation or mem[1] < mine.size:
                        if len(self._durable) > 1024:
                            self._durable.clear()
                        self._durable[mine.key] = (mine.ino, mine.size, generation)
                if mine.alone and not self._announcing:
                    return  # nobody else reads the record: this process's memory is enough
                last = self._announcing and not self._flights
                self._announcing = self._announcing and not last
                try:
                    heldio.lock(self.fd)
                    try:
                        self._record(mine, generation, synced, last)
                    finally:
                        heldio.unlock(self.fd)
                finally:
                    if last:
                        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, _FLIGHT_AT)
        finally:
            mine.over.release()

    def _record(self, mine: _Flight, generation: int, synced: bool, last: bool) -> None:
        """Write what a landed fsync made durable, and end this process's announcement (locks held)."""
        rec = self._read()
        changed = False
        # Never move the record back (a later fsync may have recorded more), nor
        # past a cut made while this fsync ran (then the generation moved on).
        if (
            synced
            and rec[3] == generation
            and not (rec[0] == mine.key and rec[1] == mine.ino and rec[2] >= mine.size)
        ):
            rec[0:3] = mine.key, mine.ino, mine.size
            rec[8] = self._me
            changed = True
        if last and rec[7] == self._pid:
            rec[4:8] = b"", 0, 0, 0
            changed = True
        if changed:
            os.pwrite(self.fd, _SLOT.pack(*rec), 0)


def forget_synced(path: Path) -> None:
    """Clear a stream's shared record, if it has one: a segment was cut shorter (a torn tail
    removed), so bytes below the recorded size may be written again and need their own fsync.

    Any writer may cut a tail, whatever its fsync policy, so this opens the file itself. The
    generation moves on, so a fsync running meanwhile (it may have flushed the cut bytes)
    does not record its size afterwards.
    """
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, _SLOT.size, 0)
        rec: list[Any] = (
            list(_SLOT.unpack(raw)) if len(raw) == _SLOT.size else [b"", 0, 0, 0, b"", 0, 0, 0, 0]
        )
        rec[0:4] = bytes(8), 0, 0, rec[3] + 1  # the announced flight, if any, stays
        os.pwrite(fd, _SLOT.pack(*rec), 0)
    finally:
        os.close(fd)  # releases the lock


class GroupRequest:
    """One caller's events, waiting for a leader to write them and for their bytes to be durable.

    `wake` is held from creation; the caller sleeps by acquiring it again, and whoever
    has news for this caller alone (its group is durable, or it is the next leader)
    releases it. One futex per caller, so a finished group wakes exactly its own
    callers and a hand-off exactly one thread, instead of every waiter re-checking a
    shared condition (with 8 callers that herd cost more CPU than the group's work).
    """

    __slots__ = ("done", "epoch", "error", "events", "results", "wake")

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.results: list[Any] | None = None
        self.error: BaseException | None = None
        self.done = False  # False when woken: this caller leads the next group
        self.epoch = 0  # the lead's number, when it is handed here
        self.wake = threading.Lock()
        self.wake.acquire()


# How long a group's sync may run before the first caller queued behind it takes the lead and
# writes the next group beside it. On this kind of disk a flush takes 0.1-0.25 ms when it is idle:
# then one group at a time is cheapest (each fsync carries every caller that came meanwhile). A
# sync past a millisecond is a busy disk, where waiting for it and then for one's own fsync would
# double the wait: there the next group is written and its fsync started beside it.
OVERLAP_AFTER = 0.001


@dataclass
class GroupQueue:
    """The per-process, per-stream queue of callers waiting to be written.

    `leader` is True from the moment a caller takes the lead until the last leader
    finds nobody waiting: leadership passes from hand to hand, never through a free-for-all.
    `epoch` moves on each time the lead changes hands, so a leader whose lead the first
    queued caller took while its sync ran long (`syncing`, `overlap_after`) does not hand it
    over a second time.
    """

    mutex: threading.Lock = field(default_factory=threading.Lock)
    waiting: list[GroupRequest] = field(default_factory=list)
    leader: bool = False
    epoch: int = 0
    syncing: bool = False  # the lead's holder has written its group and waits for the disk
    sync_since: float = 0.0  # when that wait began (`time.monotonic`): the overlap counts from it
    overlap_after: float = OVERLAP_AFTER


# write(events) -> (one result per event, the points to make durable)
WriteFn = Callable[[list[dict[str, Any]]], tuple[list[Any], list[SyncPoint]]]


def group_commit(
    queue: GroupQueue, sync: SharedSync, events: list[dict[str, Any]], write: WriteFn
) -> list[Any]:
    """Append `events` as part of a group; return their results once they are durable.

    The first caller to find no leader leads; later callers queue and sleep. A
    leader takes everything queued (itself included), writes it, makes it
    durable, wakes its own callers and hands the lead to the first caller queued
    since (or that caller took it already: the sync ran past `overlap_after`).
    An error reaches every caller of the group it happened in; the lead passes
    on whatever happened.
    """
    req = GroupRequest(events)
    with queue.mutex:
        lead = not queue.leader  # then nobody is queued either
        if lead:
            queue.leader = True
            queue.epoch += 1
            epoch = queue.epoch
        else:
            first = not queue.waiting
            queue.waiting.append(req)
    if lead:
        batch = [req]
    else:
        try:
            epoch = _wait(queue, req, first)
        except BaseException:  # Ctrl-C (or another asynchronous exception) while queued
            _abandon(queue, req)
            raise
        if req.done:
            if req.error is not None:
                raise req.error
            assert req.results is not None
            return req.results
        with queue.mutex:  # still first in the queue: only a leader takes from it
            batch, queue.waiting = queue.waiting, []
    try:
        _commit(batch, sync, write, queue, epoch)
    finally:
        _hand_over(queue, epoch)
    if len(batch) == 1 and threading.active_count() > 1:
        # A group of one: nobody queued while it was written and synced, so the sync did not
        # block (a disk without a flush to wait for). Without a yield this thread would run its
        # next append at once and keep the interpreter lock for a whole switch interval, every
        # other thread of the process (a server's included) waiting behind it.
        time.sleep(0)
    if req.error is not None:
        raise req.error
    assert req.results is not None
    return req.results


def _wait(queue: GroupQueue, req: GroupRequest, first: bool) -> int:
    """Sleep until `req`'s group is answered (`req.done`) or `req` holds the lead; return the lead's epoch.

    Only the first caller queued behind a group watches the clock: the others are taken
    with it in the next group, whoever leads it.
    """
    if first:
        timeout = queue.overlap_after
        while not req.wake.acquire(timeout=timeout):
            timeout = queue.overlap_after
            with queue.mutex:
                if queue.syncing and queue.waiting and queue.waiting[0] is req:
                    # Counted from the start of the sync, not from when this caller queued: a
                    # long write followed by a short sync is no reason to write beside it.
                    left = queue.sync_since + queue.overlap_after - time.monotonic()
                    if left > 0:
                        timeout = left
                        continue
                    queue.syncing = False  # the lead is this caller's now: its leader keeps only its sync
                    queue.epoch += 1
                    req.epoch = queue.epoch
                    return queue.epoch
    else:
        req.wake.acquire()  # released once: results are in, or the lead was handed here
    return req.epoch


def _abandon(queue: GroupQueue, req: GroupRequest) -> None:
    """A queued caller leaves by an exception: out of the queue, and the lead passed on if it had
    been handed it (or took it), since every later caller would otherwise wait for a leader that
    is gone. A caller already taken into a group is left to that group's leader: its events are
    written and answered as the others' (the caller just never hears of it)."""
    with queue.mutex:
        if req.done or req not in queue.waiting:
            return
        queue.waiting.remove(req)
        if not (queue.leader and req.epoch == queue.epoch):
            return  # not its lead: whoever holds it hands it to the next caller still queued
        nxt = _pass_lead(queue)
    if nxt is not None:
        nxt.wake.release()  # nxt.done is False: it wakes as the leader


def _hand_over(queue: GroupQueue, epoch: int) -> None:
    """This leader's group is answered (or failed): pass the lead to the first caller queued, if
    any, unless that caller took it already."""
    with queue.mutex:
        if queue.epoch != epoch:
            return
        nxt = _pass_lead(queue)
    if nxt is not None:
        nxt.wake.release()  # nxt.done is False: it wakes as the leader


def _pass_lead(queue: GroupQueue) -> GroupRequest | None:
    """With `queue.mutex` held, by the lead's holder: the first caller queued is the next leader
    (returned, to be woken once the mutex is let go), or nobody leads."""
    queue.syncing = False
    if not queue.waiting:
        queue.leader = False
        return None
    nxt = queue.waiting[0]
    queue.epoch += 1
    nxt.epoch = queue.epoch
    return nxt


def _commit(
    batch: list[GroupRequest], sync: SharedSync, write: WriteFn, queue: GroupQueue, epoch: int
) -> None:
    """Write, sync and answer `batch` (the leader's own request is `batch`'s first)."""
    combined = batch[0].events if len(batch) == 1 else [ev for r in batch for ev in r.events]
    points: list[SyncPoint] = []
    try:
        results, points = write(combined)
        with queue.mutex:
            queue.syncing = queue.epoch == epoch  # from here on the first queued may take the lead
            queue.sync_since = time.monotonic()
        for point in points:
            sync.make_durable(point)
    except BaseException as exc:  # every caller of the group must hear about it
        for r in batch:
            r.error = exc
    else:
        pos = 0
        for r in batch:
            r.results = results[pos : pos + len(r.events)]
            pos += len(r.events)
    finally:
        try:
            _close_points(points, batch)
        finally:
            # Whatever failed above, every follower wakes (with the group's error, if any):
            # a follower left asleep would wait for ever.
            for r in batch[1:]:
                r.done = True
                r.wake.release()


def _close_points(points: list[SyncPoint], batch: list[GroupRequest]) -> None:
    """Close the group's descriptors, every one even if one fails; a failure reaches every caller
    of the group that has no error yet (its records were synced, but the call did not end cleanly)."""
    failed: OSError | None = None
    for point in points:
        try:
            heldio.close_now(point.fd)
        except OSError as exc:
            failed = failed or exc
    if failed is not None:
        error = StorageError(f"closing a synced segment of this write: {os_reason(failed)}")
        for r in batch:
            if r.error is None:
                r.error = error
