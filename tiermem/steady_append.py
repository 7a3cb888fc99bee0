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
  change moves its generation on), and it names this segment: so no seal has
  begun on this segment (a seal unlists a segment before it marks it), and this
  segment's lines past the indexed offset are this writer's own tail;
- every other segment it names is as the full path left it: the same inode,
  exactly as long (one more `stat` each). Those are the tails a writer of this
  process still holds (the day before's segment after midnight, another stream's
  segment), and while their files have not grown, what the full path read of
  them still holds: the ids past the index's offset are in this writer's tails,
  or the index covers the file to its end. A list that named this segment alone
  would make the one step stop at a writer's first midnight or first event in
  another stream, until a seal or a restart emptied it;
- the file under the segment's name is the inode this writer holds, exactly as
  long as this writer left it, or longer by whole lines other processes
  appended, which it takes into its tail (`IndexFollower.absorb`): nobody
  rewrote it, nothing is torn, and it is below the size at which segments roll
  over;
- the id is neither in the index nor in any of this writer's tails.

While those hold, no id can have entered the index that this writer does not
hold in its own tail: lines reach a segment only through a writer, which lists
its segment before it holds ids in memory (the list would have moved) or, with
a damaged or full list, indexes them as it writes (the list names more than
this segment then); a line in this very segment is taken into the tail. The id
lookup is one autocommit read of the index on a connection of the writer's
own: no read transaction is held from one append to the next, since a writer
idle after its last append would otherwise hold back the index's checkpoints
and let its write-ahead log grow with every other process's commits. The
compiled lookup answers "absent" without that read while the index's wal-index
header shows no commit since it read the index's ids (`_steady.c`); the Python
steps always ask SQLite, with the same answers.

Then it writes, syncs and adds the id to the tail, which is what the full path
would have done. Anything else (a duplicate included) returns None, with the
kept state dropped and nothing else changed, and the caller takes the full path
under the same locks.

With the compiled module (`_steady.c`) the looks, the lookup, the write and the
flush of one event are one call: a caller that sleeps through each flush finds
the interpreter's caches cold at every append, and each Python step between the
lock and the flush then costs several times its warm price. When that call
finds anything not as it was left, nothing is done and the Python steps below
decide, as without the module. `appender` goes one step further for
`EventLog.append` of an interaction: the check, the stream's locks, this step,
the flush, the bookkeeping and the result in one call, with no Python frame
between the caller and the flush.
"""

from __future__ import annotations

import functools
import importlib
import mmap
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, Protocol

import orjson

from tiermem import compiled_records, durable_files, heldio
from tiermem.appended import AppendResult
from tiermem.errors import StorageError, os_reason
from tiermem.eventlog_index import TAIL_FLUSH_IDS, Tail
from tiermem.events import stream_of
from tiermem.groupcommit import forget_synced
from tiermem.idindex import INDEX_NAME, LagList, indexed_offset
from tiermem.settings import Settings


def _one_sqlite(module: Any) -> bool:
    """True when `module` and Python's `sqlite3` call the same copy of SQLite.

    Each copy of SQLite in a process keeps its own record of the POSIX locks it holds on
    a database file, and closing a descriptor in one copy drops the locks the other one
    holds: another process could then write the id index under a reader. A Python with
    SQLite linked in statically would give the compiled lookup such a second copy, so the
    compiled call is only used when one symbol resolves to one address from both sides.
    """
    try:
        import _sqlite3
        import ctypes  # optional in a Python built without libffi: the Python path runs then

        ours = ctypes.cast(ctypes.CDLL(module.__file__).sqlite3_libversion, ctypes.c_void_p).value
        theirs = ctypes.cast(ctypes.CDLL(_sqlite3.__file__).sqlite3_libversion, ctypes.c_void_p).value
    except (ImportError, OSError, AttributeError):
        return False
    return ours is not None and ours == theirs


_steady: Any
try:
    _steady = importlib.import_module("tiermem._steady")
except ImportError:  # built without a C compiler or without SQLite's header
    _steady = None
if _steady is not None and not _one_sqlite(_steady):
    _steady = None


class _StreamWriter(Protocol):
    """What this module uses of the event log's per-stream writer."""

    stream: str
    steady: Steady | None
    tails: dict[str, Tail]
    listed: frozenset[str] | None
    lag_raw: bytes
    checked: dict[str, bytes]
    active: dict[str, str]
    paths: dict[str, tuple[str, str, str]]
    fds: dict[str, int]
    fast_index: Any  # the compiled lookup's connection (`_steady.Index`), opened on first use

    def index(self) -> sqlite3.Connection: ...
    def partition_dir(self, partition: str) -> int: ...
    def forget_partition_dir(self, partition: str) -> None: ...
    def snapshot(self) -> sqlite3.Cursor: ...
    def end_snapshot(self) -> None: ...


class EventLog(Protocol):
    """What this module uses of the event log (`tiermem.eventlog.EventLog`)."""

    settings: Settings
    root: Path
    _line_counts: dict[str, tuple[int, int, int]]
    _indexed_to: dict[str, tuple[int, int]]
    _writers: Any

    def _lag_list(self) -> LagList: ...
    def forget_segment(self, segment: str) -> None: ...
    def absorb(self, segment: str, fd: int, tail: Tail, ino: int, size: int) -> bool: ...


_LOOKUP = "SELECT 1 FROM event_ids WHERE event_id = ?"
_MANY = 500  # at most this many ids in one lookup (SQLite's limit on a statement's variables is higher)
# At most this many other listed segments are looked at per one-step append (one `stat` each);
# with more, the full path runs.
_OTHERS_MAX = 8


class Steady:
    """Where the full protocol left a writer's last append: valid while nothing in it has moved."""

    __slots__ = (
        "cursor",
        "day",
        "dir_fd",
        "fast",
        "fd",
        "lag",
        "max_bytes",
        "name",
        "others",
        "packed",
        "partition",
        "raw",
        "segment",
        "tail",
        "tail_sets",
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
        others: tuple[tuple[str, tuple[int, int]], ...],
        fast: Any,
        tail_sets: tuple[set[str], ...],
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
        self.cursor = cursor  # on the index, for the lookups (each its own read)
        self.max_bytes = max_bytes
        # The other listed segments: (path, (inode, size)) as the full path left them.
        self.others = others
        self.fast = fast  # the compiled lookup's connection, or None: the Python steps alone
        # The id sets of the writer's tails: new tails appear only on the full path, which keeps
        # a new state (or none) after it.
        self.tail_sets = tail_sets
        # What the compiled append of a whole record (`appender`) reads of this state, in one tuple.
        self.packed = (
            None
            if fast is None
            else (
                fast,
                lag,
                raw,
                others,
                dir_fd,
                self.name,
                max_bytes,
                tail_sets,
                fd,
                tail,
                segment,
                self.day,
            )
        )


def remember(log: EventLog, w: _StreamWriter, segment: str, partition: str) -> None:
    """After the full path appended one record to `segment` (locks held): keep its state if the
    next append may skip the protocol, else forget any state kept before."""
    w.end_snapshot()
    tail = w.tails.get(segment)
    listed = w.listed
    lag = log._lag_list().mapped()
    if (
        tail is None
        or lag is None
        or listed is None
        or len(listed) > _OTHERS_MAX + 1
        or segment not in listed
        # The seal marks were checked under this very lag record (see `segment_for`).
        or w.checked.get(partition) is not w.lag_raw
        or w.active.get(partition) != segment.rsplit("/", 1)[1]
    ):
        return
    dir_fd = w.partition_dir(partition)
    others = _others_as_left(log, w, dir_fd, listed - {segment})
    if others is None:
        return
    w.steady = Steady(
        w.lag_raw,
        partition,
        segment,
        dir_fd,
        w.fds[partition],
        tail,
        lag,
        w.snapshot(),
        log.settings.segment_max_bytes,
        others,
        _fast_index(log, w),
        tuple(t.ids for t in w.tails.values()),
    )


def _fast_index(log: EventLog, w: _StreamWriter) -> Any:
    if _steady is None:
        return None
    if w.fast_index is None:
        try:
            w.fast_index = _steady.Index(str(log.root / INDEX_NAME))
        except OSError:
            return None  # the Python steps do without it
    return w.fast_index


def _others_as_left(
    log: EventLog, w: _StreamWriter, dir_fd: int, segments: frozenset[str]
) -> tuple[tuple[str, tuple[int, int]], ...] | None:
    """(path, (inode, size)) of each other listed segment whose lines past the index's offset
    this writer's checks already see: the writer's own tail of it (this stream's lock is held,
    so only another process can have grown it since), or the index to the file's end (the full
    path just caught it up). None when one of them is neither: the full path decides each time.
    """
    out = []
    for other in sorted(segments):
        path = str(log.root / f"{other}.jsonl")
        st = heldio.stat_at(dir_fd, path)  # an absolute path: the folder is not used
        if st is None:
            return None  # sealed meanwhile: the list changes with the next change to it
        tail = w.tails.get(other)
        if tail is not None:
            if (tail.ino, tail.end) != st:
                return None
        elif indexed_offset(w.index(), other) != st[1]:
            return None
        out.append((path, st))
    return tuple(out)


def append_steady(
    log: EventLog, w: _StreamWriter, event: dict[str, Any], *, sync: bool
) -> AppendResult | None:
    """Append one validated event as the full path would, if nothing has moved since the last
    append (both locks held); None, with nothing changed but the kept state dropped, when the
    full path must decide."""
    s = w.steady
    if s is None:
        return None
    if s.fast is not None:
        done = _append_compiled(log, w, s, event, sync)
        if done is not None:
            return done
    found = _unmoved(log, w, s, 1) if str(event["ts"]).startswith(s.day) else None
    if found is None:
        w.end_snapshot()  # the full path decides: the kept state goes
        return None
    tail, end, first_line = found
    eid = event["event_id"]
    if s.cursor.execute(_LOOKUP, (eid,)).fetchall():
        w.end_snapshot()  # the full path decides: the kept state goes
        return None
    for held in w.tails.values():
        if eid in held.ids:
            w.end_snapshot()  # the full path decides: the kept state goes
            return None
    line = orjson.dumps(event) + b"\n"
    _write(log, w, s, line, end, sync)
    end += len(line)  # as `_written`, without the call
    log._line_counts[s.segment] = (tail.ino, end, first_line + 1)
    tail.end = end
    log._indexed_to[s.segment] = (tail.ino, end)
    tail.ids.add(eid)
    return AppendResult(eid, w.stream, s.segment, first_line)


def _append_compiled(
    log: EventLog, w: _StreamWriter, s: Steady, event: dict[str, Any], sync: bool, again: bool = True
) -> AppendResult | None:
    """`append_steady` in one compiled call; None when it found something moved (nothing done).

    Only longer: with several processes appending to one segment, the usual case; their whole
    lines go into the tail (`IndexFollower.absorb`) and the call is made once more."""
    tail = s.tail
    segment = s.segment
    end = tail.end
    counted = log._line_counts.get(segment)
    eid = event["event_id"]
    if (
        counted is None
        or counted[0] != tail.ino
        or counted[1] != end
        or w.tails.get(segment) is not tail
        or len(tail.ids) + 1 >= TAIL_FLUSH_IDS
        or not str(event["ts"]).startswith(s.day)
        or type(eid) is not str
    ):
        return None
    try:
        n = _steady.append_one(
            s.fast,
            s.lag,
            s.raw,
            s.others,
            s.dir_fd,
            s.name,
            tail.ino,
            end,
            s.max_bytes,
            eid,
            s.tail_sets,
            orjson.dumps,
            event,
            s.fd,
            os.fsync if sync and log.settings.fsync != "none" else None,
        )
    except OSError as exc:  # the flush's (the write's is answered below)
        _sync_failed(w, s, exc)
    if type(n) is not int:
        _write_failed(log, w, s, end, OSError(n[1], os.strerror(n[1])))
    if n < 0:
        if n == -2 and again and log.absorb(segment, s.fd, tail, tail.ino, heldio.size_of(s.fd)):
            return _append_compiled(log, w, s, event, sync, again=False)
        return None
    first_line = counted[2]
    end += n
    log._line_counts[segment] = (tail.ino, end, first_line + 1)
    tail.end = end
    log._indexed_to[segment] = (tail.ino, end)
    tail.ids.add(eid)
    return AppendResult(eid, w.stream, segment, first_line)


def appender(log: EventLog) -> Callable[[Any], Any] | None:
    """`EventLog.append`'s usual case in one compiled call (`_steady.Appender.append`), or None.

    Called with a record, it answers the `AppendResult` when it appended it in one step (the
    compiled check, the stream's locks, the one step, the flush, the writer's bookkeeping);
    otherwise, with nothing done, the event as the compiled check returned it (the Python path
    goes on with it) or None (the check left the record to the Python paths). Not with group
    commit, whose callers share their flushes.
    """
    check = compiled_records.bound(log.settings.limits)
    # A build of the compiled module from before the appender existed has no `Appender`: the
    # Python path then appends, as it does without the module.
    kind = getattr(_steady, "Appender", None)
    if kind is None or check is None or log.settings.fsync == "group":
        return None
    built = kind(
        check,
        log._writers,
        stream_of("interaction"),
        log._line_counts,
        log._indexed_to,
        AppendResult,
        None if log.settings.fsync == "none" else os,
        orjson.dumps,
        functools.partial(_compiled_failed, log),
        TAIL_FLUSH_IDS,
    )
    append: Callable[[Any], Any] = built.append
    return append


def _compiled_failed(
    log: EventLog, w: _StreamWriter, s: Steady, end: int, stage: int, err: int | OSError
) -> NoReturn:
    """The compiled append's write (stage 1, an errno) or flush (stage 2, its error) failed: the
    Python path's clean-up and error, the locks still held."""
    if isinstance(err, OSError):
        _sync_failed(w, s, err)
    _write_failed(log, w, s, end, OSError(err, os.strerror(err)))


def append_steady_many(
    log: EventLog, w: _StreamWriter, events: list[dict[str, Any]], *, sync: bool
) -> list[AppendResult] | None:
    """`append_steady` for several events (a group of callers' records): one lookup, one write."""
    s = w.steady
    if s is None:
        return None
    day = s.day
    ids = [event["event_id"] for event in events]
    if (
        len(events) > _MANY
        or not all(str(event["ts"]).startswith(day) for event in events)
        or len(set(ids)) != len(ids)
    ):
        w.end_snapshot()  # the full path decides: the kept state goes
        return None
    found = _unmoved(log, w, s, len(ids))
    if found is None:
        w.end_snapshot()  # the full path decides: the kept state goes
        return None
    tail, end, first_line = found
    marks = ",".join("?" * len(ids))
    if s.cursor.execute(f"SELECT 1 FROM event_ids WHERE event_id IN ({marks}) LIMIT 1", ids).fetchall():
        w.end_snapshot()  # the full path decides: the kept state goes
        return None
    for held in w.tails.values():
        if not held.ids.isdisjoint(ids):
            w.end_snapshot()  # the full path decides: the kept state goes
            return None
    payload = b"".join([orjson.dumps(event) + b"\n" for event in events])
    _write(log, w, s, payload, end, sync)
    _written(log, s, tail, end + len(payload), first_line + len(ids))
    tail.ids.update(ids)
    stream, segment = w.stream, s.segment
    return [AppendResult(eid, stream, segment, first_line + k) for k, eid in enumerate(ids)]


def _unmoved(log: EventLog, w: _StreamWriter, s: Steady, adding: int) -> tuple[Tail, int, int] | None:
    """(the tail, the file's size, its lines) if nothing has moved since `s` was kept and the tail
    can take `adding` more ids without being due for the index."""
    tail = s.tail
    segment = s.segment
    if w.tails.get(segment) is not tail or len(tail.ids) + adding >= TAIL_FLUSH_IDS or s.lag[:] != s.raw:
        return None
    for path, left in s.others:
        if heldio.stat_at(s.dir_fd, path) != left:  # grown, replaced or gone since: not as left
            return None
    st = heldio.stat_at(s.dir_fd, s.name)
    if st is None:  # sealed, or the folder itself went: the full path sees to it
        w.forget_partition_dir(s.partition)
        return None
    if st[1] != tail.end and not log.absorb(segment, s.fd, tail, st[0], st[1]):
        return None  # written by another process, other than in whole lines after this tail
    end = tail.end
    counted = log._line_counts.get(segment)
    if (
        st[0] != tail.ino
        or st[1] != end
        or end >= s.max_bytes
        or counted is None
        or counted[:2] != (tail.ino, end)
    ):
        return None
    return tail, end, counted[2]


def _written(log: EventLog, s: Steady, tail: Tail, end: int, lines: int) -> None:
    """What the full path's `_index_written` notes after a write to a listed segment."""
    log._line_counts[s.segment] = (tail.ino, end, lines)
    tail.end = end
    log._indexed_to[s.segment] = (tail.ino, end)


def _write(log: EventLog, w: _StreamWriter, s: Steady, line: bytes, end: int, sync: bool) -> None:
    """The line written at `end` and, unless told otherwise, synced; on failure, as `_write_durably`."""
    try:
        heldio.write_all(s.fd, line)
    except OSError as exc:
        _write_failed(log, w, s, end, exc)
    if sync and log.settings.fsync != "none":
        try:
            os.fsync(s.fd)
        except OSError as exc:
            _sync_failed(w, s, exc)


def _write_failed(log: EventLog, w: _StreamWriter, s: Steady, end: int, exc: OSError) -> NoReturn:
    segment = s.segment
    durable_files.cut_to_whole_lines(s.fd, end)
    # Another process's fsync may have recorded a size that counts the cut bytes.
    forget_synced(log.root / w.stream / ".sync")
    log.forget_segment(segment)
    w.end_snapshot()
    raise StorageError(
        f"writing {segment}.jsonl: {os_reason(exc)} (the log keeps whole records only and stays readable)"
    ) from exc


def _sync_failed(w: _StreamWriter, s: Steady, exc: OSError) -> NoReturn:
    w.end_snapshot()
    raise StorageError(
        f"syncing {s.segment}.jsonl to disk: {os_reason(exc)}; the records of this write may not be durable"
    ) from exc
