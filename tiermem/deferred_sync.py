"""Appends written now and made durable a little later, so that the next write need not wait.

A writer that answers each caller only once the caller's records are durable,
and that has more records to write in the meantime (the server's batches of
turns), would otherwise wait out every fsync before writing what queued up
behind it: each batch then waits for the fsync of the batch ahead of it and for
its own. `EventLog.write_validated` writes and indexes a batch under the stream
lock and returns where its bytes end (`SyncPoint`s); `Syncer.make_durable`
returns once those bytes are on disk, and may run on another thread while the
writer goes on with the next batch. Under the log's fsync policy:

- `group`: through the stream's shared sync record, as group commit does
  (`SharedSync.make_durable`), so the fsync is shared with every other
  caller, in this process or another;
- `always`: a fsync of the segment, unless one this `Syncer` ran already covers
  the point: before each fsync the file's size is noted, and every byte below
  it, whoever wrote it, is flushed by that fsync (a later batch written while
  an earlier one's fsync ran needs its own; batches written before a fsync
  share it);
- `none`: nothing, as for every append under that policy.

A failed fsync: the kernel reports a failed write-back once per open file, so
a later fsync of the same file can succeed for pages the failure lost. Every
point of that file that ends below its size when the failure was seen is
therefore refused (`StorageError`), not only the one whose fsync failed; what
is written after it gets a fsync of its own.

The points' descriptors (each a duplicate the write made for this purpose) are
closed by `make_durable`, or by `release` when the batch is abandoned.
"""

from __future__ import annotations

import os
import threading

from tiermem import heldio
from tiermem.errors import StorageError, os_reason
from tiermem.groupcommit import SharedSync, SyncPoint

Points = list[tuple[SharedSync | None, SyncPoint]]
KEEP = 1024  # segments remembered (one per day written: a server writes one or two at a time)


class Syncer:
    """Makes written appends durable for one log (`policy`: its fsync setting); thread-safe."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.fsyncs = 0  # fsyncs this syncer ran (for benchmarks and tests)
        self._lock = threading.Lock()  # one fsync at a time: the next one may find itself covered
        self._durable: dict[tuple[str, int], int] = {}  # (segment, inode) -> bytes flushed
        self._failed: dict[tuple[str, int], int] = {}  # (segment, inode) -> its size when a fsync failed

    def make_durable(self, points: Points) -> None:
        """Return once every point's bytes are on disk (raises StorageError if they may not be)."""
        try:
            for shared, point in points:
                if shared is not None:
                    shared.make_durable(point)
                elif self.policy != "none":
                    self._sync(point)
        finally:
            release(points)

    def _sync(self, point: SyncPoint) -> None:
        key = (point.segment, point.ino)
        with self._lock:
            failed = self._failed.get(key)
            if failed is not None and point.end <= failed:
                raise StorageError(
                    f"syncing {point.segment}.jsonl to disk failed before these records were made "
                    "durable; they may not be"
                )
            if self._durable.get(key, 0) >= point.end:
                return
            size = heldio.size_of(point.fd)  # written before the fsync begins: flushed by it
            try:
                os.fsync(point.fd)
            except OSError as exc:
                if len(self._failed) > KEEP:
                    self._failed.clear()
                self._failed[key] = max(size, heldio.size_of(point.fd))
                raise StorageError(
                    f"syncing {point.segment}.jsonl to disk: {os_reason(exc)}; "
                    "the records of this write may not be durable"
                ) from exc
            self.fsyncs += 1
            if len(self._durable) > KEEP:
                self._durable.clear()
            self._durable[key] = max(size, self._durable.get(key, 0))


def release(points: Points) -> None:
    """Close the points' descriptors (a batch that will not be made durable here)."""
    for _shared, point in points:
        heldio.close_now(point.fd)
