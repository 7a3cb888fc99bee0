"""The event-id index, and the list of segment tails it does not cover yet.

The index (`_index.sqlite`) maps every event id in the log to its segment and
records, per segment, the byte offset up to which it has indexed it. It is
derived data: the segments stay the truth, and any writer that finds a segment
longer than what is indexed reads the lines past that offset and indexes them.

Writing the index on every append costs a SQLite transaction per record, more
than the rest of an append's own work. So a writer may leave the tail of the
segment it appends to unindexed, keeping those ids in memory, provided the
segment is named in the lag list (`_index.lag`) *before* its first such write.
A duplicate check anywhere in the log first brings every listed tail into the
index (reading the file from the indexed offset) unless it is its own, known
tail; so the log answers "is this id stored?" exactly as if every append had
been indexed, and a writer killed with ids only in memory loses nothing: its
lines are on disk and its segment is listed.

A name leaves the list only under its stream's lock, once the index covers
the segment to its end (nobody can be writing to it then), or when the file is
gone (sealed: the seal indexed it first).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import sqlite3
import struct
import threading
import zlib
from pathlib import Path

from tiermem.durable_files import line_event_id
from tiermem.sqlite_wal import into_wal

INDEX_NAME = "_index.sqlite"
LAG_NAME = "_index.lag"
# The lag list is one pwrite of at most a page at offset 0 (under its flock): a
# reader without the lock sees the old or the new record, and the checksum tells
# it if it ever sees anything else.
_LAG_SIZE = 4096
# crc32 of the rest, the names' length, and a generation that every change moves on:
# equal bytes mean nothing changed since, not merely the same names again.
_LAG_HEAD = struct.Struct("<IIQ")


def open_index(log_dir: Path) -> sqlite3.Connection:
    """The event-id index: which ids are in the log, and how far each segment is indexed."""
    conn = sqlite3.connect(log_dir / INDEX_NAME, timeout=60, isolation_level=None, check_same_thread=False)
    into_wal(conn)
    # The index is rebuildable from the segments (see EventLog._reconcile), so it need not fsync.
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS event_ids (event_id TEXT PRIMARY KEY, segment TEXT NOT NULL) WITHOUT ROWID"
    )
    conn.execute("CREATE TABLE IF NOT EXISTS indexed (segment TEXT PRIMARY KEY, offset INTEGER NOT NULL)")
    return conn


def index_lookup(conn: sqlite3.Connection, column: str, ids: list[str]) -> set[str]:
    """`column` of the id index's rows for these ids, a chunk of ids per query (SQLite's variable limit)."""
    if len(ids) == 1:  # one record per call is the common case: no IN list to build
        row = conn.execute(f"SELECT {column} FROM event_ids WHERE event_id = ?", ids).fetchone()
        return {str(row[0])} if row else set()
    found: set[str] = set()
    for chunk_start in range(0, len(ids), 500):
        chunk = ids[chunk_start : chunk_start + 500]
        marks = ",".join("?" * len(chunk))
        found.update(
            str(r[0])
            for r in conn.execute(
                f"SELECT DISTINCT {column} FROM event_ids WHERE event_id IN ({marks})", chunk
            )
        )
    return found


def indexed_offset(conn: sqlite3.Connection, segment: str) -> int:
    row = conn.execute("SELECT offset FROM indexed WHERE segment = ?", (segment,)).fetchone()
    return int(row[0]) if row else 0


def record_ids(
    conn: sqlite3.Connection, rows: list[tuple[str, list[str], int]], *, replace: bool = False
) -> None:
    """One transaction: each (segment, ids, end) adds its ids and says the segment is indexed to `end`.

    The offset only moves forward (several processes may catch a tail up at once),
    unless `replace` (the caller holds the stream lock and indexed the file as it is).
    """
    conn.execute("BEGIN")
    try:
        for segment, ids, end in rows:
            conn.executemany("INSERT OR IGNORE INTO event_ids VALUES (?, ?)", [(i, segment) for i in ids])
            if replace:
                conn.execute("INSERT OR REPLACE INTO indexed VALUES (?, ?)", (segment, end))
            else:
                conn.execute(
                    "INSERT INTO indexed VALUES (?, ?) ON CONFLICT(segment) DO UPDATE "
                    "SET offset = max(offset, excluded.offset)",
                    (segment, end),
                )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def read_ids(fd: int, start: int, size: int) -> tuple[list[str], int]:
    """The ids of the complete lines in bytes [start, size) of a segment, and where they end."""
    data = os.pread(fd, size - start, start) if size > start else b""
    end = data.rfind(b"\n") + 1
    ids = []
    for line in data[:end].splitlines():
        eid = line_event_id(line)
        if eid is not None:
            ids.append(eid)
    return ids, start + end


def catch_up(conn: sqlite3.Connection, log_dir: Path, segment: str) -> bool:
    """Index a listed segment's tail without its stream's lock; True if anything was read.

    Idempotent and safe beside its writer: only complete lines are indexed, and the
    offset only moves forward. A file shorter than its indexed offset (rewritten by an
    erasure, or cut by a power loss) is left to its stream's next writer, which holds
    the lock; so is an offset that does not fall after a newline (the file was replaced
    between the two looks).
    """
    done = indexed_offset(conn, segment)
    try:
        fd = os.open(log_dir / f"{segment}.jsonl", os.O_RDONLY)
    except FileNotFoundError:  # sealed: the seal indexed it before removing it
        return False
    try:
        size = os.fstat(fd).st_size
        if size <= done or (done and os.pread(fd, 1, done - 1) != b"\n"):
            return False
        ids, end = read_ids(fd, done, size)
    finally:
        os.close(fd)
    record_ids(conn, [(segment, ids, end)])
    return True


class LagList:
    """`<log>/_index.lag`: the segments whose tails the id index may not cover."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.fd = os.open(log_dir / LAG_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        # (the record's bytes, its names) as last read: replaced whole, never changed in place,
        # so threads reading at once each get a consistent pair.
        self._seen: tuple[bytes, frozenset[str] | None] | None = None
        # flock belongs to the open file description, which this process's threads share: it
        # keeps other processes out, this keeps the threads from interleaving their changes.
        self._threads = threading.Lock()
        self._map: mmap.mmap | None = None

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
        os.close(self.fd)

    def mapped(self) -> mmap.mmap | None:
        """The record's page mapped read-only, once it has been written (None before): a look at
        it costs no system call. Another process's change shows as soon as it is written; a look in
        the middle of one sees the old bytes or bytes that are not the old record, as a read would."""
        if self._map is None:
            try:
                self._map = mmap.mmap(self.fd, _LAG_SIZE, prot=mmap.PROT_READ)
            except (OSError, ValueError):  # shorter than a page: never written yet
                return None
        return self._map

    def read(self) -> frozenset[str] | None:
        """The listed segments; None if the record is damaged (then any segment may lag)."""
        return self.snapshot()[1]

    def snapshot(self) -> tuple[bytes, frozenset[str] | None]:
        """(the record, its names): the same bytes object for as long as the record is unchanged."""
        raw = os.pread(self.fd, _LAG_SIZE, 0)
        seen = self._seen
        if seen is not None and seen[0] == raw:
            return seen
        names = self._parse(raw)
        if names is None:  # a write in progress (or a torn one): look again under its lock
            with self._threads:
                fcntl.flock(self.fd, fcntl.LOCK_SH)
                try:
                    raw = os.pread(self.fd, _LAG_SIZE, 0)
                    names = self._parse(raw)
                finally:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
        self._seen = (raw, names)
        return raw, names

    @staticmethod
    def _parse(raw: bytes) -> frozenset[str] | None:
        if len(raw) < _LAG_HEAD.size:
            return frozenset()  # never written
        crc, length, _generation = _LAG_HEAD.unpack_from(raw)
        body = raw[_LAG_HEAD.size : _LAG_HEAD.size + length]
        if len(body) != length or zlib.crc32(raw[4 : _LAG_HEAD.size + length]) != crc:
            return None
        return frozenset(body.decode().split("\n")) if body else frozenset()

    def add(self, segment: str) -> bool:
        """List `segment` (durably, before the first unindexed write); False if the list is full or damaged."""
        return self._change(add=segment)

    def repair(self) -> None:
        """Rewrite a damaged record (as every JSONL segment); nothing if it is sound."""
        self._change()

    def remove(self, segments: set[str]) -> None:
        """Unlist segments the index covers to their end (their stream's lock held)."""
        self._change(remove=segments)

    def _change(self, add: str | None = None, remove: set[str] | frozenset[str] = frozenset()) -> bool:
        with self._threads:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                return self._change_locked(add, remove)
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def _change_locked(self, add: str | None, remove: set[str] | frozenset[str]) -> bool:
        old = os.pread(self.fd, _LAG_SIZE, 0)
        names = self._parse(old)
        damaged = names is None
        if names is None:
            # Rebuilt as every JSONL segment: a superset is safe (a listed segment the index
            # covers costs one look), and every writer lists its segment before writing to it.
            names = frozenset(jsonl_segments(self.log_dir))
        # Sealed segments' names go at the first change after the seal.
        kept = {n for n in names - remove if os.access(self.log_dir / f"{n}.jsonl", os.F_OK)}
        if add is not None:
            kept.add(add)
        if kept == names and not damaged:
            return True
        body = "\n".join(sorted(kept)).encode()
        if _LAG_HEAD.size + len(body) > _LAG_SIZE:
            return False
        generation = _LAG_HEAD.unpack_from(old)[2] + 1 if len(old) >= _LAG_HEAD.size else 1
        rest = _LAG_HEAD.pack(0, len(body), generation)[4:] + body
        raw = struct.pack("<I", zlib.crc32(rest)) + rest
        os.pwrite(self.fd, raw + bytes(_LAG_SIZE - len(raw)), 0)
        if damaged or (add is not None and add not in names):
            # Listed before its first unindexed line can reach the disk: a power loss
            # must not leave a tail that nobody knows to index.
            os.fsync(self.fd)
        self._seen = None  # parse again next time
        return True


def jsonl_segments(log_dir: Path) -> list[str]:
    """Every JSONL segment of the log ("<stream>/<partition>/<stem>"), for a damaged lag list."""
    return sorted(str(p.relative_to(log_dir).with_suffix("")) for p in log_dir.glob("*/date=*/*.jsonl"))
