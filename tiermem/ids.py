"""Event ids and UTC time.

Event ids are ULIDs: 48 bits of milliseconds since the epoch followed by 80 bits
that are random for fresh events and a hash of the inputs for derived events,
written in Crockford base32 (26 characters). They sort by time as strings, so
`ORDER BY event_id` is a stable time order, and a derived event computed twice
from the same inputs gets the same id, which is what makes re-running a job safe.
"""

from __future__ import annotations

import hashlib
import os
import threading
from datetime import UTC, datetime

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def utcnow() -> datetime:
    return datetime.now(UTC)


def to_ms(ts: datetime) -> int:
    if ts.tzinfo is None:
        raise ValueError("naive datetime: tiermem only uses UTC-aware datetimes")
    return int(ts.timestamp() * 1000)


def format_ts(ts: datetime) -> str:
    """ISO-8601, UTC, millisecond precision, `Z` suffix: the log's one time format."""
    if ts.tzinfo is None:
        raise ValueError("naive datetime: tiermem only uses UTC-aware datetimes")
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_ts(text: str) -> datetime:
    """Parse an ISO-8601 timestamp; a value without offset is rejected, not guessed.

    Only a final `Z` means UTC, and an offset is hours and minutes: Python also
    reads offsets with seconds (`+00:00:12.038`), which no timestamp standard
    has and which would shift the time it names by those seconds.
    """
    if text[-1:] in ("Z", "z"):
        text = text[:-1] + "+00:00"
    value = datetime.fromisoformat(text)
    offset = value.utcoffset()
    if offset is None:
        raise ValueError(f"timestamp without a UTC offset: {text!r}")
    if offset.seconds % 60 or offset.microseconds:
        raise ValueError(f"timestamp with seconds in its UTC offset: {text!r}")
    try:
        return value.astimezone(UTC)
    except OverflowError as exc:  # year 1 at +01:00, year 9999 at -01:00: outside what UTC can name
        raise ValueError(f"timestamp out of range in UTC: {text!r}") from exc


# Every two characters of an id, by the 10 bits they encode: ids are built a pair at a time.
_PAIRS = tuple(a + b for a in _ALPHABET for b in _ALPHABET)


def _encode(value: int, length: int) -> str:
    if length % 2 == 0:
        return "".join([_PAIRS[(value >> shift) & 1023] for shift in range(5 * length - 10, -1, -10)])
    out = []
    for _ in range(length):
        out.append(_ALPHABET[value & 31])
        value >>= 5
    return "".join(reversed(out))


def new_event_id(ts: datetime | None = None) -> str:
    """A fresh, time-ordered, unique id; monotonic within a process."""
    global _last_ms, _last_rand
    ms = to_ms(ts or utcnow())
    with _lock:
        if ms == _last_ms:
            _last_rand = (_last_rand + 1) & ((1 << 80) - 1)
        else:
            _last_ms = ms
            _last_rand = int.from_bytes(os.urandom(10), "big") & ~(1 << 79)
        rand = _last_rand
    return _encode(ms, 10) + _encode(rand, 16)


def derived_event_id(ts: datetime, kind: str, *inputs: str) -> str:
    """A deterministic id for a derived event: same kind and inputs, same id."""
    digest = hashlib.blake2b("\x1f".join((kind, *inputs)).encode(), digest_size=10).digest()
    return _encode(to_ms(ts), 10) + _encode(int.from_bytes(digest, "big"), 16)


def content_hash(*parts: str, size: int = 16) -> str:
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=size).hexdigest()
