"""Byte-level operations on the log's files, durable where it matters.

What the event log, the seal, erasure and the jobs' checkpoints share below the
level of events: fsync by path, small files replaced atomically, whole writes
to a descriptor, a segment's tail cut back to whole lines, and the event id of
a stored line read without parsing it when the log wrote it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import orjson

from tiermem.ids import format_ts, utcnow
from tiermem.settings import Settings


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by path (a directory: so a create or rename in it is durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_ID_PREFIX = b'{"event_id":"'


def line_event_id(line: bytes) -> str | None:
    """The event id of one stored line; cheap for lines this log wrote (id first)."""
    if line.startswith(_ID_PREFIX):
        end = line.find(b'"', len(_ID_PREFIX))
        if end > 0 and line[end - 1] != 0x5C:  # not an escaped quote inside the id
            return line[len(_ID_PREFIX) : end].decode()
    try:
        eid = orjson.loads(line).get("event_id")
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return eid if isinstance(eid, str) else None


def write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def last_newline_end(fd: int, size: int) -> int:
    """Offset just past the last newline in the first `size` bytes (0 if none); reads backwards."""
    pos = size
    while pos > 0:
        start = max(0, pos - (1 << 16))
        chunk = os.pread(fd, pos - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0


def quarantine_torn_tail(
    settings: Settings, segment: str, fd: int, size: int, count_lines: Callable[[str, int, int], int]
) -> None:
    """Move a partial last line (its writer crashed mid-write) to quarantine with its position, then cut it.

    The quarantine record is durable before the cut, so the bytes exist somewhere at every moment.
    `count_lines(segment, fd, size)` gives the line number the torn bytes would have had.
    """
    cut = last_newline_end(fd, size)
    torn = os.pread(fd, size - cut, cut)
    qdir = settings.quarantine_dir
    qdir.mkdir(parents=True, exist_ok=True)
    record = {
        "ts": format_ts(utcnow()),
        "segment": f"{segment}.jsonl",
        "byte_offset": cut,
        "line": count_lines(segment, fd, cut),
        "length": len(torn),
        "reason": "torn last line (writer crashed mid-write): moved here, not parsed",
        "bytes": torn.decode("utf-8", errors="replace"),
    }
    with open(qdir / "torn.jsonl", "ab") as qf:
        qf.write(orjson.dumps(record) + b"\n")
        qf.flush()
        os.fsync(qf.fileno())
    os.ftruncate(fd, cut)
    os.fsync(fd)


def cut_to_whole_lines(fd: int, start: int) -> None:
    """After a failed write: drop the partial last line it may have left (best effort).

    Whole lines it managed to write stay (readers may already have seen them;
    the id index catches up with them on the next write); a partial one would
    otherwise wait for the next writer to quarantine it.
    """
    try:
        size = os.fstat(fd).st_size
        cut = max(start, last_newline_end(fd, size))
        if cut < size:
            os.ftruncate(fd, cut)
    except OSError:
        pass  # the next writer's tail check quarantines what is left


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
        fsync_path(path.parent)
