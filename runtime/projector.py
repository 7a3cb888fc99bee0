"""The projector: applies log events to the hot store, from its checkpoint.

It reads the log and hands events to the hot store through its interface
(`tiermem.runtime.store.HotStore.apply_batch`); how a backend applies an event
is the backend's (SQLite: `tiermem.runtime.sqlite_apply`). Application is
idempotent and order-tolerant, so the same events applied twice, or applied
directly by a runtime process (`HotStore.apply_now`, used by `record_turn`
and the memory tools to read their own writes) and later again by the
projector, give the same rows. That is what makes `rebuild` reproduce the
live store exactly (`content_digest`).

Streams are applied in dependency order: erasures first (so that nothing they
cover is ever added), then interactions, transitions, sessions, episodes,
knowledge and relationships, and retrievals last (their recall-count bumps
need the items they name to exist). Turns come before what is derived from
them because every row's `owner` (the user(s) it belongs to, which decides
who may read it: `tiermem.runtime.visibility`) is computed from the events it
cites: a turn's user, then the owners of the turns, proposals and episodes in
a derived event's `source_event_ids`.

Position: the authoritative position (lines and bytes read per segment) lives
in the hot store's `meta` table and commits together with the rows, so a crash
can never leave the two out of step; it is mirrored to the `projector`
checkpoint (`tiermem.eventlog.Checkpoints`) for operators. Open JSONL segments
are read from the byte offset where the last pass stopped, so catching up
costs what is new, not the size of the log.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from tiermem.runtime.applied import AppliedLines, StoreIdentity, open_identified_store
from tiermem.runtime.store import HotStore, ProjectionInfo, kv_fact_id, open_store, remove_store

from tiermem.durable_files import line_event_id
from tiermem.eventlog import ERASED_MARK, Checkpoints, EventLog
from tiermem.events import upcast
from tiermem.registry import PROJECTION_ORDER
from tiermem.settings import Settings

CONSUMER = "projector"
STREAM_ORDER = PROJECTION_ORDER  # declared with the event types (tiermem.registry)
BATCH_EVENTS = 5000
OFFSETS_KEY = "projector_offsets"

__all__ = [
    "ProjectionInfo",
    "RebuildInfo",
    "content_digest",
    "kv_fact_id",
    "project",
    "project_if_free",
    "rebuild",
]


@dataclass
class RebuildInfo:
    applied: int
    refused: int
    counts: dict[str, int]
    digest: str
    seconds: float
    path: str = "offline"


# ---------------------------------------------------------------- reading the log


def _segment_events(
    log: EventLog,
    stream: str,
    offsets: dict[str, list[int]],
    skip: _Skip | None = None,
    stored: Stored | None = None,
) -> Iterator[tuple[str, int, int, dict[str, Any] | None]]:
    """Yield (segment, lines_after, bytes_after, event|None) for what is new since `offsets`.

    `offsets[segment] = [lines, bytes, inode]` for JSONL, `[lines, -1, mtime_ns]` for Parquet.
    An erased line (a tombstone) advances the position but yields event None, and so
    does a line this process already applied (`skip`), or one whose row the store
    already holds (`stored`, for turns), without being parsed.
    """
    for partition, stem, path in log.segments(stream):
        segment = f"{stream}/{partition}/{stem}"
        lines, nbytes, stamp = (offsets.get(segment) or [0, 0, 0])[:3]
        marks = skip.take(segment) if skip is not None else {}
        try:
            st = path.stat()
        except FileNotFoundError:
            path = path.with_suffix(".parquet")
            st = path.stat()
        if path.suffix == ".parquet":
            if not (nbytes == -1 and stamp == st.st_mtime_ns):
                yield from _parquet_events(segment, path, lines, st.st_mtime_ns, marks, skip)
            continue
        if st.st_ino == stamp and st.st_size == nbytes:
            continue
        data, base_lines, base_bytes = _new_bytes(
            path, st.st_ino == stamp and st.st_size > nbytes, lines, nbytes
        )
        end = data.rfind(b"\n") + 1  # a line still being written is not yet visible
        pos = 0
        n = base_lines
        held: set[str] = set()
        looked_to = 0  # lines up to this byte offset were looked up in the store (`stored`)
        while pos < end:
            if stored is not None and pos >= looked_to and n >= lines:
                held, looked_to = _look_up(stored, data, pos, end)
            nl = data.index(b"\n", pos)
            line = data[pos:nl]
            pos = nl + 1
            n += 1
            if n <= lines:
                continue
            if marks and (marked := marks.get(n)) is not None and line_event_id(line) == marked:
                if skip is not None:
                    skip.skipped += 1
                yield segment, n, base_bytes + pos, None  # applied already by this process
                continue
            if held and line_event_id(line) in held:
                yield segment, n, base_bytes + pos, None  # applied already, by another process
                continue
            event = orjson.loads(line)
            yield segment, n, base_bytes + pos, None if event.get(ERASED_MARK) else upcast(event)
        yield segment, n, base_bytes + end, {"_ino": st.st_ino}


def _new_bytes(path: Path, grown: bool, lines: int, nbytes: int) -> tuple[bytes, int, int]:
    """(the bytes to read, the lines and bytes before them): from where the last pass stopped
    when the same file has grown, else the whole file (new, rewritten by an erasure, replaced)."""
    with open(path, "rb") as fh:
        if grown:
            fh.seek(nbytes)
            return fh.read(), lines, nbytes
        return fh.read(), 0, 0


# (event ids) -> those of them whose turn rows the store already holds
Stored = Callable[[list[str]], set[str]]
LOOK_UP_LINES = 500  # lines per look-up (SQLite takes up to 32,766 parameters)


def _look_up(stored: Stored, data: bytes, pos: int, end: int) -> tuple[set[str], int]:
    """The ids of the next LOOK_UP_LINES lines from `pos` that the store holds, and where they end."""
    ids: list[str] = []
    while pos < end and len(ids) < LOOK_UP_LINES:
        nl = data.index(b"\n", pos)
        eid = line_event_id(data[pos:nl])
        if eid is not None:
            ids.append(eid)
        pos = nl + 1
    return (stored(ids) if ids else set()), pos


def _stored_turns(store: HotStore) -> Stored | None:
    """For a SQLite store: which turns it holds already. Applying such a turn again changes
    nothing (a turn's row is inserted only if absent, and one an erasure covers is refused
    and was deleted), so passing over it is the same as applying it, minus the work and the
    store's write lock: what another server process on this data root recorded and applied
    itself (its marks are its own) is not applied a second time."""
    conn = getattr(store, "conn", None)
    if not isinstance(conn, sqlite3.Connection):
        return None

    def stored(ids: list[str]) -> set[str]:
        marks = ",".join("?" * len(ids))
        rows = conn.execute(
            f"SELECT item_id FROM wm_items WHERE item_id IN ({marks}) AND kind = 'interaction'", ids
        )
        return {str(r[0]) for r in rows}

    return stored


def _parquet_events(
    segment: str, path: Path, lines: int, mtime_ns: int, marks: dict[int, str], skip: _Skip | None
) -> Iterator[tuple[str, int, int, dict[str, Any] | None]]:
    """`_segment_events` of one sealed segment."""
    from tiermem.sealed import parquet_events  # pyarrow only for sealed data

    n = -1
    for n, event in enumerate(parquet_events(path, keep_erased=True)):
        if n >= lines:
            done = bool(marks) and marks.get(n + 1) == event.get("event_id")  # applied already
            if done and skip is not None:
                skip.skipped += 1
            yield segment, n + 1, -1, None if done or event.get(ERASED_MARK) else event
    # Record the stamp even when nothing was new, so the file is not read again.
    yield segment, max(lines, n + 1), -2, {"_mtime_ns": mtime_ns}


@dataclass
class _Skip:
    """One pass's view of the lines this process applied itself (`AppliedLines`) for its store."""

    applied: AppliedLines
    store: StoreIdentity | None
    skipped: int = 0

    def take(self, segment: str) -> dict[int, str]:
        return self.applied.take(self.store, segment)


class _ProjectorLock:
    """One projector per data root at a time; others wait, then find little left to do."""

    def __init__(self, settings: Settings) -> None:
        settings.locks_dir.mkdir(parents=True, exist_ok=True)
        self.path = settings.locks_dir / "projector.lock"
        self.fd = -1

    def __enter__(self) -> _ProjectorLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def try_acquire(self) -> bool:
        """Take the lock only if no one holds it (then release it with `__exit__`)."""
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = -1
            return False
        return True

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _flush(
    store: HotStore,
    batch: list[dict[str, Any]],
    pending: dict[str, list[int]],
    offsets: dict[str, list[int]],
    info: ProjectionInfo,
) -> None:
    """Apply a batch and move the position in the same transaction."""
    moved = {**offsets, **pending}
    store.apply_batch(batch, {OFFSETS_KEY: orjson.dumps(moved).decode()}, info)
    offsets.update(pending)
    batch.clear()
    pending.clear()


def _project_locked(
    settings: Settings, store: HotStore, skip: _Skip | None = None, *, look_up: bool = True
) -> ProjectionInfo:
    """One pass (the projector lock held). `look_up`: pass over turns the store already holds
    (`_stored_turns`); a rebuild into an empty store has nothing to look up."""
    started = time.perf_counter()
    info = ProjectionInfo()
    offsets: dict[str, list[int]] = orjson.loads(store.get_meta(OFFSETS_KEY) or "{}")
    log = EventLog(settings)
    try:
        for stream in STREAM_ORDER:
            batch: list[dict[str, Any]] = []
            pending: dict[str, list[int]] = {}

            stored = _stored_turns(store) if look_up and stream == "interactions" else None
            for segment, lines, nbytes, event in _segment_events(log, stream, offsets, skip, stored):
                old = offsets.get(segment) or [0, 0, 0]
                cur = pending.get(segment) or list(old)
                if event is not None and "_ino" in event:
                    pending[segment] = [lines, nbytes, event["_ino"]]
                    continue
                if event is not None and "_mtime_ns" in event:
                    pending[segment] = [lines, -1, event["_mtime_ns"]]
                    continue
                pending[segment] = [lines, nbytes, cur[2]]
                if event is not None:
                    batch.append(event)
                if len(batch) >= BATCH_EVENTS:
                    _flush(store, batch, pending, offsets, info)
            if batch or pending:
                _flush(store, batch, pending, offsets, info)
    except BaseException:
        if info.erasures:
            # An erasure committed by an earlier batch of this pass: the caches drop its text now,
            # not at some later read (the scrub below is not reached).
            store.erased()
        raise
    finally:
        log.close()
        if skip is not None:
            skip.applied.count_skipped(skip.skipped)
    if info.erasures:
        store.scrub()
    info.segments = len(offsets)
    Checkpoints(settings).save(CONSUMER, {seg: pos[0] for seg, pos in offsets.items()})
    info.seconds = round(time.perf_counter() - started, 4)
    return info


def project(settings: Settings, store: HotStore | None = None, *, wait: bool = True) -> ProjectionInfo:
    """Bring the hot store up to date with the log; returns what was applied.

    One projector per store: the file lock covers the processes of this
    machine, the store's lease those of every machine sharing a server store.
    With `wait=False` a pass that finds the lease taken returns at once
    (path "leased"): the holder is applying the same log.
    """
    own = store is None
    target = store if store is not None else open_store(settings)
    try:
        with _ProjectorLock(settings), target.projector_lease(wait) as held:
            if not held:
                return ProjectionInfo(path="leased")
            return _project_locked(settings, target)
    finally:
        if own:
            target.close()


def project_if_free(
    settings: Settings, store: HotStore | None = None, applied: AppliedLines | None = None
) -> ProjectionInfo | None:
    """`project`, unless another projector holds the lock (None): it is catching up the same store.

    `applied`: lines this process applied to the store itself, passed over (see
    `tiermem.runtime.applied`); only with the store opened here, whose file is known.
    """
    lock = _ProjectorLock(settings)
    if not lock.try_acquire():
        return None
    own = store is None
    skip = None
    if store is not None:
        target = store
    elif applied is not None:
        target, identity = open_identified_store(settings)
        skip = _Skip(applied, identity)
    else:
        target = open_store(settings)
    try:
        return _project_locked(settings, target, skip)
    finally:
        lock.__exit__()
        if own:
            target.close()


def rebuild(settings: Settings) -> RebuildInfo:
    """Delete the hot store and rebuild it from the log; same log, same content digest."""
    started = time.perf_counter()
    with _ProjectorLock(settings):
        remove_store(settings)
        (settings.checkpoints_dir / f"{CONSUMER}.json").unlink(missing_ok=True)
        store = open_store(settings)
        try:
            with store.projector_lease() as _:
                info = _project_locked(settings, store, look_up=False)
            counts = store.counts()
            digest = store.digest()
        finally:
            store.close()
    return RebuildInfo(
        applied=info.applied,
        refused=info.refused,
        counts=counts,
        digest=digest,
        seconds=round(time.perf_counter() - started, 3),
    )


def content_digest(settings: Settings) -> str:
    """Order-independent hash of the hot store's content tables."""
    store = open_store(settings)
    try:
        return store.digest()
    finally:
        store.close()
