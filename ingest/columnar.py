"""Bulk ingest's columnar fast path: whole blocks of ordinary interactions checked column by column.

Most lines of a bulk file are interactions of the current schema, written by
a serialiser, with the same fields in the same order. Checking them one
record at a time costs microseconds of Python per record; checking them a
column at a time (every `agent_id` of a block, every `ts`, ...) runs the same
rules in C loops (`map`, `join`, `min`/`max`, regular expressions, numpy)
whose cost per value is tens of nanoseconds.

`fast_rows` takes the decoded lines of one block, groups the candidates by
their exact field order (a group is a table: every column complete), checks
each group's columns against the rules of the per-record validator, and
returns the stored bytes, id and partition of every line it could settle. A
line it does not return goes through the per-record path
(`tiermem.events.validate`), which is the one that names a field and a reason,
so quarantine reasons are exactly those of that path. Only the common case is
taken here; anything else is left to the per-record path rather than
reproduced:

- a line that is not exactly the serialiser's bytes for what it parses to
  (the cheap proof that no key repeats and no integer was approximated),
  over the record size limit, not an object, or not an `interaction`;
- a field the fast path does not know (any unknown or newer field, `extra`,
  the old camelCase names), or a known field left null;
- `event_id` given but `ts` missing (that record is stamped with the time of
  validation, not with a time derived from the file);
- a timestamp not in the log's own form (`YYYY-MM-DDTHH:MM:SS.mmmZ`) or
  before 1970 (the id derivation packs milliseconds into 48 bits).

When a group's columns do not all pass, the group is halved and each half
checked again, so one bad line among thousands costs a few re-checks and
sends only a handful of lines, not the block, to the per-record path.

Stored bytes. The per-record path stores `orjson.dumps` of the validated
record: `event_id` first, then `type` and `schema_version`, then the caller's
fields in their order, then what enrichment adds (`ts` when derived,
`memory_level`, `response_length`, `tools_used`). The record is rebuilt here in
that order and serialised the same way, so an accepted line is stored
byte-for-byte as before (the equivalence tests compare both paths).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from itertools import chain
from operator import itemgetter
from typing import Any

import numpy as np
import orjson

from tiermem.events import json_container_passes
from tiermem.registry import (
    COMMON_FIELDS,
    EVENT_TYPES,
    FLOAT,
    INT,
    INTERACTION_FIELDS,
    JSON,
    MEMORY_LEVELS,
    STR,
    STRLIST,
    USAGE,
    USAGE_FIELDS,
)
from tiermem.settings import LimitSettings

__all__ = ["FAST_FIELDS", "STREAM", "derived_ids", "fast_rows", "ids_from_ms"]

STREAM = EVENT_TYPES["interaction"].stream
_VERSION = EVENT_TYPES["interaction"].version
# Fields whose rules go beyond their type (`attachments`: kinds, caption limits, keys)
# are checked by the per-record validator only: a record carrying one takes that path.
RULED_FIELDS = frozenset({"attachments"})
FAST_FIELDS: dict[str, str] = {
    k: v for k, v in {**COMMON_FIELDS, **INTERACTION_FIELDS}.items() if k not in RULED_FIELDS
}
_FAST_KEYS = frozenset(FAST_FIELDS)
_INT64 = 2**63
_LEVELS = frozenset(MEMORY_LEVELS)
_USAGE_KEYS = frozenset(USAGE_FIELDS)
_SURROGATE = re.compile("[\ud800-\udfff]")
_IDS = re.compile(r"(?:[0-9A-Za-z_.:\-]{1,128}\n)*")
_TS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
_CROCKFORD = np.frombuffer(b"0123456789ABCDEFGHJKMNPQRSTVWXYZ", dtype=np.uint8)
_BITS = np.array([16, 8, 4, 2, 1], dtype=np.uint8)
CHUNK = 256
_SMALL = 8  # a failing group this small goes to the per-record path without more halving

Row = tuple[str, str, bytes]  # (event_id, partition, stored line with its newline)


def fast_rows(lines: Sequence[bytes], default_ts: str, limits: LimitSettings) -> dict[int, Row]:
    """The lines (non-blank, without newline) settled by the fast path, by their index in `lines`."""
    out: dict[int, Row] = {}
    for start in range(0, len(lines), CHUNK):
        _fast_chunk(lines, start, min(start + CHUNK, len(lines)), default_ts, limits, out)
    return out


def _fast_chunk(
    lines: Sequence[bytes], start: int, stop: int, default_ts: str, limits: LimitSettings, out: dict[int, Row]
) -> None:
    loads, dumps = orjson.loads, orjson.dumps
    limit = limits.max_record_bytes
    groups: dict[tuple[str, ...], list[int]] = {}
    records: list[Any] = [None] * len(lines)
    for i in range(start, stop):
        line = lines[i]
        if len(line) > limit:
            continue
        try:
            rec = loads(line)
        except orjson.JSONDecodeError:
            continue
        if type(rec) is not dict or rec.get("type") != "interaction" or not rec.keys() <= _FAST_KEYS:
            continue
        try:
            if dumps(rec) != line:
                continue
        except orjson.JSONEncodeError:
            continue
        records[i] = rec
        groups.setdefault(tuple(rec), []).append(i)
    for keys, members in groups.items():
        if "ts" not in keys and "event_id" in keys:
            continue
        _settle(keys, members, records, lines, default_ts, limits, out)


def _settle(
    keys: tuple[str, ...],
    members: list[int],
    records: list[Any],
    lines: Sequence[bytes],
    default_ts: str,
    limits: LimitSettings,
    out: dict[int, Row],
) -> None:
    """Encode the group if every column passes; otherwise halve it, down to lines left to the per-record path."""
    rows = [records[i] for i in members]
    group = [lines[i] for i in members]
    stamps = _columns_pass(keys, rows, group, limits)
    if stamps is not None:
        encoded = _encode(keys, rows, group, stamps, default_ts)
        if encoded is not None:
            for i, row in zip(members, encoded, strict=True):
                out[i] = row
            return
    if len(members) <= _SMALL:
        return
    half = len(members) // 2
    _settle(keys, members[:half], records, lines, default_ts, limits, out)
    _settle(keys, members[half:], records, lines, default_ts, limits, out)


# ------------------------------------------------------------ column checks


def _only(values: list[Any], kind: type) -> bool:
    return not values or set(map(type, values)) == {kind}


def _texts_pass(values: list[Any], limit: int, plain: bool = False) -> bool:
    """Strings only, each within the limit, no NUL, no lone surrogate (`plain`: settled for the group)."""
    if not values:
        return True
    if plain:
        return _only(values, str)
    if not _only(values, str) or max(map(len, values)) > limit:
        return False
    joined = "".join(values)
    return "\x00" not in joined and (joined.isascii() or _SURROGATE.search(joined) is None)


def _ints_pass(values: list[Any]) -> bool:
    return not values or (_only(values, int) and min(values) >= -_INT64 and max(values) < _INT64)


def _usage_passes(values: list[Any]) -> bool:
    """Objects of known counters only, each a 64-bit integer >= 0."""
    if not _only(values, dict) or not all(map(_USAGE_KEYS.issuperset, values)):
        return False
    counts = list(chain.from_iterable(map(dict.values, values)))
    return _ints_pass(counts) and (not counts or min(counts) >= 0)


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _json_pass(name: str, values: list[Any], limits: LimitSettings, plain: bool) -> bool:
    """Free-form objects: flat ones (the usual metadata) checked as columns, nested ones one by one."""
    if not _only(values, dict):
        return all(map(_json_passes(name, limits), values))
    items = list(chain.from_iterable(map(dict.values, values)))
    if not set(map(type, items)) <= _SCALARS:
        return all(map(_json_passes(name, limits), values))
    limit = limits.max_field_chars
    keys = list(chain.from_iterable(values))
    texts = [v for v in items if type(v) is str]
    ints = [v for v in items if type(v) is int]
    floats = [v for v in items if type(v) is float]
    return (
        _texts_pass(keys, limit, plain)
        and _texts_pass(texts, limit, plain)
        and _ints_pass(ints)
        and all(map(math.isfinite, floats))
    )


def _json_passes(name: str, limits: LimitSettings) -> Callable[[Any], bool]:
    return lambda value: json_container_passes(name, value, limits)


def _strings_pass(name: str, values: list[Any], limits: LimitSettings, plain: bool) -> bool:
    """A text field's column, with the rules some fields add (id characters, a non-blank agent, levels)."""
    if not _texts_pass(values, limits.max_field_chars, plain):
        return False
    if name == "event_id":
        # One pattern over the joined column: a value holding a newline would pass as two ids.
        joined = "\n".join(values) + "\n"
        return joined.count("\n") == len(values) and _IDS.fullmatch(joined) is not None
    if name == "agent_id":
        return all(map(str.strip, values))
    if name == "memory_level":
        return set(values) <= _LEVELS
    return True


def _latency_pass(values: list[Any]) -> bool:
    """`latency_ms`, the only number: finite, within 64 bits when an integer, not negative."""
    kinds = set(map(type, values))
    if not kinds <= {int, float}:
        return False
    if float in kinds and not all(map(math.isfinite, values)):
        return False
    return (int not in kinds or _ints_pass([v for v in values if type(v) is int])) and min(values) >= 0


def _column_passes(name: str, values: list[Any], limits: LimitSettings, plain: bool) -> bool:
    """One column against what the per-record path accepts for that field (a null: sent there)."""
    if None in values:
        return False
    kind = FAST_FIELDS[name]
    if name == "type":
        return True  # every candidate is an interaction
    if name == "schema_version":
        return _only(values, int) and set(values) == {_VERSION}
    checks: dict[str, Callable[[], bool]] = {
        STR: lambda: _strings_pass(name, values, limits, plain),
        INT: lambda: _ints_pass(values),  # response_length: compared with agent_response later
        FLOAT: lambda: _latency_pass(values),
        STRLIST: lambda: (
            _only(values, list)
            and _texts_pass(list(chain.from_iterable(values)), limits.max_field_chars, plain)
        ),
        USAGE: lambda: _usage_passes(values),
        JSON: lambda: _json_pass(name, values, limits, plain),
    }
    check = checks.get(kind)
    return check is not None and check()


def _ts_pass(values: list[Any], limits: LimitSettings) -> list[datetime] | None:
    """Timestamps in the log's own form, real dates, within the accepted years, not before 1970."""
    if not _only(values, str) or not all(map(_TS.fullmatch, values)):
        return None
    low, high = min(values)[:4], max(values)[:4]  # fixed width: the text order is the time order
    if low < max(f"{limits.min_year:04d}", "1970") or high > f"{limits.max_year:04d}":
        return None
    try:
        return list(map(datetime.fromisoformat, values))
    except ValueError:
        return None


def _columns_pass(
    keys: tuple[str, ...], rows: list[dict[str, Any]], lines: list[bytes], limits: LimitSettings
) -> list[datetime] | None:
    """Whether every column of a group passes; then the parsed timestamps (empty when there is no `ts`)."""
    if "user_message" not in keys or "agent_response" not in keys or "agent_id" not in keys:
        return None
    # The lines are the serialiser's own bytes: a NUL in any string shows as an escape, and no
    # string holds more characters than its line has bytes. When neither can happen, the
    # string columns need only their type checked. (A lone surrogate cannot get past the parser.)
    plain = max(map(len, lines)) <= limits.max_field_chars and not any(b"\\u0000" in line for line in lines)
    columns = {name: list(map(itemgetter(name), rows)) for name in keys}
    stamps: list[datetime] = []
    for name, values in columns.items():
        if name == "ts":
            parsed = _ts_pass(values, limits)
            if parsed is None:
                return None
            stamps = parsed
        elif not _column_passes(name, values, limits, plain):
            return None
    users, answers = columns["user_message"], columns["agent_response"]
    if "" in users and any(not u and not a for u, a in zip(users, answers, strict=True)):
        return None
    lengths = columns.get("response_length")
    if lengths is not None and lengths != list(map(len, answers)):
        return None
    return stamps


# ------------------------------------------------------------ ids and bytes


def derived_ids(stamps: list[datetime], lines: list[bytes]) -> list[str] | None:
    """The replay-safe ids of lines (time in ms, then a hash of the bytes), for a whole column at once.

    The same digits as the per-record derivation: 26 Crockford base-32 digits
    of (milliseconds << 80 | 80-bit BLAKE2b of the line), most significant first.
    None when a time is before 1970 or past the 48 bits of milliseconds.
    """
    n = len(lines)
    if not n:
        return []
    seconds = np.fromiter(map(datetime.timestamp, stamps), dtype=np.float64, count=n)
    ms = (seconds * 1000.0).astype(np.int64)  # int(ts.timestamp() * 1000): the same float product, truncated
    if ms.min() < 0 or ms.max() >= 1 << 48:
        return None
    return ids_from_ms(ms, lines)


def ids_from_ms(ms: Any, lines: Sequence[bytes]) -> list[str]:
    """`derived_ids` from the milliseconds (a numpy int64 array, each in 0 .. 2**48 - 1)."""
    n = len(lines)
    if not n:
        return []
    digests = b"".join([_digest(line) for line in lines])
    value = np.empty((n, 16), dtype=np.uint8)
    value[:, :6] = ms.astype(">u8").view(np.uint8).reshape(n, 8)[:, 2:]
    value[:, 6:] = np.frombuffer(digests, dtype=np.uint8).reshape(n, 10)
    bits = np.zeros((n, 130), dtype=np.uint8)
    bits[:, 2:] = np.unpackbits(value, axis=1)
    digits = bits.reshape(n, 26, 5) @ _BITS
    text = _CROCKFORD[digits].tobytes().decode("ascii")
    return [text[k : k + 26] for k in range(0, 26 * n, 26)]


# The hash state after the derivation's prefix, copied for each line (cheaper than starting over).
_PREFIXED = hashlib.blake2b(b"ingest\x1f", digest_size=10)


def _digest(line: bytes) -> bytes:
    state = _PREFIXED.copy()
    state.update(line)
    return state.digest()


_FRONT = ("event_id", "type", "schema_version")
# The serialised length of each front field without its value's own bytes (for `event_id`: its
# name, colon and quotes; the id itself is added per line), with the comma that follows it.
_FRONT_BYTES = {"event_id": len(b'"event_id":"",'), "type": len(b'"type":"interaction",')}
_FRONT_BYTES["schema_version"] = len(b'"schema_version":,') + len(str(_VERSION))


def _encode(
    keys: tuple[str, ...],
    rows: list[dict[str, Any]],
    lines: list[bytes],
    stamps: list[datetime],
    default_ts: str,
) -> list[Row] | None:
    """The stored lines of a group that passed, in the per-record path's field order."""
    n = len(rows)
    stamped = "ts" not in keys
    ids: list[str] | None = list(map(itemgetter("event_id"), rows)) if "event_id" in keys else None
    if ids is None:
        ids = derived_ids([datetime.fromisoformat(default_ts)] * n if stamped else stamps, lines)
        if ids is None:
            return None
    days = (
        ["date=" + default_ts[:10]] * n
        if stamped
        else ["date=" + v[:10] for v in map(itemgetter("ts"), rows)]
    )
    front = [k for k in _FRONT if k in keys]
    spliced = tuple(keys[: len(front)]) == tuple(sorted(front, key=keys.index)) and set(
        keys[: len(front)]
    ) == set(front)
    if "latency_ms" in keys and not _only(list(map(itemgetter("latency_ms"), rows)), float):
        spliced = False  # an integer latency is stored as a number with a fraction: rebuild the record
    if spliced and "event_id" in keys:
        # The splice takes each front field's bytes to be as long as its value: an escape in
        # them (an id spelt "\u0041b") makes the line longer, so such a group is rebuilt.
        skip = 1 + sum(_FRONT_BYTES[k] for k in front)
        spliced = not any(b"\\" in line[: skip + len(e)] for e, line in zip(ids, lines, strict=True))
    if spliced:
        stored = _spliced(keys, rows, lines, ids, default_ts)
    else:
        stored = _rebuilt(keys, rows, ids, default_ts)
    return list(zip(ids, days, stored, strict=True))


def _tail(keys: tuple[str, ...], default_ts: str) -> tuple[bytes, bytes]:
    """What enrichment appends to a group's lines, before and after a missing `response_length`."""
    before = b""
    if "ts" not in keys:
        before += b',"ts":' + orjson.dumps(default_ts)
    if "memory_level" not in keys:
        before += b',"memory_level":"global"'
    after = b',"tools_used":[]}\n' if "tools_used" not in keys else b"}\n"
    return before, after


def _spliced(
    keys: tuple[str, ...], rows: list[dict[str, Any]], lines: list[bytes], ids: list[str], default_ts: str
) -> list[bytes]:
    """The stored lines cut from the input bytes: a group whose `event_id`/`type`/`schema_version` come first.

    The validated record differs from the caller's only there (the id first,
    then the type and version) and in what enrichment appends, so the caller's
    other fields are copied as the serialiser wrote them.
    """
    skip = 1 + sum(_FRONT_BYTES[k] for k in _FRONT if k in keys)
    own_id = "event_id" in keys
    before, after = _tail(keys, default_ts)
    head = b'","type":"interaction","schema_version":' + str(_VERSION).encode() + b","
    out: list[bytes] = []
    if "response_length" in keys:
        end = before + after
        for eid, line in zip(ids, lines, strict=True):
            e = eid.encode()
            out.append(b'{"event_id":"' + e + head + line[skip + len(e) if own_id else skip : -1] + end)
    else:
        answers = list(map(len, map(itemgetter("agent_response"), rows)))
        for eid, line, length in zip(ids, lines, answers, strict=True):
            e = eid.encode()
            out.append(
                b"".join(
                    (
                        b'{"event_id":"',
                        e,
                        head,
                        line[skip + len(e) if own_id else skip : -1],
                        before,
                        b',"response_length":',
                        str(length).encode(),
                        after,
                    )
                )
            )
    return out


def _rebuilt(
    keys: tuple[str, ...], rows: list[dict[str, Any]], ids: list[str], default_ts: str
) -> list[bytes]:
    """The stored lines of a group in any field order: each record rebuilt in the validator's order."""
    stamped = "ts" not in keys
    level = "memory_level" not in keys
    tools = "tools_used" not in keys
    latency = "latency_ms" in keys
    dumps = orjson.dumps
    head = {"event_id": "", "type": "interaction", "schema_version": _VERSION}
    out: list[bytes] = []
    for eid, rec in zip(ids, rows, strict=True):
        record = {**head, **rec}
        record["event_id"] = eid
        if latency:
            record["latency_ms"] = float(record["latency_ms"])
        if stamped:
            record["ts"] = default_ts
        if level:
            record["memory_level"] = "global"
        record["response_length"] = len(record["agent_response"])
        if tools:
            record["tools_used"] = []
        out.append(dumps(record) + b"\n")
    return out
