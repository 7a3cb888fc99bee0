"""Durable, concurrent, append-only segment files, and positioned reads.

Layout: ``<data>/log/<stream>/date=YYYY-MM-DD/<segment>.jsonl`` (Hive partitions
by event time, UTC). A segment is sealed to ``<segment>.parquet`` in the same
folder (see `tiermem.log.seal`); readers take the Parquet form when both exist.

Every writer, in any process, appends under an exclusive `flock` on the
stream's lock file, so lines never interleave. Under the lock the writer first
checks the tail of the segment it is about to extend: a last line without its
newline can only be the remains of a writer that crashed mid-write, so it is
moved to quarantine with its position and cut off before anything is added.

Event ids go into a small SQLite index (`_index.sqlite`) that follows the
segments: it remembers how far it has indexed each segment, so after a crash
between a durable write and the index update, the lines the index missed are
indexed again on the next open. A caller-supplied `event_id` that is already
in the index is a duplicate: counted, not appended.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from tiermem.errors import ValidationError
from tiermem.ids import format_ts, new_event_id, utcnow
from tiermem.log.events import STREAMS, stream_of, upcast, validate
from tiermem.settings import Settings

INDEX_NAME = "_index.sqlite"


@dataclass(frozen=True)
class AppendResult:
    event_id: str
    stream: str
    segment: str  # "<stream>/date=YYYY-MM-DD/<stem>"
    line: int  # 0-based line number in the segment; -1 for a duplicate
    duplicate: bool = False


@dataclass
class AppendBatchResult:
    results: list[AppendResult] = field(default_factory=list)
    rejected: list[tuple[int, ValidationError]] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return sum(1 for r in self.results if not r.duplicate)

    @property
    def duplicates(self) -> int:
        return sum(1 for r in self.results if r.duplicate)


def partition_of(event: Mapping[str, Any]) -> str:
    return "date=" + str(event["ts"])[:10]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write a small file by temp-file + rename, so readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if durable:
        _fsync_dir(path.parent)


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
        self.active: dict[str, str] = {}  # partition -> active segment stem

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        os.close(self.lock_fd)

    # Called with both locks held.
    def segment_for(self, partition: str) -> tuple[str, int]:
        part_dir = self.root / partition
        stem = self.active.get(partition)
        if stem is not None:
            path = part_dir / f"{stem}.jsonl"
            # Another process may have rolled the segment over or sealed it.
            if (
                (part_dir / f"{stem}.parquet").exists()
                or not path.exists()
                or path.stat().st_size >= self.log.settings.segment_max_bytes
            ):
                self._drop(partition)
                stem = None
        if stem is None:
            stem = self._choose_segment(part_dir)
            path = part_dir / f"{stem}.jsonl"
            created = not path.exists()
            part_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            if created:
                _fsync_dir(part_dir)
            self.fds[partition] = fd
            self.active[partition] = stem
        fd = self.fds[partition]
        self.log.repair_tail(self.stream, partition, stem, fd)
        return stem, fd

    def _drop(self, partition: str) -> None:
        fd = self.fds.pop(partition, None)
        if fd is not None:
            os.close(fd)
        self.active.pop(partition, None)

    def _choose_segment(self, part_dir: Path) -> str:
        if part_dir.exists():
            open_segments = sorted(
                p.stem
                for p in part_dir.glob("*.jsonl")
                if not (part_dir / f"{p.stem}.parquet").exists()
                and p.stat().st_size < self.log.settings.segment_max_bytes
            )
            if open_segments:
                return open_segments[-1]
        return "seg-" + new_event_id()


class EventLog:
    """The append-only log of one data root. Thread-safe; many processes may share a root."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.root = settings.log_dir
        self.root.mkdir(parents=True, exist_ok=True)
        self._writers: dict[str, _StreamWriter] = {}
        self._writers_lock = threading.Lock()
        self._index_local = threading.local()
        self._reconciled: set[str] = set()
        self._line_counts: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------- lifecycle
    def close(self) -> None:
        with self._writers_lock:
            for w in self._writers.values():
                w.close()
            self._writers.clear()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------- the index
    def _index(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._index_local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.root / INDEX_NAME, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # The index is rebuildable from the segments, so it need not fsync.
            conn.execute("PRAGMA synchronous=OFF")
            conn.execute(
                "CREATE TABLE IF NOT EXISTS event_ids (event_id TEXT PRIMARY KEY, segment TEXT NOT NULL) WITHOUT ROWID"
            )
            conn.execute(
                "CREATE TABLE IF NOT EXISTS indexed (segment TEXT PRIMARY KEY, offset INTEGER NOT NULL)"
            )
            self._index_local.conn = conn
        return conn

    def _index_lines(self, segment: str, path: Path, start: int) -> int:
        """Index complete lines of `path` from byte `start`; return the new offset."""
        conn = self._index()
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        ids = []
        for line in data[:end].splitlines():
            try:
                ids.append((orjson.loads(line)["event_id"], segment))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue
        conn.execute("BEGIN")
        conn.executemany("INSERT OR IGNORE INTO event_ids VALUES (?, ?)", ids)
        conn.execute("INSERT OR REPLACE INTO indexed VALUES (?, ?)", (segment, start + end))
        conn.execute("COMMIT")
        return start + end

    def _reconcile(self, stream: str, partition: str, stem: str) -> None:
        segment = f"{stream}/{partition}/{stem}"
        path = self.root / stream / partition / f"{stem}.jsonl"
        row = self._index().execute("SELECT offset FROM indexed WHERE segment = ?", (segment,)).fetchone()
        done = row[0] if row else 0
        if path.exists() and path.stat().st_size > done:
            self._index_lines(segment, path, done)

    # ----------------------------------------------------------- torn tails
    def repair_tail(self, stream: str, partition: str, stem: str, fd: int) -> None:
        """Quarantine a partial last line left by a crashed writer (lock held)."""
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            path = self.root / stream / partition / f"{stem}.jsonl"
            with open(path, "rb") as fh:
                data = fh.read()
            cut = data.rfind(b"\n") + 1
            torn = data[cut:]
            qdir = self.settings.quarantine_dir
            qdir.mkdir(parents=True, exist_ok=True)
            record = {
                "ts": format_ts(utcnow()),
                "segment": f"{stream}/{partition}/{stem}.jsonl",
                "byte_offset": cut,
                "length": len(torn),
                "reason": "torn last line (writer crashed mid-write): moved here, not parsed",
                "bytes": torn.decode("utf-8", errors="replace"),
            }
            with open(qdir / "torn.jsonl", "ab") as qf:
                qf.write(orjson.dumps(record) + b"\n")
                qf.flush()
                os.fsync(qf.fileno())
            os.truncate(path, cut)
            os.fsync(fd)
        segment = f"{stream}/{partition}/{stem}"
        if segment not in self._reconciled:
            self._reconcile(stream, partition, stem)
            self._reconciled.add(segment)

    # --------------------------------------------------------------- rejects
    def reject(self, record: Any, error: ValidationError, *, source: str = "append") -> None:
        """Keep an invalid record with its reason under `_rejects/` (never lost)."""
        rdir = self.settings.rejects_dir / ("date=" + format_ts(utcnow())[:10])
        rdir.mkdir(parents=True, exist_ok=True)
        try:
            raw = orjson.dumps(record, default=str).decode()
        except TypeError:
            raw = repr(record)
        line = orjson.dumps(
            {
                "ts": format_ts(utcnow()),
                "source": source,
                "field": error.field,
                "reason": error.reason,
                "record": raw,
            }
        )
        fd = os.open(rdir / f"rejects-{os.getpid()}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line + b"\n")
            if self.settings.fsync != "none":
                os.fsync(fd)
        finally:
            os.close(fd)

    # --------------------------------------------------------------- appends
    def _writer(self, stream: str) -> _StreamWriter:
        with self._writers_lock:
            w = self._writers.get(stream)
            if w is None:
                w = self._writers[stream] = _StreamWriter(self, stream)
            return w

    def append(self, record: Mapping[str, Any]) -> AppendResult:
        """Validate, enrich and durably append one event. Raises ValidationError (after rejecting)."""
        try:
            event = validate(record)
        except ValidationError as exc:
            self.reject(record, exc)
            raise
        return self.append_validated([event])[0]

    def append_many(
        self, records: Iterable[Mapping[str, Any]], *, source: str = "append"
    ) -> AppendBatchResult:
        """Append many events with one lock and one fsync per stream; bad ones go to rejects."""
        out = AppendBatchResult()
        good: list[dict[str, Any]] = []
        for i, record in enumerate(records):
            try:
                good.append(validate(record))
            except ValidationError as exc:
                self.reject(record, exc, source=source)
                out.rejected.append((i, exc))
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
        with w.thread_lock:
            fcntl.flock(w.lock_fd, fcntl.LOCK_EX)
            try:
                return self._append_locked(w, events)
            finally:
                fcntl.flock(w.lock_fd, fcntl.LOCK_UN)

    def _append_locked(self, w: _StreamWriter, events: list[dict[str, Any]]) -> list[AppendResult]:
        conn = self._index()
        ids = [ev["event_id"] for ev in events]
        seen: set[str] = set()
        for chunk_start in range(0, len(ids), 500):
            chunk = ids[chunk_start : chunk_start + 500]
            marks = ",".join("?" * len(chunk))
            seen.update(
                r[0]
                for r in conn.execute(f"SELECT event_id FROM event_ids WHERE event_id IN ({marks})", chunk)
            )
        results: list[AppendResult] = []
        by_partition: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i, ev in enumerate(events):
            if ev["event_id"] in seen:
                results.append(AppendResult(ev["event_id"], w.stream, "", -1, duplicate=True))
                continue
            seen.add(ev["event_id"])  # a repeat inside the same batch is a duplicate too
            by_partition.setdefault(partition_of(ev), []).append((i, ev))
            results.append(AppendResult(ev["event_id"], w.stream, "", -2))
        for partition, items in by_partition.items():
            stem, fd = w.segment_for(partition)
            segment = f"{w.stream}/{partition}/{stem}"
            start_size = os.fstat(fd).st_size
            first_line = self._line_count(segment, start_size)
            payload = b"".join(orjson.dumps(ev) + b"\n" for _, ev in items)
            view = memoryview(payload)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            if self.settings.fsync != "none":
                os.fsync(fd)
            conn.execute("BEGIN")
            conn.executemany(
                "INSERT OR IGNORE INTO event_ids VALUES (?, ?)",
                [(ev["event_id"], segment) for _, ev in items],
            )
            conn.execute("INSERT OR REPLACE INTO indexed VALUES (?, ?)", (segment, start_size + len(payload)))
            conn.execute("COMMIT")
            self._line_counts[segment] = (start_size + len(payload), first_line + len(items))
            for k, (i, ev) in enumerate(items):
                results[i] = AppendResult(ev["event_id"], w.stream, segment, first_line + k)
        return results

    def _line_count(self, segment: str, size: int) -> int:
        """Lines in the first `size` bytes of a segment (cached: appends only grow files)."""
        cached = self._line_counts.get(segment)
        if cached and cached[0] == size:
            return cached[1]
        path = self.root / f"{segment}.jsonl"
        start_bytes, start_lines = cached if cached and cached[0] < size else (0, 0)
        with open(path, "rb") as fh:
            fh.seek(start_bytes)
            count = start_lines + fh.read(size - start_bytes).count(b"\n")
        self._line_counts[segment] = (size, count)
        return count

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
            skip = since.get(segment, 0)
            if path.suffix == ".parquet":
                yield from self._read_parquet(segment, path, skip)
            else:
                yield from self._read_jsonl(segment, path, skip)

    @staticmethod
    def _read_jsonl(segment: str, path: Path, skip: int) -> Iterator[tuple[str, int, dict[str, Any]]]:
        with open(path, "rb") as fh:
            data = fh.read()
        end = data.rfind(b"\n") + 1  # a line still being written is not yet visible
        for n, line in enumerate(data[:end].splitlines()):
            if n < skip:
                continue
            yield segment, n, upcast(orjson.loads(line))

    @staticmethod
    def _read_parquet(segment: str, path: Path, skip: int) -> Iterator[tuple[str, int, dict[str, Any]]]:
        from tiermem.log.seal import parquet_events  # local: pyarrow is only needed for sealed data

        for n, event in enumerate(parquet_events(path)):
            if n >= skip:
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
