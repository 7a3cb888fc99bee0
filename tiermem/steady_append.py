"""One record appended to the segment this writer is already extending: the usual append, in one step.

An append walks the whole protocol of `tiermem.eventlog`: read the lag list,
catch up every listed tail that is not this writer's, look at the segment it
is about to extend (rolled over, sealed, rewritten, written by another
process, torn), check the id, write, account for the id. For a writer that
appends to the same segment again, nearly every step finds what it found last
time, and each step is a few Python calls. A caller that waits through a flush
between appends finds the interpreter's caches cold each time, which makes
those calls cost several times their warm price: that overhead, not the
syscalls, is what the caller adds to the disk's own flush.

So the writer remembers the state in which the full protocol last ended
(`Steady`), and the next append checks, with a look at the lag list's mapped
page and one `stat` (relative to the partition's folder), that nothing has moved
since:

- the lag list is byte for byte the record the full path last read (every
  change moves its generation on), and it names this segment alone: so no
  other tail needs catching up, no seal has begun on this segment (a seal
  unlists a segment before it marks it), and this segment's lines past the
  indexed offset are this writer's own tail;
- the file under the segment's name is the inode this writer holds, exactly as
  long as this writer left it: nobody rewrote it, nobody else wrote to it,
  nothing is torn, and it is below the size at which segments roll over;
- the id is neither in the index nor in any of this writer's tails.

Then it writes, syncs and adds the id to the tail, which is what the full path
would have done. Anything else (a duplicate included) returns None, having
changed nothing, and the caller takes the full path under the same locks.
"""

from __future__ import annotations

import mmap
import os
import sqlite3
from typing import TYPE_CHECKING, Any

import orjson

from tiermem import durable_files
from tiermem.appended import AppendResult
from tiermem.errors import StorageError, os_reason
from tiermem.eventlog_index import TAIL_FLUSH_IDS, Tail
from tiermem.groupcommit import forget_synced

if TYPE_CHECKING:
    from tiermem.eventlog import EventLog, _StreamWriter

_LOOKUP = "SELECT 1 FROM event_ids WHERE event_id = ?"


class Steady:
    """Where the full protocol left a writer's last append: valid while nothing in it has moved."""

    __slots__ = (
        "cursor",
        "day",
        "dir_fd",
        "fd",
        "lag",
        "max_bytes",
        "name",
        "partition",
        "raw",
        "segment",
        "tail",
    )

    def __init__(
        self,
        raw: bytes,
        partition: str,
        segment: str,
        dir_fd: int,
        fd: int,
        tail: Tail,
        lag: mmap.mmap,
        cursor: sqlite3.Cursor,
        max_bytes: int,
    ) -> None:
        self.raw = raw  # the lag list's record, as the full path read it
        self.partition = partition
        self.day = partition[len("date=") :]  # what an event's `ts` starts with
        self.segment = segment
        self.dir_fd = dir_fd  # the partition's folder, held open by the writer
        self.name = segment.rsplit("/", 1)[1] + ".jsonl"
        self.fd = fd
        self.tail = tail
        self.lag = lag  # the lag list's page, mapped
        self.cursor = cursor  # one cursor of the writer's index connection, kept
        self.max_bytes = max_bytes


def remember(log: EventLog, w: _StreamWriter, segment: str, partition: str) -> None:
    """After the full path appended one record to `segment` (locks held): keep its state if the
    next append may skip the protocol, else forget any state kept before."""
    w.steady = None
    tail = w.tails.get(segment)
    listed = w.listed
    lag = log._lag_list().mapped()
    if (
        tail is None
        or lag is None
        or listed is None
        or len(listed) != 1
        or segment not in listed
        # The seal marks were checked under this very lag record (see `segment_for`).
        or w.checked.get(partition) is not w.lag_raw
        or w.active.get(partition) != segment.rsplit("/", 1)[1]
    ):
        return
    w.steady = Steady(
        w.lag_raw,
        partition,
        segment,
        w.partition_dir(partition),
        w.fds[partition],
        tail,
        lag,
        w.index().cursor(),
        log.settings.segment_max_bytes,
    )


def append_steady(
    log: EventLog, w: _StreamWriter, event: dict[str, Any], *, sync: bool
) -> AppendResult | None:
    """Append one validated event as the full path would, if nothing has moved since the last
    append (both locks held); None, with nothing changed, when the full path must decide."""
    s = w.steady
    if s is None:
        return None
    tail = s.tail
    segment = s.segment
    if (
        not str(event["ts"]).startswith(s.day)
        or w.tails.get(segment) is not tail
        or len(tail.ids) >= TAIL_FLUSH_IDS - 1
        or s.lag[:] != s.raw
    ):
        return None
    try:
        st = os.stat(s.name, dir_fd=s.dir_fd)
    except FileNotFoundError:  # sealed, or the folder itself went: the full path sees to it
        w.forget_partition_dir(s.partition)
        return None
    end = tail.end
    counted = log._line_counts.get(segment)
    if (
        st.st_ino != tail.ino
        or st.st_size != end
        or end >= s.max_bytes
        or counted is None
        or counted[:2] != (tail.ino, end)
    ):
        return None
    eid = event["event_id"]
    # All rows fetched, so the statement ends and holds no read snapshot of the index open.
    if s.cursor.execute(_LOOKUP, (eid,)).fetchall():
        return None
    for held in w.tails.values():
        if eid in held.ids:
            return None
    line = orjson.dumps(event) + b"\n"
    _write(log, w, s, line, end, sync)
    end += len(line)
    first_line = counted[2]
    log._line_counts[segment] = (tail.ino, end, first_line + 1)
    tail.end = end
    tail.ids.add(eid)
    log._indexed_to[segment] = (tail.ino, end)
    return AppendResult(eid, w.stream, segment, first_line)


def _write(log: EventLog, w: _StreamWriter, s: Steady, line: bytes, end: int, sync: bool) -> None:
    """The line written at `end` and, unless told otherwise, synced; on failure, as `_write_durably`."""
    segment = s.segment
    try:
        durable_files.write_all(s.fd, line)
    except OSError as exc:
        durable_files.cut_to_whole_lines(s.fd, end)
        # Another process's fsync may have recorded a size that counts the cut bytes.
        forget_synced(log.root / w.stream / ".sync")
        log.forget_segment(segment)
        w.steady = None
        raise StorageError(
            f"writing {segment}.jsonl: {os_reason(exc)} (the log keeps whole records only and stays readable)"
        ) from exc
    if sync and log.settings.fsync != "none":
        try:
            os.fsync(s.fd)
        except OSError as exc:
            w.steady = None
            raise StorageError(
                f"syncing {segment}.jsonl to disk: {os_reason(exc)}; the records of this write may not be durable"
            ) from exc
