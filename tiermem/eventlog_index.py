"""The event log's side of the id index: reconciling segments, lagging tails, duplicates' first copies.

`EventLog` takes these methods from `IndexFollower`. The storage (the SQLite
index, the lag list) is `tiermem.idindex`; here is when the log reads and
writes it: under a stream's lock, a writer reconciles the segment it appends
to (a crashed writer's lines past the indexed offset are indexed; a torn last
line is quarantined first), catches up every listed tail but its own before a
duplicate check, and keeps what it writes in its own tail (in memory, its
segment listed) instead of a transaction per append. A duplicate is answered
only once its first copy is durable, wherever that copy is.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from tiermem.durable_files import line_event_id, quarantine_torn_tail
from tiermem.errors import StorageError, os_reason
from tiermem.groupcommit import forget_synced
from tiermem.idindex import (
    LagList,
    catch_up,
    index_lookup,
    indexed_offset,
    jsonl_segments,
    open_index,
    read_ids,
    record_ids,
)
from tiermem.settings import Settings


class _StreamWriter(Protocol):
    """What these methods use of the event log's per-stream writer."""

    stream: str
    tails: dict[str, Tail]
    prestat: dict[str, os.stat_result]
    listed: frozenset[str] | None
    lag_raw: bytes
    active: dict[str, str]
    fds: dict[str, int]
    inos: dict[str, int]
    paths: dict[str, tuple[str, str, str]]
    thread_lock: threading.Lock
    lock_fd: int

    def index(self) -> sqlite3.Connection: ...


# A writer's unindexed tail is written to the id index once it holds this many ids.
TAIL_FLUSH_IDS = 4096


class Tail:
    """Ids this process appended to a segment that the id index does not hold yet.

    True while the file is what this process left: same inode, `end` bytes long.
    """

    __slots__ = ("end", "ids", "ino", "path")

    def __init__(self, path: str, ino: int, end: int) -> None:
        self.path, self.ino, self.end = path, ino, end
        self.ids: set[str] = set()


class IndexFollower:
    """The id-index methods of `EventLog` (its state is set up by `EventLog.__init__`)."""

    settings: Settings
    root: Path
    _writers: Mapping[str, _StreamWriter]
    _index_local: threading.local
    _lag: LagList | None
    _lag_lock: threading.Lock
    _indexed_to: dict[str, tuple[int, int]]
    _line_counts: dict[str, tuple[int, int, int]]
    _reindexed: int

    def _count_lines(self, segment: str, fd: int, size: int, ino: int | None = None) -> int:
        raise NotImplementedError

    # ------------------------------------------------------------- the index
    def _index(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._index_local, "conn", None)
        if conn is None:
            conn = open_index(self.root)
            self._index_local.conn = conn
        return conn

    def _lag_list(self) -> LagList:
        if self._lag is None:
            with self._lag_lock:
                if self._lag is None:
                    self._lag = LagList(self.root)
        return self._lag

    def _reconcile(
        self, segment: str, fd: int, st: os.stat_result | None = None, tail: Tail | None = None
    ) -> None:
        """Index lines past the index's offset that no tail of this process accounts for (lock held).

        Any process may have appended since we last looked, so the check is by
        size: when the file is longer than what this process knows is indexed (or
        holds in `tail`), ask the index how far it got and index the rest.
        """
        st = st or os.fstat(fd)
        key = (st.st_ino, st.st_size)
        if self._indexed_to.get(segment) == key or (tail is not None and (tail.ino, tail.end) == key):
            return
        conn = self._index()
        done = indexed_offset(conn, segment)
        if done > st.st_size:
            # Shorter than indexed: rewritten by an erasure (every id kept, as a tombstone),
            # or cut by a power loss before a group commit's fsync (the index, which moves
            # before that fsync, names ids the file lost). Index the file as it is.
            conn.execute("DELETE FROM event_ids WHERE segment = ?", (segment,))
            done = 0
        if st.st_size > done:
            ids, end = read_ids(fd, done, st.st_size)
            record_ids(conn, [(segment, ids, end)], replace=True)
            done = end
            self._reindexed += 1
        self._indexed_to[segment] = (st.st_ino, done)
        self._drop_tail(segment)  # the index now holds whatever it held

    def _drop_tail(self, segment: str) -> None:
        w = self._writers.get(segment.split("/", 1)[0])
        if w is not None:
            w.tails.pop(segment, None)

    def _retire_tails(self, w: _StreamWriter) -> None:
        """At close: this writer's tails into the index, and their segments off the lag list."""
        with w.thread_lock:
            fcntl.flock(w.lock_fd, fcntl.LOCK_EX)
            try:
                conn = w.index()
                rows = []
                for segment, tail in w.tails.items():
                    try:
                        st = os.stat(tail.path)
                    except FileNotFoundError:
                        continue  # sealed meanwhile: indexed by the seal
                    if (st.st_ino, st.st_size) == (tail.ino, tail.end):
                        rows.append((segment, sorted(tail.ids), tail.end))
                    else:  # another process wrote since: what the file holds, up to its end
                        catch_up(conn, self.root, segment)
                if rows:
                    record_ids(conn, rows)
                self._lag_list().remove(set(w.tails))
                w.tails.clear()
            finally:
                fcntl.flock(w.lock_fd, fcntl.LOCK_UN)

    def _catch_up_lag(self, w: _StreamWriter, conn: sqlite3.Connection) -> None:
        """Bring every listed tail but this writer's own, still valid ones into the index (lock held).

        A tail of this stream that this writer no longer appends to is unlisted once
        indexed: with the stream lock held, nobody is writing past it.
        """
        w.prestat.clear()
        w.lag_raw, listed = self._lag_list().snapshot()
        w.listed = listed
        done: set[str] = set()
        for segment in listed if listed is not None else jsonl_segments(self.root):
            stream, partition, stem = segment.split("/")
            if stream == w.stream and w.active.get(partition) == stem:
                # A segment this writer appends to: its own descriptor and the lock it holds.
                path = w.paths[partition][0]
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue  # sealed: indexed by the seal (`segment_for` starts another)
                w.prestat[path] = st  # `segment_for` of this append need not ask again
                tail = w.tails.get(segment)
                if tail is not None and (st.st_ino, st.st_size) == (tail.ino, tail.end):
                    continue  # exactly as this writer left it: its tail holds the rest
                if tail is not None and self.absorb(segment, w.fds[partition], tail, st.st_ino, st.st_size):
                    continue  # other processes' whole lines after it: now in its tail too
                if st.st_ino == w.inos[partition]:  # (replaced: `segment_for` reopens it)
                    # Another process wrote since: index what the file holds, then this
                    # append's reconciliation finds nothing left to do.
                    self._reconcile(segment, w.fds[partition], st)
                    continue
            catch_up(conn, self.root, segment)
            if listed is not None and stream == w.stream and w.active.get(partition) != stem:
                done.add(segment)
        if done:
            self._lag_list().remove(done)
            # Go on with the list as it now is: a segment unlisted here that this writer is about
            # to append to must be listed again before its first unindexed line (with the list
            # read before, the writer took it for listed and held its ids in memory unlisted).
            w.lag_raw, w.listed = self._lag_list().snapshot()
        if listed is None:
            # Every segment was just caught up (stream lock held): the record can be rebuilt,
            # so later appends stop reading every segment.
            self._lag_list().repair()

    # ----------------------------------------------------------- torn tails
    def repair_tail(
        self,
        stream: str,
        partition: str,
        stem: str,
        fd: int,
        st: os.stat_result | None = None,
        *,
        writer: _StreamWriter | None = None,
    ) -> os.stat_result:
        """Quarantine a partial last line left by a crashed writer, then reconcile (lock held).

        `st`: the segment's stat, if the caller has just taken it. Returns the stat after the repair.
        Called by `writer` about to append, the segment's tail may stay unindexed (its ids in
        the writer's memory); called from elsewhere (the seal, an erasure), the index is brought
        to the segment's end and the segment leaves the lag list.
        """
        st = st or os.fstat(fd)
        segment = f"{stream}/{partition}/{stem}"
        if writer is not None:
            return self._repair(segment, fd, st, writer.tails.get(segment))
        w = self._writers.get(stream)
        tail = w.tails.pop(segment, None) if w is not None else None
        if tail is not None and (tail.ino, tail.end) == (st.st_ino, st.st_size) and tail.ids:
            # What this process wrote past the index's offset, without reading it back.
            record_ids(self._index(), [(segment, sorted(tail.ids), tail.end)])
            self._indexed_to[segment] = (tail.ino, tail.end)
        st = self._repair(segment, fd, st, None)
        self._lag_list().remove({segment})
        return st

    def _repair(self, segment: str, fd: int, st: os.stat_result, tail: Tail | None) -> os.stat_result:
        size = st.st_size
        if self._indexed_to.get(segment) == (st.st_ino, size) or (
            tail is not None and (tail.ino, tail.end) == (st.st_ino, size)
        ):
            # Exactly as this process last left it (ending with a whole line): nothing torn,
            # nothing to reconcile.
            return st
        if size and os.pread(fd, 1, size - 1) != b"\n":
            quarantine_torn_tail(self.settings, segment, fd, size, self._count_lines)
            forget_synced(self.root / segment.split("/", 1)[0] / ".sync")  # may count the cut bytes
            st = os.fstat(fd)
        self._reconcile(segment, fd, st, tail)
        return st

    def absorb(self, segment: str, fd: int, tail: Tail, ino: int, size: int) -> bool:
        """Take the whole lines other processes appended after this writer's tail into the tail
        (stream lock held); False, with nothing changed, when the bytes past it are not that.

        The tail then holds every id from where the index stops to the file's end, as if this
        writer had written them: its checks see them in memory, and they reach the index with
        the tail (at `TAIL_FLUSH_IDS`, at close, by a seal), as those writers' own tails do.
        Cheaper than indexing them at each append (a read, a transaction, the tail dropped),
        which is what several processes appending to one segment otherwise paid every time.
        """
        if ino != tail.ino or size <= tail.end:
            return False
        data = os.pread(fd, size - tail.end, tail.end)
        if len(data) != size - tail.end or not data.endswith(b"\n"):
            return False  # torn or shorter than it said: the full reconciliation sees to it
        ids = [line_event_id(line) for line in data[:-1].split(b"\n")]
        if None in ids or len(tail.ids) + len(ids) >= TAIL_FLUSH_IDS:
            return False
        counted = self._line_counts.get(segment)
        if counted is None or counted[:2] != (ino, tail.end):
            return False
        tail.ids.update(ids)  # type: ignore[arg-type]  # no None: checked above
        tail.end = size
        self._line_counts[segment] = (ino, size, counted[2] + len(ids))
        self._indexed_to[segment] = (ino, size)
        return True

    def _tailed_segments(self, w: _StreamWriter, segments: list[str]) -> set[str]:
        """The segments whose lines about to be written may stay unindexed (stream lock held).

        Each is on the lag list, durably, before the write: a writer killed between its
        write and the listing would otherwise leave lines nobody knows to index. A full
        or damaged list leaves the rest to be indexed as they are written.
        """
        listed = w.listed
        if listed is None:
            return set()
        return {s for s in segments if s in listed or self._lag_list().add(s)}

    def _index_written(
        self,
        w: _StreamWriter,
        conn: sqlite3.Connection,
        written: list[tuple[str, int, int, int, list[int], int]],
        ids: list[str],
        tailed: set[str],
    ) -> None:
        """Account for the written ids: in the writer's tail of a segment listed before the write
        (`tailed`), or in the index."""
        if not written:
            return
        rows: list[tuple[str, list[str], int]] = []
        for segment, _fd, end, first_line, keep, ino in written:
            self._line_counts[segment] = (ino, end, first_line + len(keep))
            if segment in tailed:
                tail = w.tails.get(segment)
                if tail is None:
                    tail = w.tails[segment] = Tail(w.paths[segment.split("/")[1]][0], ino, end)
                tail.ino, tail.end = ino, end
                tail.ids.update([ids[i] for i in keep])
                if len(tail.ids) < TAIL_FLUSH_IDS:
                    continue
                rows.append((segment, sorted(tail.ids), end))
                tail.ids.clear()
            else:
                # The offset moves to `end`: the ids this writer still holds for the segment go
                # with it, or nobody would ever index them.
                held = w.tails.pop(segment, None)
                rows.append(
                    (segment, [*(held.ids if held is not None else ()), *(ids[i] for i in keep)], end)
                )
            self._indexed_to[segment] = (ino, end)
        if not rows:
            return
        try:
            record_ids(conn, rows)
        except sqlite3.Error as exc:
            for segment, *_ in rows:
                self._indexed_to.pop(segment, None)
                self._drop_tail(segment)
            raise StorageError(
                f"updating the event-id index: {os_reason(exc)}; the records are in the log and "
                "the index catches up with them on the next write"
            ) from exc

    def originals(self, w: _StreamWriter, conn: sqlite3.Connection, ids: list[str]) -> set[str]:
        """The segments holding the first copies of these (duplicate) ids."""
        found = index_lookup(conn, "segment", ids)
        for segment, tail in w.tails.items():
            if not tail.ids.isdisjoint(ids):
                found.add(segment)
        return found

    def _open_to_sync(self, segment: str) -> int | None:
        """A descriptor of a segment this writer may not have open; None once it is sealed
        (the seal made it durable and removed the JSONL file)."""
        try:
            return os.open(self.root / f"{segment}.jsonl", os.O_RDONLY)
        except FileNotFoundError:
            return None

    def _sync_originals(self, w: _StreamWriter, conn: sqlite3.Connection, ids: list[str]) -> None:
        # A duplicate is answered as stored, so its first copy must be durable first: another
        # process may have written it and still be waiting for its fsync (the index moves
        # before the fsync in group commit, and a crashed writer's lines are indexed as found).
        for segment in sorted(self.originals(w, conn, ids)):
            fd = self._open_to_sync(segment)
            if fd is None:
                continue
            try:
                os.fsync(fd)
            except OSError as exc:
                raise StorageError(
                    f"syncing {segment}.jsonl to disk: {os_reason(exc)}; a record sent again "
                    "is in the log but may not be durable"
                ) from exc
            finally:
                os.close(fd)

    @staticmethod
    def _known_ids(w: _StreamWriter, conn: sqlite3.Connection, ids: list[str]) -> set[str]:
        """Which of these ids the log holds: the index (caught up with the lag list) and the writer's tails."""
        found = index_lookup(conn, "event_id", ids)
        for tail in w.tails.values():
            if not tail.ids.isdisjoint(ids):
                found.update(tail.ids.intersection(ids))
        return found
