"""Bulk ingest's native fast path: whole blocks parsed into Arrow and checked with Arrow kernels.

The Python columnar path (`tiermem.ingest.columnar`) still turns every line
into Python objects and proves each line canonical by serialising it again;
together that is most of its cost. This path never builds a Python object per
field. For one block of lines it:

1. keeps the lines whose bytes a single regular expression (RE2, run by Arrow
   over the whole block) proves to be in the serialiser's own form, field by
   field: known keys only, each with a value of its declared kind, strings with
   only the escapes the serialiser writes (no `\\u` escape, so no NUL and no
   lone surrogate; no raw control character), integers of at most 18 digits
   (within 64 bits, not negative), `latency_ms` as a plain decimal, `usage`
   with its known counters, `tools_used` a list of strings, `metadata` a flat
   object of strings, integers, booleans and nulls, and no null anywhere else,
   no whitespace outside strings;
2. parses those lines in one call with Arrow's JSON reader and an explicit
   schema. The reader refuses a key given twice in one object ("specified
   twice"), which the regular expression cannot see; a refused line is left
   out and the rest parsed again;
3. checks the columns with Arrow and numpy: the type, the version, a
   non-blank agent, both texts, the level, `response_length` against the
   answer's length, given ids, timestamps (real dates in the log's own form,
   within the accepted years), the line within `max_field_chars` bytes (then
   no string in it can be longer);
4. derives the replay-safe ids a column at a time (milliseconds from the
   timestamp digits, BLAKE2b of each line) and cuts the stored line from the
   input bytes, as the Python columnar path does.

Each row that does not pass goes on to the Python columnar path and then to the
per-record validator, which names the field and the reason, so quarantine
reasons are unchanged. What the checks cannot prove from the columns is left
there as well: a `latency_ms` whose text is not exactly what the serialiser
writes for its value (checked per row: a float has several spellings), the id
and version fields not at the front of the line, an `event_id` without `ts`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from tiermem.registry import MEMORY_LEVELS, STR, TS, USAGE_FIELDS
from tiermem.settings import LimitSettings

from .columnar import FAST_FIELDS, ids_from_ms

__all__ = ["LINE_PATTERN", "native_rows"]

Row = tuple[str, str, bytes]  # (event_id, partition, stored line with its newline)

_VERSION = 1
_STRING = r'"(?:[^"\\\x00-\x1f]|\\["\\bfnrt])*"'
_COUNT = r"(?:0|[1-9][0-9]{0,17})"  # at most 18 digits: within 64 bits
_DECIMAL = r"(?:0|[1-9][0-9]{0,15})\.[0-9]{1,17}"
# An integer in `metadata` may be negative, but never "-0" (stored back as 0).
_SCALAR = rf"(?:{_STRING}|0|-?[1-9][0-9]{{0,17}}|true|false|null)"
_USAGE_KEYS = "|".join(USAGE_FIELDS)
_TEXT_FIELDS = "|".join(sorted(k for k, kind in FAST_FIELDS.items() if kind in (STR, TS)))
_FIELD = (
    rf'"(?:{_TEXT_FIELDS})":{_STRING}'
    rf'|"(?:schema_version|response_length)":{_COUNT}'
    rf'|"latency_ms":{_DECIMAL}'
    rf'|"usage":\{{(?:"(?:{_USAGE_KEYS})":{_COUNT}(?:,"(?:{_USAGE_KEYS})":{_COUNT})*)?\}}'
    rf'|"tools_used":\[(?:{_STRING}(?:,{_STRING})*)?\]'
    rf'|"metadata":\{{(?:{_STRING}:{_SCALAR}(?:,{_STRING}:{_SCALAR})*)?\}}'
)
LINE_PATTERN = rf"^\{{(?:{_FIELD})(?:,(?:{_FIELD}))*\}}$"

_TEXT_COLUMNS = [k for k, kind in FAST_FIELDS.items() if kind in (STR, TS)]
_SCHEMA = pa.schema(
    [(k, pa.string()) for k in _TEXT_COLUMNS]
    + [
        ("schema_version", pa.int64()),
        ("response_length", pa.int64()),
        ("latency_ms", pa.float64()),
        ("usage", pa.struct([(k, pa.int64()) for k in USAGE_FIELDS])),
        ("tools_used", pa.list_(pa.string())),
    ]
)
# `metadata` is free-form: its parse is inferred, only to have the reader refuse repeated keys.
_PARSE = pj.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="infer")
_USED = ["event_id", "type", "ts", "schema_version", "agent_id", "memory_level"]
_USED += ["user_message", "agent_response", "response_length", "latency_ms", "tools_used"]
_TS_FORM = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
_ID_FORM = r"^[0-9A-Za-z_.:\-]{1,128}$"
_ROW_IN_ERROR = re.compile(r"in row (\d+)")
_MAX_RETRIES = 8  # refused lines in one block before the rest of it goes to the slower paths
_DAYS_IN_MONTH = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_HEAD = b'","type":"interaction","schema_version":' + str(_VERSION).encode() + b","
_LATENCY_TEXT = r'"latency_ms":(?P<text>[0-9.]+)[,}]'
_OPEN = b'{"event_id":"'
_TYPE_FIRST = b'{"type":"interaction",'


def native_rows(lines: Sequence[bytes], default_ts: str, limits: LimitSettings) -> dict[int, Row]:
    """The lines (without newline) settled by the native path, by their index in `lines`."""
    if not lines or limits.max_depth < 2:  # a flat `metadata` object is at depth 2
        return {}
    raw = pa.array(lines, pa.binary())
    picked = _candidates(raw, lines, limits)
    if not picked:
        return {}
    table, kept = _parse([lines[i] for i in picked])
    if table is None or not kept:
        return {}
    rows = [picked[k] for k in kept]
    return _settle(table, raw.take(pa.array(rows, pa.int64())), rows, lines, default_ts, limits)


def _candidates(raw: pa.Array, lines: Sequence[bytes], limits: LimitSettings) -> list[int]:
    """Indexes of the lines in the serialiser's form for known fields, valid UTF-8, within the limits."""
    try:
        text = raw.cast(pa.string())
    except pa.ArrowInvalid:  # some line is not UTF-8: leave those to the slower paths
        good = [_utf8(line) for line in lines]
        text = pa.array([line if ok else b"" for line, ok in zip(lines, good, strict=True)], pa.binary())
        text = text.cast(pa.string())
    # A line of at most max_field_chars bytes holds no string longer than that.
    short = pc.less_equal(pc.binary_length(raw), min(limits.max_field_chars, limits.max_record_bytes))
    shaped = pc.match_substring_regex(text, LINE_PATTERN)
    keep = pc.and_(short, shaped).to_numpy(zero_copy_only=False)
    return np.flatnonzero(keep).tolist()


def _utf8(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _parse(lines: list[bytes]) -> tuple[pa.Table | None, list[int]]:
    """The used columns of the lines the reader accepts, and their indexes in `lines`."""
    tables: list[pa.Table] = []
    kept: list[int] = []
    start, retries = 0, 0
    while start < len(lines):
        part = lines[start:]
        try:
            tables.append(_read(part))
            kept.extend(range(start, len(lines)))
            break
        except pa.ArrowInvalid as exc:
            found = _ROW_IN_ERROR.search(str(exc))
            retries += 1
            if found is None or retries > _MAX_RETRIES:
                break
            bad = int(found.group(1))
            if bad >= len(part):
                break
            if bad:  # the lines before the refused one parse on their own
                try:
                    tables.append(_read(part[:bad]))
                except pa.ArrowInvalid:
                    break
                kept.extend(range(start, start + bad))
            start += bad + 1
    if not tables:
        return None, []
    return pa.concat_tables(tables), kept


def _read(lines: list[bytes]) -> pa.Table:
    data = b"\n".join(lines)
    options = pj.ReadOptions(use_threads=False, block_size=max(len(data) + 1, 1 << 16))
    table = pj.read_json(pa.BufferReader(data), read_options=options, parse_options=_PARSE)
    return table.select(_USED)


def _column(table: pa.Table, name: str) -> pa.Array:
    return table.column(name).combine_chunks()


def _settle(
    table: pa.Table,
    raw: pa.Array,
    rows: list[int],
    lines: Sequence[bytes],
    default_ts: str,
    limits: LimitSettings,
) -> dict[int, Row]:
    """Check the columns of the parsed lines (`raw`: their bytes); for those that pass, id, partition, line."""
    col = {name: _column(table, name) for name in _USED}
    ts, own_ids, version = col["ts"], col["event_id"], col["schema_version"]
    ok = _rows_pass(col, limits)
    # A record with its own id and no time is stamped when validated, not from the file.
    ok &= ~(_mask(own_ids.is_valid()) & _mask(ts.is_null()))
    stamps = pc.fill_null(ts, default_ts)
    well_formed = pc.fill_null(pc.match_substring_regex(stamps, _TS_FORM), False)
    stamps = pc.if_else(well_formed, stamps, default_ts)  # fixed width from here on
    ms, real = _stamp_ms(stamps, limits)
    ok &= _mask(well_formed) & real & _latency_pass(col["latency_ms"], raw)
    # The usual line starts with its type and has no id or version of its own: it is cut
    # at a fixed offset. Others are cut where their front fields end (see `_body`).
    usual = _mask(pc.starts_with(raw, _TYPE_FIRST)) & _mask(own_ids.is_null()) & _mask(version.is_null())
    picked = np.flatnonzero(ok)
    if not len(picked):
        return {}
    index = pa.array(picked, pa.int64())
    if usual[picked].all():
        bodies = pc.binary_slice(raw.take(index), len(_TYPE_FIRST), -1)
    else:
        cut = [
            _body(lines[rows[k]], own, has)
            for k, own, has in zip(
                picked.tolist(),
                own_ids.take(index).to_pylist(),
                _mask(version.take(index).is_valid()).tolist(),
                strict=True,
            )
        ]
        keep = [k for k, c in enumerate(cut) if c is not None]
        if len(keep) < len(picked):
            picked, cut = picked[keep], [cut[k] for k in keep]
            index = pa.array(picked, pa.int64())
            if not len(picked):
                return {}
        bodies = pa.array(
            [lines[rows[k]][c:-1] for k, c in zip(picked.tolist(), cut, strict=True)], pa.binary()
        )
    ids = _ids(own_ids.take(index), ms[picked], [lines[rows[k]] for k in picked.tolist()])
    stored = pc.binary_join_element_wise(
        _OPEN, ids.cast(pa.binary()), _HEAD, bodies, _tails(col, index, default_ts), b""
    ).to_pylist()
    days = pc.binary_join_element_wise("date=", pc.utf8_slice_codeunits(stamps.take(index), 0, 10), "")
    return dict(
        zip(
            [rows[k] for k in picked.tolist()],
            zip(ids.to_pylist(), days.to_pylist(), stored, strict=True),
            strict=True,
        )
    )


def _mask(values: pa.Array) -> Any:
    """A boolean Arrow array as numpy (null: False)."""
    return pc.fill_null(values, False).to_numpy(zero_copy_only=False)


def _ids(own: pa.Array, ms: Any, lines: list[bytes]) -> pa.Array:
    """Each row's own `event_id`, or its replay-safe id derived from its time and line."""
    missing = _mask(own.is_null())
    if not missing.any():
        return own
    where = np.flatnonzero(missing)
    derived = ids_from_ms(ms[where], [lines[k] for k in where.tolist()])
    if len(where) == len(own):
        return pa.array(derived, pa.string())
    filled = own.to_pylist()
    for k, eid in zip(where.tolist(), derived, strict=True):
        filled[k] = eid
    return pa.array(filled, pa.string())


def _rows_pass(col: dict[str, pa.Array], limits: LimitSettings) -> Any:
    """Per row: every column check except the timestamp's (a numpy bool array)."""
    answers, users = col["agent_response"], col["user_message"]
    checks = [
        pc.equal(col["type"], "interaction"),
        pc.or_kleene(col["schema_version"].is_null(), pc.equal(col["schema_version"], _VERSION)),
        # Non-blank for sure when it holds a visible ASCII character (others: the per-record path).
        pc.match_substring_regex(col["agent_id"], "[!-~]"),
        users.is_valid(),
        answers.is_valid(),
        pc.invert(pc.and_(pc.equal(users, ""), pc.equal(answers, ""))),
        pc.or_kleene(col["memory_level"].is_null(), pc.is_in(col["memory_level"], pa.array(MEMORY_LEVELS))),
        pc.or_kleene(
            col["response_length"].is_null(), pc.equal(col["response_length"], pc.utf8_length(answers))
        ),
        pc.or_kleene(col["event_id"].is_null(), pc.match_substring_regex(col["event_id"], _ID_FORM)),
    ]
    ok = np.ones(len(answers), dtype=bool)
    for check in checks:
        ok &= pc.fill_null(check, False).to_numpy(zero_copy_only=False)
    return ok


def _stamp_ms(stamps: pa.Array, limits: LimitSettings) -> tuple[Any, Any]:
    """(milliseconds since 1970 as the per-record derivation computes them, whether each date is real).

    `stamps` are all `YYYY-MM-DDTHH:MM:SS.mmmZ`, 24 bytes each, so the digits are
    read from the array's buffer as a matrix.
    """
    n = len(stamps)
    offsets = np.frombuffer(stamps.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * stamps.offset)
    text = np.frombuffer(stamps.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[0] + 24 * n]
    d = text.reshape(n, 24).astype(np.int64) - 48

    def number(a: int, b: int) -> Any:
        value = np.zeros(n, dtype=np.int64)
        for k in range(a, b):
            value = value * 10 + d[:, k]
        return value

    year, month, day = number(0, 4), number(5, 7), number(8, 10)
    hour, minute, second, milli = number(11, 13), number(14, 16), number(17, 19), number(20, 23)
    leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
    month_ok = (month >= 1) & (month <= 12)
    last = _DAYS_IN_MONTH[np.where(month_ok, month, 0)] + (leap & (month == 2))
    real = (
        month_ok
        & (day >= 1)
        & (day <= last)
        & (hour < 24)
        & (minute < 60)
        & (second < 60)
        & (year >= max(limits.min_year, 1970))
        & (year <= limits.max_year)
    )
    # Days since 1970 from the civil date (proleptic Gregorian), then the same float steps as
    # `int(datetime.timestamp() * 1000)`: microseconds / 1e6, times 1000, truncated.
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
    micros = (((days * 86400 + hour * 3600 + minute * 60 + second) * 1000) + milli) * 1000
    ms = ((micros / 1e6) * 1000.0).astype(np.int64)
    return ms, real & (ms >= 0) & (ms < 1 << 48)


def _tails(col: dict[str, pa.Array], index: pa.Array, default_ts: str) -> pa.Array:
    """What enrichment appends to each row: `ts`, `memory_level`, `response_length`, `tools_used` when absent."""
    lengths = pc.cast(pc.utf8_length(col["agent_response"].take(index)), pa.string()).cast(pa.binary())
    return pc.binary_join_element_wise(
        pc.if_else(col["ts"].take(index).is_null(), b',"ts":' + orjson.dumps(default_ts), b""),
        pc.if_else(col["memory_level"].take(index).is_null(), b',"memory_level":"global"', b""),
        pc.if_else(
            col["response_length"].take(index).is_null(),
            pc.binary_join_element_wise(b',"response_length":', lengths, b""),
            b"",
        ),
        pc.if_else(col["tools_used"].take(index).is_null(), b',"tools_used":[]}\n', b"}\n"),
        b"",
    )


def _latency_pass(latency: pa.Array, raw: pa.Array) -> Any:
    """Per row: no `latency_ms`, or one spelled exactly as the serialiser writes its value.

    The serialiser writes the shortest decimal that reads back as the same
    number, as Arrow's cast to text does; Arrow leaves out a `.0` the
    serialiser keeps, and the two differ in notation below 0.001 (left to the
    other paths). The text in the line is its first `"latency_ms":` followed by
    digits: a `metadata` key of that name holds no fraction (only integers are
    allowed there), so it can never equal a value with its point.
    """
    shown = pc.cast(latency, pa.string())
    canonical = pc.if_else(
        pc.match_substring(shown, "."), shown, pc.binary_join_element_wise(shown, ".0", "")
    ).cast(pa.binary())
    plain = pc.and_(
        pc.invert(pc.match_substring(shown, "e")),
        pc.or_(pc.equal(latency, 0.0), pc.greater_equal(latency, 0.001)),
    )
    written = pc.struct_field(pc.extract_regex(raw, _LATENCY_TEXT), 0)
    exact = pc.and_(plain, pc.equal(written, canonical))
    return _mask(latency.is_null()) | _mask(exact)


_TYPE = b'"type":"interaction",'
_SV = b'"schema_version":' + str(_VERSION).encode() + b","


def _body(line: bytes, own_id: str | None, has_version: bool) -> int | None:
    """Where the caller's own fields start: after `event_id`, `type`, `schema_version` (present ones).

    The stored record puts those three first in a fixed order, so the line can be
    cut only when they are the first fields, in any order; otherwise None.
    """
    wanted = [_TYPE]
    if own_id is not None:
        wanted.append(b'"event_id":"' + own_id.encode() + b'",')
    if has_version:
        wanted.append(_SV)
    pos = 1
    while wanted:
        for key in wanted:
            if line.startswith(key, pos):
                pos += len(key)
                wanted.remove(key)
                break
        else:
            return None
    return pos if pos < len(line) - 1 else None
