"""The stored first copy of an event id, for telling a retry from a reused id.

The log refuses an event whose `event_id` it already holds and reports it as
a duplicate: that is idempotency, and it is right when the caller is sending
the same record again. But an id is only a key the caller chose; another
caller (another agent, another user, or the same one with other words) can
send it too, and its record is then not stored at all. To tell the two apart
the writer reads the record the log kept under that id and compares.

Duplicates are rare, so this path may search a segment: the id index names
the segment that holds the id (this process's own unindexed tail is consulted
too, as the log's own duplicate check does), and the line is found by its
id's bytes, searched from the end of the mapped file (a retry's first copy is
usually recent), then parsed and checked. A sealed segment is read as Parquet.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import orjson

from tiermem.eventlog import ERASED_MARK, EventLog
from tiermem.events import upcast
from tiermem.idindex import index_lookup

# What a first copy looks up as when its line was erased: its content is gone, so it
# can never be shown to be the same record.
ERASED: dict[str, Any] = {ERASED_MARK: True}


def first_copy(log: EventLog, stream: str, event_id: str) -> dict[str, Any] | None:
    """The event the log holds under `event_id` in `stream` (`ERASED` when its line was
    erased), or None when it cannot be found (the caller must then assume it differs)."""
    w = log._writer(stream)
    with w.thread_lock:  # the tails are this process's writers' (they change under this lock)
        segments = {segment for segment, tail in w.tails.items() if event_id in tail.ids}
    segments |= index_lookup(log._index(), "segment", [event_id])
    for segment in sorted(segments):
        found = _in_segment(log.root / segment, event_id)
        if found is not None:
            return found
    return None


def _in_segment(stem: Path, event_id: str) -> dict[str, Any] | None:
    try:
        fh = stem.with_suffix(".jsonl").open("rb")
    except FileNotFoundError:  # sealed since (or between the lookup and now)
        return _in_parquet(stem.with_suffix(".parquet"), event_id)
    with fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return None
        with mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ) as data:
            return _find_line(data, size, event_id)


def _find_line(data: mmap.mmap, size: int, event_id: str) -> dict[str, Any] | None:
    """The line of `event_id`, searched from the end: a retry's first copy is usually recent."""
    key = b'"event_id":' + orjson.dumps(event_id)
    pos = data.rfind(key, 0, size)
    while pos >= 0:
        start = data.rfind(b"\n", 0, pos) + 1
        end = data.find(b"\n", pos, size)
        if end >= 0:  # (a line still being written is not stored yet)
            try:
                event = orjson.loads(data[start:end])
            except orjson.JSONDecodeError:
                event = None
            if isinstance(event, dict) and event.get("event_id") == event_id:
                return ERASED if event.get(ERASED_MARK) else upcast(event)
        pos = data.rfind(key, 0, start)  # the id met inside another record's field: look before
    return None


def _in_parquet(path: Path, event_id: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    from tiermem.sealed import parquet_event  # pyarrow only for sealed data

    event = parquet_event(path, event_id)
    if event is None:
        return None
    return ERASED if event.get(ERASED_MARK) else event


def same_turn(stored: dict[str, Any] | None, sent: dict[str, Any]) -> bool:
    """Whether a stored turn is the one sent again: same agent, same user, same words.

    The rest of a turn (its time when not given, its level, its enrichment) may
    legitimately be filled in differently by a retry; who said what may not.
    """
    if stored is None or stored.get(ERASED_MARK):
        return False
    return all(stored.get(k) == sent.get(k) for k in TURN_IDENTITY)


TURN_IDENTITY = ("type", "agent_id", "user", "user_message", "agent_response")
