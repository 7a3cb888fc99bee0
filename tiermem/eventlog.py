"""Durable, concurrent, append-only segment files, and positioned reads.

Layout: ``<data>/log/<stream>/date=YYYY-MM-DD/<segment>.jsonl`` (Hive partitions
by event time, UTC). A segment is sealed to ``<segment>.parquet`` in the same
folder (see `tiermem.log.seal`); readers take the Parquet form when both exist.

Every writer, in any process, appends under an exclusive `flock` on the
stream's lock file, so lines never interleave. Under the lock the writer first
checks the tail of the segment it is about to extend: a last line without its
newline can only be the remains of a writer that crashed mid-write, so it is
moved to quarantine with its position and cut off before anything is added.

Event ids go into a small SQLite index (`tiermem.idindex`) that follows the
segments: it remembers how far it has indexed each segment, and a writer may
leave the tail of the segment it appends to unindexed (the segment listed in
the index's lag list, its ids kept in memory); every duplicate check first
brings the listed tails into the index. A caller-supplied `event_id` that is
already in the log is a duplicate: counted, not appended.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from tiermem import compiled_records, durable_files, heldio, steady_append
from tiermem.appended import AppendBatchResult, AppendResult
from tiermem.durable_files import fsync_path, write_atomic
from tiermem.errors import StorageError, ValidationError, os_reason
from tiermem.eventlog_index import IndexFollower, Tail
from tiermem.events import CALLER, INTERNAL, STREAMS, stream_of, upcast, validate
from tiermem.groupcommit import GroupQueue, SharedSync, SyncPoint, forget_synced, group_commit
from tiermem.idindex import (
    INDEX_NAME,
    LagList,
    open_index,
)
from tiermem.ids import new_event_id
from tiermem.rejects import Rejected, write_rejects
from tiermem.settings import Settings

__all__ = ["INDEX_NAME", "AppendBatchResult", "AppendResult", "Checkpoints", "EventLog", "open_index"]

# An erased event's line is replaced by a tombstone holding only its id, type and
# ts plus this mark, so line positions (and every checkpoint) stay valid.
ERASED_MARK = "_erased"


def partition_of(event: Mapping[str, Any]) -> str:
    return "date=" + str(event["ts"])[:10]


def sealing_mark(jsonl: Path) -> Path:
    """The file a seal creates (under the stream lock) before converting a segment.

    While it exists, writers treat the segment as closed and put late events for
    that day in a new segment, which the next seal takes.
    """
    return jsonl.with_name(f".{jsonl.stem}.sealing")


def _new_per_partition(
    by_partition: dict[str, list[int]], ids: list[str], seen: set[str]
) -> tuple[dict[str, list[int]], list[int]]:
    """({partition: indexes to write}, duplicate indexes): a duplicate is an id already in the
    log (`seen`) or repeated earlier in the same batch."""
    if not seen and len(set(ids)) == len(ids):
        return by_partition, []  # the bulk case: nothing seen before, no repeats, no per-id loop
    kept: dict[str, list[int]] = {}
    duplicates: list[int] = []
    for partition, idxs in by_partition.items():
        keep: list[int] = []
        for i in idxs:
            if ids[i] in seen:
                duplicates.append(i)
            else:
                seen.add(ids[i])
                keep.append(i)
        if keep:
            kept[partition] = keep
    return kept, duplicates


class _StreamWriter:
    """One stream's lock file and open segment handles, shared by this process's threads."""

    def __init__(self, log: EventLog, stream: str) -> None:
        self.log = log
        self.stream = stream
        self.root = log.root / stream
        self.root.mkdir(parents=True, exist_ok=True)
        self.thread_lock = threading.Lock()
        self.lock_fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        self.fds: dict[str, int] = {}  # partition -> fd of its active segment
        self.inos: dict[str, int] = {}  # partition -> inode of that fd (fixed while it is open)
        self.active: dict[str, str] = {}  # partition -> active segment stem
        # partition -> (its .jsonl, its .parquet twin, the seal's "being sealed" mark)
        self.paths: dict[str, tuple[str, str, str]] = {}
        # Group commit (`fsync = "group"`, see `tiermem.groupcommit`): this process's
        # callers queue here; the fsync is shared with other processes through `.sync`.
        self.group = GroupQueue()
        self.sync = SharedSync(self.root / ".sync") if log.settings.fsync == "group" else None
        # segment -> this process's ids in it past the id index's offset (see `tiermem.idindex`)
        self.tails: dict[str, Tail] = {}
        self.prestat: dict[str, os.stat_result] = {}  # path -> its stat, taken under the lock
        # The lag list as this writer's current append read it (under the stream lock);
        # `listed` None: the list is damaged.
        self.lag_raw = b""
        self.listed: frozenset[str] | None = frozenset()
        self.checked: dict[str, bytes] = {}  # partition -> the lag record its marks were checked under
        # Where the last append left this writer, if the next may skip the protocol (`tiermem.steady_append`).
        self.steady: steady_append.Steady | None = None
        self.dir_fds: dict[str, int] = {}  # partition -> its folder, opened for `steady`'s look
        # The id index as this stream's writes use it (under `thread_lock`, whichever thread
        # writes): with one connection per thread, each of a group's successive leaders found
        # its page cache stale (another connection had written) and read the pages again.
        self._conn: sqlite3.Connection | None = None
        self._snap: sqlite3.Connection | None = None  # the one-step appends' read snapshot of it
        self.fast_index: Any = None  # the compiled one-step append's connection to it

    def index(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = open_index(self.log.root)
        return self._conn

    def snapshot(self) -> sqlite3.Cursor:
        """A cursor of its own on the id index for the one-step appends' lookups (`steady_append`).

        Each lookup is its own read (no transaction is begun): a read transaction held from
        one append to the next would pin the index's write-ahead log for as long as the
        writer stays idle, and every other process's commits would grow it meanwhile.
        """
        if self._snap is None:
            self._snap = open_index(self.log.root)
        self.end_snapshot()
        return self._snap.cursor()

    def end_snapshot(self) -> None:
        self.steady = None
        if self._snap is not None and self._snap.in_transaction:
            self._snap.execute("ROLLBACK")

    def partition_dir(self, partition: str) -> int:
        fd = self.dir_fds.get(partition)
        if fd is None:
            fd = self.dir_fds[partition] = os.open(self.root / partition, os.O_RDONLY | os.O_DIRECTORY)
        return fd

    def forget_partition_dir(self, partition: str) -> None:
        fd = self.dir_fds.pop(partition, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        self.end_snapshot()
        if self._snap is not None:
            self._snap.close()
        if self.fast_index is not None:
            self.fast_index.close()
        for fd in [*self.fds.values(), *self.dir_fds.values()]:
            os.close(fd)
        self.fds.clear()
        self.dir_fds.clear()
        os.close(self.lock_fd)
        if self._conn is not None:
            self._conn.close()
        if self.sync is not None:
            self.sync.close()

    # Called with both locks held.
    def segment_for(self, partition: str) -> tuple[str, int, os.stat_result]:
        """(stem, fd, its stat) of the partition's segment to append to, its tail repaired.

        The stat stays true until the caller writes: every writer holds the stream lock.
        """
        stem = self.active.get(partition)
        on_disk: os.stat_result | None = None
        if stem is not None:
            jsonl, parquet, sealing = self.paths[partition]
            # Another process may have rolled the segment over, sealed it (or be
            # sealing it), or rewritten it (erasure replaces the file: same name,
            # new inode). Plain string paths: this runs on every append.
            # The lag catch-up of this same append may have just taken it (lock held since).
            on_disk = self.prestat.pop(jsonl, None)
            if on_disk is None:
                try:
                    on_disk = os.stat(jsonl)
                except FileNotFoundError:
                    on_disk = None
            # A seal unlists a segment before it marks it, so while the lag list is the very
            # record this writer last checked the marks under, and names the segment, no seal
            # has begun since.
            unchanged = self.checked.get(partition) is self.lag_raw and (
                f"{self.stream}/{partition}/{stem}" in (self.listed or ())
            )
            if (
                on_disk is None
                or on_disk.st_ino != self.inos[partition]
                or on_disk.st_size >= self.log.settings.segment_max_bytes
                # `access` answers without raising (and building) an exception for the usual "no"
                or (not unchanged and (os.access(parquet, os.F_OK) or os.access(sealing, os.F_OK)))
            ):
                self._drop(partition)
                self.log.forget_segment(f"{self.stream}/{partition}/{stem}")
                stem = None
                on_disk = None
            elif not unchanged:
                self.checked[partition] = self.lag_raw
        if stem is None:
            part_dir = self.root / partition
            stem = self._choose_segment(part_dir)
            path = part_dir / f"{stem}.jsonl"
            created = not path.exists()
            new_partition = not part_dir.exists()
            part_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            if created:  # the new names must survive a crash too, not only the bytes
                fsync_path(part_dir)
            if new_partition:
                fsync_path(self.root)
            self.fds[partition] = fd
            self.inos[partition] = os.fstat(fd).st_ino
            self.active[partition] = stem
            self.paths[partition] = (str(path), str(part_dir / f"{stem}.parquet"), str(sealing_mark(path)))
        fd = self.fds[partition]
        # The path's stat is the open file's while their inodes match (checked above).
        st = self.log.repair_tail(self.stream, partition, stem, fd, on_disk, writer=self)
        return stem, fd, st

    def _drop(self, partition: str) -> None:
        self.end_snapshot()
        fd = self.fds.pop(partition, None)
        self.checked.pop(partition, None)
        self.inos.pop(partition, None)
        self.active.pop(partition, None)
        self.paths.pop(partition, None)
        if fd is not None:
            try:
                if self.sync is not None:
                    # A caller told "duplicate" of a record in this segment returns at
                    # once; the segment this process leaves behind must be durable already.
                    os.fsync(fd)
            except OSError as exc:
                raise StorageError(f"syncing a finished segment of {self.stream}: {os_reason(exc)}") from exc
            finally:
                os.close(fd)

    def _choose_segment(self, part_dir: Path) -> str:
        if part_dir.exists():
            open_segments = sorted(
                p.stem
                for p in part_dir.glob("*.jsonl")
                if not (part_dir / f"{p.stem}.parquet").exists()
                and not sealing_mark(p).exists()
                and p.stat().st_size < self.log.settings.segment_max_bytes
            )
            if open_segments:
                return open_segments[-1]
        return "seg-" + new_event_id()


class EventLog(IndexFollower):
    """The append-only log of one data root. Thread-safe; many processes may share a root."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = settings.log_dir
        self.root.mkdir(parents=True, exist_ok=True)
        self._writers: dict[str, _StreamWriter] = {}
        self._writers_lock = threading.Lock()
        self._index_local = threading.local()
        # segment -> (inode, size, lines): what this process knows of a segment's
        # complete lines, so that appends do not recount a growing file.
        self._line_counts: dict[str, tuple[int, int, int]] = {}
        # segment -> (inode, byte offset the id index covers), learnt under the lock.
        self._indexed_to: dict[str, tuple[int, int]] = {}
        self._reindexed = 0  # how many times lines missing from the index were indexed
        self._lag: LagList | None = None  # the id index's lag list, opened by the first writer
        self._check_fast = compiled_records.bound(settings.limits)  # None without the compiled check
        # The usual append in one compiled call (None without it, or with group commit).
        self._append_fast = steady_append.appender(self)
        self._lag_lock = threading.Lock()

    # ------------------------------------------------------------- lifecycle
    def close(self) -> None:
        with self._writers_lock:
            for w in self._writers.values():
                try:
                    # Failing here loses nothing: the segments stay listed, and the next
                    # duplicate check anywhere reads their tails from the files.
                    with contextlib.suppress(sqlite3.Error, OSError):
                        if w.tails:
                            self._retire_tails(w)
                finally:
                    w.close()
            self._writers.clear()
            if self._lag is not None:
                self._lag.close()
                self._lag = None
        conn: sqlite3.Connection | None = getattr(self._index_local, "conn", None)
        if conn is not None:
            conn.close()
            self._index_local.conn = None

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def forget_segment(self, segment: str) -> None:
        """Drop cached knowledge of a segment (it was sealed, replaced or removed)."""
        self._line_counts.pop(segment, None)
        self._indexed_to.pop(segment, None)
        self._drop_tail(segment)  # still listed: whoever checks for duplicates reads it from the file

    # --------------------------------------------------------------- rejects
    def reject(self, record: Any, error: ValidationError, *, source: str = "append") -> None:
        """Keep an invalid record with its reason under `_rejects/` (never lost)."""
        self.reject_many([Rejected(record, error)], source=source)

    def reject_many(
        self, items: Iterable[Rejected | tuple[Any, ValidationError]], *, source: str = "append"
    ) -> Path | None:
        """Keep invalid records with their reasons, one write and one fsync for all of them."""
        return write_rejects(self.settings, items, source=source)

    # --------------------------------------------------------------- appends
    def _writer(self, stream: str) -> _StreamWriter:
        w = self._writers.get(stream)  # every append asks: no lock once the writer exists
        if w is not None:
            return w
        with self._writers_lock:
            w = self._writers.get(stream)
            if w is None:
                w = self._writers[stream] = _StreamWriter(self, stream)
            return w

    def check(self, record: Any, writer: str = INTERNAL) -> dict[str, Any]:
        """Validate one record as `writer` with this log's limits (no write).

        A caller's record must also fit in `limits.max_record_bytes` once stored.
        """
        limits = self.settings.limits
        event = validate(record, writer=writer, limits=limits)
        if writer == CALLER:
            size = len(orjson.dumps(event))
            if size > limits.max_record_bytes:
                raise ValidationError(
                    "<record>", f"{size:,} bytes, over max_record_bytes = {limits.max_record_bytes:,}"
                )
        return event

    def append(self, record: Mapping[str, Any], *, writer: str = INTERNAL) -> AppendResult:
        """Validate, enrich and durably append one event. Raises ValidationError (after rejecting).

        `writer=CALLER` for a record from outside: only caller event types pass
        (the trust boundary of `ingest`, `append`, `record_turn`); tiermem's own
        commands and jobs write as INTERNAL.
        """
        event = None
        if self._append_fast is not None and writer != CALLER:
            # Appended in one call, or the compiled check's event (or None) with nothing done.
            done = self._append_fast(record)
            if type(done) is AppendResult:
                return done
            event = done
        # What `check` returns, with no Python in between (a caller's record is also weighed there).
        elif (
            self._check_fast is not None
            and writer != CALLER
            and type(record) is dict
            and record.get("type") == "interaction"
        ):
            event = self._check_fast(record)
        if event is None:
            try:
                event = self.check(record, writer)
            except ValidationError as exc:
                self.reject(record, exc)
                raise
        return self._append_stream(stream_of(event["type"]), [event])[0]

    def append_many(
        self, records: Iterable[Mapping[str, Any]], *, source: str = "append", writer: str = INTERNAL
    ) -> AppendBatchResult:
        """Append many events with one lock and one fsync per stream; bad ones go to rejects."""
        out = AppendBatchResult()
        good: list[dict[str, Any]] = []
        bad: list[Rejected] = []
        for i, record in enumerate(records):
            try:
                good.append(self.check(record, writer))
            except ValidationError as exc:
                out.rejected.append((i, exc))
                bad.append(Rejected(record, exc))
        self.reject_many(bad, source=source)
        out.results = self.append_validated(good)
        return out

    def append_validated(self, events: list[dict[str, Any]]) -> list[AppendResult]:
        """Append events that already passed `validate` (in order); returns one result each."""
        by_stream: dict[str, list[int]] = {}
        for i, ev in enumerate(events):
            by_stream.setdefault(stream_of(ev["type"]), []).append(i)
        results: list[AppendResult | None] = [None] * len(events)
        for stream, idxs in by_stream.items():
            for i, res in zip(idxs, self._append_stream(stream, [events[i] for i in idxs]), strict=True):
                results[i] = res
        return [r for r in results if r is not None]

    def _append_stream(self, stream: str, events: list[dict[str, Any]]) -> list[AppendResult]:
        w = self._writer(stream)
        if w.sync is not None:
            return group_commit(w.group, w.sync, events, lambda evs: self._write_group(w, evs))
        with w.thread_lock:
            if len(events) != 1:
                return self._append_flocked(w, events)
            # One record (the usual call): the fewest steps, the one-step append first.
            if not heldio.flock_now(w.lock_fd, fcntl.LOCK_EX):
                fcntl.flock(w.lock_fd, fcntl.LOCK_EX)
            try:
                done = steady_append.append_steady(self, w, events[0], sync=True)
                return [done if done is not None else self._append_one_locked(w, events[0])]
            finally:
                heldio.flock_now(w.lock_fd, fcntl.LOCK_UN)

    def _append_flocked(self, w: _StreamWriter, events: list[dict[str, Any]]) -> list[AppendResult]:
        heldio.lock(w.lock_fd)
        try:
            return self._append_locked(w, events)
        finally:
            heldio.unlock(w.lock_fd)

    def _write_group(
        self, w: _StreamWriter, events: list[dict[str, Any]]
    ) -> tuple[list[Any], list[SyncPoint]]:
        """Group commit's write stage: write and index under the lock, fsync left to the caller.

        The id index moves before the bytes are durable (the next writer's duplicate
        check must see them); after a power loss the index is cut back to the
        segments as they are (see `_reconcile`).
        """
        with w.thread_lock:
            heldio.lock(w.lock_fd)
            try:
                results = self._append_locked(w, events, sync=False)
                points = []
                written = {r.segment for r in results if not r.duplicate}
                segments = set(written)
                dups = [r.event_id for r in results if r.duplicate]
                if dups:
                    # A duplicate's first copy may still be waiting for its fsync, in this
                    # process or another, in a segment this writer may not have open.
                    segments.update(self.originals(w, w.index(), dups))
                for segment in sorted(segments):
                    partition, stem = segment.split("/")[1:]
                    if w.active.get(partition) == stem:
                        fd = heldio.dup_now(w.fds[partition])
                    else:
                        found = self._open_to_sync(segment)
                        if found is None:
                            continue
                        fd = found
                    if segment in written:  # where this group's bytes end: just recorded, no fstat
                        ino, end, _lines = self._line_counts[segment]
                    else:
                        st = os.fstat(fd)
                        ino, end = st.st_ino, st.st_size
                    points.append(SyncPoint(segment, fd, end, ino))
                return results, points
            finally:
                heldio.unlock(w.lock_fd)

    def append_encoded(
        self, stream: str, ids: list[str], partitions: list[str], lines: list[bytes]
    ) -> tuple[int, int]:
        """Append events already validated and serialised, for bulk loaders; returns (accepted, duplicates).

        `lines[i]` must be `orjson.dumps(validate(record)) + b"\\n"` for an event of
        `stream` whose id is `ids[i]` and partition `partitions[i]` ("date=YYYY-MM-DD"):
        the bulk ingest prepares them in worker processes, so this process only
        checks the id index and writes. Same locking, fsync and duplicate rules
        as `append_validated`; no per-event result objects.
        """
        w = self._writer(stream)
        with w.thread_lock:
            fcntl.flock(w.lock_fd, fcntl.LOCK_EX)
            try:
                written, duplicates = self._append_lines_locked(
                    w,
                    ids,
                    partitions,
                    # `keep` is ascending, so keeping all of them means the list as is.
                    lambda keep: lines if len(keep) == len(lines) else [lines[i] for i in keep],
                )
            finally:
                fcntl.flock(w.lock_fd, fcntl.LOCK_UN)
        return sum(len(keep) for _segment, _first, keep in written), len(duplicates)

    def _append_locked(
        self, w: _StreamWriter, events: list[dict[str, Any]], *, sync: bool = True
    ) -> list[AppendResult]:
        if len(events) == 1:
            return [self._append_one_locked(w, events[0], sync=sync)]
        steady = steady_append.append_steady_many(self, w, events, sync=sync)
        if steady is not None:
            return steady
        ids = [ev["event_id"] for ev in events]
        written, duplicates = self._append_lines_locked(
            w,
            ids,
            [partition_of(ev) for ev in events],
            lambda keep: [orjson.dumps(events[i]) + b"\n" for i in keep],
            sync=sync,
        )
        results: list[AppendResult | None] = [None] * len(events)
        for i in duplicates:
            results[i] = AppendResult(ids[i], w.stream, "", -1, duplicate=True)
        for segment, first_line, keep in written:
            for k, i in enumerate(keep):
                results[i] = AppendResult(ids[i], w.stream, segment, first_line + k)
        if len(written) == 1 and not duplicates:
            steady_append.remember(self, w, written[0][0], written[0][0].split("/")[1])
        return [r for r in results if r is not None]

    def _append_one_locked(
        self, w: _StreamWriter, event: dict[str, Any], *, sync: bool = True
    ) -> AppendResult:
        """`_append_lines_locked` for one event (the usual call): the same steps, none of the batch's
        bookkeeping, which on this path cost about as much as the steps themselves."""
        steady = steady_append.append_steady(self, w, event, sync=sync)
        if steady is not None:
            return steady
        eid = event["event_id"]
        ids = [eid]
        conn = w.index()
        self._catch_up_lag(w, conn)
        if not self._known_ids(w, conn, ids):
            partition = partition_of(event)
            before = self._reindexed
            stem, fd, st = w.segment_for(partition)
            # A crashed writer's durable lines were just indexed: the id may be among them.
            if self._reindexed == before or not self._known_ids(w, conn, ids):
                segment = f"{w.stream}/{partition}/{stem}"
                line = orjson.dumps(event) + b"\n"
                tailed = self._tailed_segments(w, [segment])
                written = self._write_durably([(segment, fd, st, line, [0])], sync=sync)
                self._index_written(w, conn, written, ids, tailed)
                steady_append.remember(self, w, segment, partition)
                return AppendResult(eid, w.stream, segment, written[0][3])
        if sync and self.settings.fsync != "none":
            self._sync_originals(w, conn, ids)
        return AppendResult(eid, w.stream, "", -1, duplicate=True)

    def _append_lines_locked(
        self,
        w: _StreamWriter,
        ids: list[str],
        partitions: list[str],
        lines_of: Callable[[list[int]], list[bytes]],
        *,
        sync: bool = True,
    ) -> tuple[list[tuple[str, int, list[int]]], list[int]]:
        """Write the non-duplicate events (stream lock held): ([(segment, first line, indexes)], duplicates)."""
        # Whatever a one-step append kept no longer describes the writer once the full path has
        # written (its tail may go to the index, its ids with it): `remember` decides afresh.
        w.end_snapshot()
        by_partition: dict[str, list[int]] = {}
        for i, partition in enumerate(partitions):
            by_partition.setdefault(partition, []).append(i)
        conn = w.index()
        self._catch_up_lag(w, conn)
        seen = self._known_ids(w, conn, ids)
        # Open (repair, reconcile) only the segments that will receive something, so
        # an all-duplicate replay does not create empty segments in sealed days.
        fresh = {p: idxs for p, idxs in by_partition.items() if any(ids[i] not in seen for i in idxs)}
        before = self._reindexed
        targets = {partition: w.segment_for(partition) for partition in fresh}
        if self._reindexed != before:
            # A crashed writer's durable lines were just indexed: they may be ours.
            seen = self._known_ids(w, conn, ids)
        kept, duplicates = _new_per_partition(by_partition, ids, seen)
        pending: list[tuple[str, int, os.stat_result, bytes, list[int]]] = []
        for partition, keep in kept.items():
            stem, fd, st = targets[partition] if partition in targets else w.segment_for(partition)
            pending.append((f"{w.stream}/{partition}/{stem}", fd, st, b"".join(lines_of(keep)), keep))
        w.prestat.clear()
        tailed = self._tailed_segments(w, [segment for segment, *_ in pending])
        written = self._write_durably(pending, sync=sync)
        self._index_written(w, conn, written, ids, tailed)
        if sync and duplicates and self.settings.fsync != "none":
            self._sync_originals(w, conn, [ids[i] for i in duplicates])
        return [
            (segment, first_line, keep) for segment, _fd, _end, first_line, keep, _ino in written
        ], duplicates

    def _write_durably(
        self, pending: list[tuple[str, int, os.stat_result, bytes, list[int]]], *, sync: bool = True
    ) -> list[tuple[str, int, int, int, list[int], int]]:
        """Write each segment's payload, then one fsync each: a batch spanning days costs one
        fsync per day touched, not per record. Returns (segment, fd, end, first line, indexes, inode).

        `pending` carries each segment's stat from `segment_for`, still true under the stream
        lock; the file is opened O_APPEND, so the payload ends at that size plus its length."""
        written: list[tuple[str, int, int, int, list[int], int]] = []
        for segment, fd, st, payload, keep in pending:
            start_size = st.st_size
            first_line = self._count_lines(segment, fd, start_size, st.st_ino)
            try:
                durable_files.write_all(fd, payload)
            except OSError as exc:
                durable_files.cut_to_whole_lines(fd, start_size)
                # Another process's fsync may have recorded a size that counts the cut bytes.
                forget_synced(self.root / segment.split("/")[0] / ".sync")
                self.forget_segment(segment)
                raise StorageError(
                    f"writing {segment}.jsonl: {os_reason(exc)} (the log keeps whole records only and stays readable)"
                ) from exc
            written.append((segment, fd, start_size + len(payload), first_line, keep, st.st_ino))
        if sync and self.settings.fsync != "none":
            for segment, fd, *_ in written:
                try:
                    os.fsync(fd)
                except OSError as exc:
                    raise StorageError(
                        f"syncing {segment}.jsonl to disk: {os_reason(exc)}; "
                        "the records of this write may not be durable"
                    ) from exc
        return written

    def _count_lines(self, segment: str, fd: int, size: int, ino: int | None = None) -> int:
        """Lines in the first `size` bytes of a segment (cached per inode: appends only grow files)."""
        ino = os.fstat(fd).st_ino if ino is None else ino
        cached = self._line_counts.get(segment)
        start_bytes, start_lines = 0, 0
        if cached and cached[0] == ino:
            if cached[1] == size:
                return cached[2]
            if cached[1] < size:
                start_bytes, start_lines = cached[1], cached[2]
        count = start_lines
        pos = start_bytes
        while pos < size:
            chunk = os.pread(fd, min(8 << 20, size - pos), pos)
            if not chunk:
                break
            count += chunk.count(b"\n")
            pos += len(chunk)
        self._line_counts[segment] = (ino, size, count)
        return count

    def _line_count(self, segment: str, size: int) -> int:
        """Lines in the first `size` bytes of a segment file (kept for callers of the first version)."""
        path = self.root / f"{segment}.jsonl"
        fd = os.open(path, os.O_RDONLY)
        try:
            return self._count_lines(segment, fd, size)
        finally:
            os.close(fd)

    # ----------------------------------------------------------------- reads
    def segments(self, stream: str) -> list[tuple[str, str, Path]]:
        """(partition, stem, path) of every segment of a stream, Parquet preferred, in order."""
        sroot = self.root / stream
        out: list[tuple[str, str, Path]] = []
        if not sroot.exists():
            return out
        for part_dir in sorted(p for p in sroot.iterdir() if p.is_dir() and p.name.startswith("date=")):
            stems = sorted({p.stem for p in part_dir.iterdir() if p.suffix in (".jsonl", ".parquet")})
            for stem in stems:
                pq = part_dir / f"{stem}.parquet"
                out.append((part_dir.name, stem, pq if pq.exists() else part_dir / f"{stem}.jsonl"))
        return out

    def read(
        self, stream: str, since: Mapping[str, int] | None = None
    ) -> Iterator[tuple[str, int, dict[str, Any]]]:
        """Yield (segment, line, event) for every event after the checkpoint `since`.

        A checkpoint maps "<stream>/<partition>/<stem>" to the number of lines
        already consumed; it survives sealing because Parquet keeps line order.
        """
        if stream not in STREAMS:
            raise ValidationError("stream", f"unknown stream {stream!r}; known: {', '.join(STREAMS)}")
        since = since or {}
        for partition, stem, path in self.segments(stream):
            segment = f"{stream}/{partition}/{stem}"
            skip = int(since.get(segment, 0))
            if path.suffix == ".jsonl":
                try:
                    yield from self._read_jsonl(segment, path, skip)
                    continue
                except FileNotFoundError:  # sealed between listing and opening
                    path = path.with_suffix(".parquet")
            yield from self._read_parquet(segment, path, skip)

    @staticmethod
    def _read_jsonl(segment: str, path: Path, skip: int) -> Iterator[tuple[str, int, dict[str, Any]]]:
        with open(path, "rb") as fh:
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line still being written is not yet visible
        for n, line in enumerate(data[:end].split(b"\n")[:-1] if end else []):
            if n < skip:
                continue
            event = orjson.loads(line)
            if event.get(ERASED_MARK):  # an erased event keeps its line, not its content
                continue
            yield segment, n, upcast(event)

    @staticmethod
    def _read_parquet(segment: str, path: Path, skip: int) -> Iterator[tuple[str, int, dict[str, Any]]]:
        from tiermem.sealed import parquet_events  # local: pyarrow is only needed for sealed data

        for n, event in enumerate(parquet_events(path, keep_erased=True)):
            if n >= skip and not event.get(ERASED_MARK):
                yield segment, n, event


class Checkpoints:
    """Named consumer positions under `<data>/checkpoints/`, replaced atomically."""

    def __init__(self, settings: Settings) -> None:
        self.dir = settings.checkpoints_dir

    def load(self, consumer: str) -> dict[str, Any]:
        path = self.dir / f"{consumer}.json"
        if not path.exists():
            return {}
        loaded: dict[str, Any] = orjson.loads(path.read_bytes())
        return loaded

    def save(self, consumer: str, position: Mapping[str, Any]) -> None:
        write_atomic(self.dir / f"{consumer}.json", orjson.dumps(dict(position), option=orjson.OPT_SORT_KEYS))

    def advance(self, consumer: str, position: dict[str, int], segment: str, line: int) -> None:
        """Record that `line` of `segment` was consumed (in memory; call save to persist)."""
        position[segment] = max(position.get(segment, 0), line + 1)
