"""Group commit for `fsync = "group"`: many callers, threads and processes, share each fsync.

Two stages, so that writing the next group never waits for the disk:

1. **Write** (per process). Callers queue their events; whichever caller finds
   no leader takes the whole queue and writes it under the stream lock with one
   id-index transaction, then hands leadership on at once. So N threads of one
   process cost one lock round, one index commit and one write, not N.
2. **Sync** (across processes). A caller returns only once the bytes of its
   records are on disk. The stream's `.sync` file holds, under its own `flock`,
   the last segment fsynced and how far (`SharedSync`). Whoever takes that lock
   first notes the segment's size, fsyncs it and records the size; everyone who
   queued behind it, in any process, finds their end already covered and
   returns without an fsync of their own. fsync on any descriptor flushes the
   whole file, whichever process wrote the bytes, which is what makes sharing
   across processes sound.

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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tiermem.errors import StorageError, os_reason

# The shared record: which segment (a hash of its name, and its inode, since an
# erasure rewrites a segment under the same name) and how many bytes of it are durable.
_SLOT = struct.Struct("<8sQQ")


@dataclass(frozen=True)
class SyncPoint:
    """Bytes [0, end) of `segment` must be durable before the caller returns.

    `fd` is this group's own duplicate of the segment's descriptor: the writer may
    roll the segment over (and close its descriptor) while the group still waits.
    `ino` is the segment file's inode (known to the writer, so not asked again here).
    """

    segment: str
    fd: int
    end: int
    ino: int


class SharedSync:
    """The cross-process fsync record of one stream (`<stream>/.sync`)."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self.lock = threading.Lock()  # flock does not exclude threads sharing one descriptor
        self.fsyncs = 0  # how many fsyncs this process issued here (for benchmarks and tests)
        self._keys: dict[str, bytes] = {}  # segment -> its key in the record (few segments per stream)

    def close(self) -> None:
        os.close(self.fd)

    def _key(self, segment: str) -> bytes:
        key = self._keys.get(segment)
        if key is None:
            if len(self._keys) > 1024:  # old segments (sealed days) are not written again
                self._keys.clear()
            key = self._keys[segment] = hashlib.blake2b(segment.encode(), digest_size=8).digest()
        return key

    def make_durable(self, point: SyncPoint) -> bool:
        """Return once bytes [0, point.end) of the segment are on disk; True if this call fsynced."""
        key, ino = self._key(point.segment), point.ino
        # Always the shared record, never a copy kept in this process: a torn tail cut
        # off by another process (`forget_synced`) makes an older record wrong.
        with self.lock:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                raw = os.pread(self.fd, _SLOT.size, 0)
                if len(raw) == _SLOT.size and self._covers(_SLOT.unpack(raw), key, ino, point.end):
                    return False
                # Everything written before this moment is below `size` and is
                # flushed by the fsync that follows, whoever wrote it.
                size = os.fstat(point.fd).st_size
                try:
                    os.fsync(point.fd)
                except OSError as exc:
                    raise StorageError(
                        f"syncing {point.segment}.jsonl to disk: {os_reason(exc)}; "
                        "the records of this write may not be durable"
                    ) from exc
                self.fsyncs += 1
                os.pwrite(self.fd, _SLOT.pack(key, ino, size), 0)
                return True
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    @staticmethod
    def _covers(record: tuple[bytes, int, int], key: bytes, ino: int, end: int) -> bool:
        return record[0] == key and record[1] == ino and record[2] >= end


def forget_synced(path: Path) -> None:
    """Clear a stream's shared record, if it has one: a segment was cut shorter (a torn tail
    removed), so bytes below the recorded size may be written again and need their own fsync.

    Any writer may cut a tail, whatever its fsync policy, so this opens the file itself; its
    `flock` (a new open file description) also waits for a fsync running in this process.
    """
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, bytes(_SLOT.size), 0)
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

    __slots__ = ("events", "results", "error", "done", "wake")

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.results: list[Any] | None = None
        self.error: BaseException | None = None
        self.done = False  # False when woken: this caller leads the next group
        self.wake = threading.Lock()
        self.wake.acquire()


@dataclass
class GroupQueue:
    """The per-process, per-stream queue of callers waiting to be written.

    `leader` is True from the moment a caller takes the lead until the last leader
    finds nobody waiting: leadership passes from hand to hand, never through a free-for-all.
    """

    mutex: threading.Lock = field(default_factory=threading.Lock)
    waiting: list[GroupRequest] = field(default_factory=list)
    leader: bool = False


# write(events) -> (one result per event, the points to make durable)
WriteFn = Callable[[list[dict[str, Any]]], tuple[list[Any], list[SyncPoint]]]


def group_commit(
    queue: GroupQueue, sync: SharedSync, events: list[dict[str, Any]], write: WriteFn
) -> list[Any]:
    """Append `events` as part of a group; return their results once they are durable.

    The first caller to find no leader leads; later callers queue and sleep. A
    leader takes everything queued (itself included), writes it, hands the lead to
    the first caller queued since (the next group is written while this one
    syncs), makes its group durable and wakes its own callers. An error reaches
    every caller of the group it happened in.
    """
    req = GroupRequest(events)
    with queue.mutex:
        lead = not queue.leader  # then nobody is queued either
        if lead:
            queue.leader = True
        else:
            queue.waiting.append(req)
    if lead:
        batch = [req]
    else:
        req.wake.acquire()  # released once: results are in, or the lead was handed here
        if req.done:
            if req.error is not None:
                raise req.error
            assert req.results is not None
            return req.results
        with queue.mutex:  # still first in the queue: only a leader takes from it
            batch, queue.waiting = queue.waiting, []
    _commit(batch, sync, write, queue)
    if req.error is not None:
        raise req.error
    assert req.results is not None
    return req.results


def _hand_over(queue: GroupQueue) -> None:
    """Written (or failed): pass the lead to the first caller queued, if any."""
    with queue.mutex:
        if not queue.waiting:
            queue.leader = False
            return
        nxt = queue.waiting[0]
    nxt.wake.release()  # nxt.done is False: it wakes as the leader


def _commit(batch: list[GroupRequest], sync: SharedSync, write: WriteFn, queue: GroupQueue) -> None:
    """Write, hand over, sync and answer `batch` (the leader's own request is `batch`'s first)."""
    combined = batch[0].events if len(batch) == 1 else [ev for r in batch for ev in r.events]
    points: list[SyncPoint] = []
    try:
        try:
            results, points = write(combined)
        finally:
            _hand_over(queue)
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
        for point in points:
            os.close(point.fd)
        for r in batch[1:]:
            r.done = True
            r.wake.release()
