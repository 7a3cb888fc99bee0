"""Event validation: field checks, limits, the caller/internal gate, enrichment, upcasting.

What each event type holds is declared in `tiermem.registry`; this module
checks records against those declarations. The stored record is a flat JSON
object. Every event has the common fields (`event_id`, `type`, `ts`,
`schema_version`, `agent_id`); each type declares its own fields. Unknown
top-level fields are not dropped: they move to `extra` so nothing a caller sent
is lost. Records written under an older schema version are upcast on read, so
old files stay readable as the schema grows.

Who is writing matters: `validate(record, writer=CALLER)` (ingest, append,
record_turn, HTTP) accepts only the types the registry marks as caller events;
tiermem's own commands and jobs write with `writer=INTERNAL`. Limits
(`LimitSettings`: field length, nesting depth, timestamp years) apply to both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from tiermem.attachments import check_attachments
from tiermem.compiled_records import check_interaction
from tiermem.errors import ValidationError
from tiermem.ids import format_ts, new_event_id, parse_ts, utcnow
from tiermem.registry import (
    BOOL,
    CALLER,
    CALLER_TYPES,
    COMMON_FIELDS,
    EVENT_TYPES,
    FLOAT,
    INT,
    INTERACTION_FIELDS,
    INTERNAL,
    JSON,
    MEMORY_LEVELS,
    SCHEMA_VERSION,
    SCOPES,
    STR,
    STREAMS,
    STRLIST,
    TS,
    USAGE,
    USAGE_FIELDS,
    EventType,
    stream_fields,
)
from tiermem.settings import LimitSettings

__all__ = [
    "BOOL",
    "CALLER",
    "CALLER_TYPES",
    "COMMON_FIELDS",
    "DEFAULT_LIMITS",
    "EVENT_TYPES",
    "FLOAT",
    "INT",
    "INTERNAL",
    "JSON",
    "MAX_TEXT",
    "MEMORY_LEVELS",
    "SCHEMA_VERSION",
    "SCOPES",
    "STR",
    "STREAMS",
    "STRLIST",
    "TS",
    "USAGE",
    "USAGE_FIELDS",
    "EventType",
    "check_json_value",
    "stream_fields",
    "stream_of",
    "upcast",
    "validate",
    "validate_full",
]

DEFAULT_LIMITS = LimitSettings()
MAX_TEXT = (
    DEFAULT_LIMITS.max_field_chars
)  # the default per-string limit (jobs check their own output with it)
_INT64 = 2**63
_SURROGATE = re.compile("[\ud800-\udfff]")


def stream_of(event_type: str) -> str:
    try:
        return EVENT_TYPES[event_type].stream
    except KeyError:
        raise ValidationError(
            "type", f"unknown event type {event_type!r}; known: {sorted(EVENT_TYPES)}"
        ) from None


# ---------------------------------------------------------------- validation


def _shown(value: Any) -> str:
    """A value quoted in an error message: never more than a short line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_text(name: str, value: str, limits: LimitSettings) -> str:
    """Any string anywhere in a record: bounded, no NUL, no lone surrogate."""
    if len(value) > limits.max_field_chars:
        raise ValidationError(name, f"longer than max_field_chars = {limits.max_field_chars} ({len(value)})")
    if "\x00" in value:
        raise ValidationError(name, "contains a NUL character")
    if not value.isascii() and _SURROGATE.search(value):
        raise ValidationError(name, "contains a lone surrogate (not valid Unicode text)")
    return value


def _check_str(name: str, value: Any, limits: LimitSettings) -> str:
    if not isinstance(value, str):
        raise ValidationError(name, f"expected a string, got {type(value).__name__}")
    return _check_text(name, value, limits)


def _check_int(name: str, value: Any, limits: LimitSettings) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(name, f"expected an integer, got {type(value).__name__}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValidationError(name, f"expected an integer, got {value!r}")
    if not -_INT64 <= int(value) < _INT64:
        raise ValidationError(name, "integer out of 64-bit range")
    return int(value)


def _check_float(name: str, value: Any, limits: LimitSettings) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(name, f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValidationError(name, f"expected a finite number, got {value!r}")
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise ValidationError(name, "number out of 64-bit range")
    return float(value)


def _check_bool(name: str, value: Any, limits: LimitSettings) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(name, f"expected true or false, got {type(value).__name__}")
    return value


_BOUNDS: dict[tuple[int, int], tuple[str, str]] = {}


def _year_bounds(limits: LimitSettings) -> tuple[str, str]:
    """The accepted years as the 4-digit prefixes of timestamps, for the fast path's string compare."""
    key = (limits.min_year, limits.max_year)
    bounds = _BOUNDS.get(key)
    if bounds is None:
        bounds = _BOUNDS[key] = (f"{key[0]:04d}", f"{key[1]:04d}")
    return bounds


def _check_ts(name: str, value: Any, limits: LimitSettings) -> str:
    try:
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValidationError(name, "naive datetime; give a UTC offset")
            parsed = value.astimezone(UTC)
        elif not isinstance(value, str):
            raise ValidationError(name, f"expected an ISO-8601 timestamp string, got {type(value).__name__}")
        elif len(value) > 64:
            raise ValidationError(name, f"not an ISO-8601 timestamp ({len(value)} characters)")
        else:
            parsed = parse_ts(value)  # in UTC: the year checked is the partition the event lands in
    except (ValueError, OverflowError) as exc:
        raise ValidationError(
            name, f"not an ISO-8601 timestamp with offset: {_shown(value)} ({exc})"
        ) from None
    if not limits.min_year <= parsed.year <= limits.max_year:
        raise ValidationError(
            name, f"year {parsed.year} outside the accepted range {limits.min_year}-{limits.max_year} (UTC)"
        )
    return format_ts(parsed)


def _check_strlist(name: str, value: Any, limits: LimitSettings) -> list[str]:
    if not isinstance(value, list):
        raise ValidationError(name, f"expected a list of strings, got {type(value).__name__}")
    for i, item in enumerate(value):
        _check_str(f"{name}[{i}]", item, limits)
    return list(value)


def check_json_value(name: str, value: Any, limits: LimitSettings, depth: int = 2) -> None:
    """A free-form JSON value: JSON types only, finite numbers, 64-bit integers, bounded strings and depth.

    `depth` is the nesting level of `value` itself (a field of the record is at 2).
    """
    if depth > limits.max_depth:
        root = name.split(".", 1)[0].split("[", 1)[0]
        raise ValidationError(root, f"nested deeper than max_depth = {limits.max_depth}")
    kind = type(value)
    if kind is str:
        _check_text(name, value, limits)
    elif kind is dict:
        _check_json_object(name, value, limits, depth)
    elif kind is list or kind is tuple:
        for i, item in enumerate(value):
            check_json_value(f"{name}[{i}]", item, limits, depth + 1)
    elif kind is int:
        if not -_INT64 <= value < _INT64:
            raise ValidationError(name, "integer out of 64-bit range")
    elif kind is float:
        if not math.isfinite(value):
            raise ValidationError(name, f"expected a finite number, got {value!r}")
    elif value is not None and kind is not bool:
        raise ValidationError(name, f"{kind.__name__} is not a JSON value")


def _check_json_object(name: str, value: dict[Any, Any], limits: LimitSettings, depth: int) -> None:
    """An object's keys and values; scalar values are checked here, nested ones by `check_json_value`."""
    limit = limits.max_field_chars
    for key, item in value.items():
        # Names for error messages are only built when there is an error (this runs per key).
        if type(key) is not str:
            raise ValidationError(name, f"object key {_shown(key)} is not a string")
        if len(key) > limit or "\x00" in key or not key.isascii():
            _check_text(f"{name}.<key>", key, limits)
        kind = type(item)
        if kind is str:
            if len(item) > limit or "\x00" in item or not item.isascii():
                _check_text(f"{name}.{key}", item, limits)
        elif kind is int:
            if not -_INT64 <= item < _INT64:
                raise ValidationError(f"{name}.{key}", "integer out of 64-bit range")
        elif kind is float:  # a scalar like the others: no level of nesting of its own
            if not math.isfinite(item):
                raise ValidationError(f"{name}.{key}", f"expected a finite number, got {item!r}")
        elif item is not None and kind is not bool:
            check_json_value(f"{name}.{key}", item, limits, depth + 1)


def _check_json(name: str, value: Any, limits: LimitSettings) -> Any:
    if not isinstance(value, dict | list):
        raise ValidationError(name, f"expected an object or list, got {type(value).__name__}")
    check_json_value(name, value, limits)
    return value


def _check_usage(name: str, value: Any, limits: LimitSettings) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ValidationError(name, f"expected an object with {', '.join(USAGE_FIELDS)}")
    unknown = set(value) - set(USAGE_FIELDS)
    if unknown:
        raise ValidationError(
            f"{name}.{sorted(map(str, unknown))[0]}", f"unknown usage field; known: {', '.join(USAGE_FIELDS)}"
        )
    out: dict[str, int] = {}
    for key, item in value.items():
        if item is None:
            continue
        n = _check_int(f"{name}.{key}", item, limits)
        if n < 0:
            raise ValidationError(f"{name}.{key}", f"must be >= 0, got {n}")
        out[key] = n
    return out


CHECKERS: dict[str, Callable[[str, Any, LimitSettings], Any]] = {
    STR: _check_str,
    INT: _check_int,
    FLOAT: _check_float,
    BOOL: _check_bool,
    TS: _check_ts,
    STRLIST: _check_strlist,
    JSON: _check_json,
    USAGE: _check_usage,
}


def upcast(record: Mapping[str, Any]) -> dict[str, Any]:
    """Bring a record of an older schema version to the current one.

    Version 0 is the original log line (camelCase `agentId`, `timestamp`,
    `usage.inputTokens`, no `type`): files written that way stay readable.
    """
    rec = dict(record)
    version = rec.get("schema_version", 0 if "agentId" in rec or "timestamp" in rec else SCHEMA_VERSION)
    if version == 0 and type(version) is int:
        if "agentId" in rec:
            rec.setdefault("agent_id", rec.pop("agentId"))
        if "timestamp" in rec:
            rec.setdefault("ts", rec.pop("timestamp"))
        usage = rec.get("usage")
        if isinstance(usage, dict):
            renames = {
                "inputTokens": "input_tokens",
                "outputTokens": "output_tokens",
                "cacheReadTokens": "cache_read_tokens",
                "toolCalls": "tool_calls",
            }
            rec["usage"] = {renames.get(k, k): v for k, v in usage.items()}
        rec.setdefault("type", "interaction")
        rec["schema_version"] = 1
    elif type(version) is int and version > SCHEMA_VERSION:
        raise ValidationError(
            "schema_version", f"{version} is newer than this tiermem ({SCHEMA_VERSION}); upgrade"
        )
    return rec


def validate(
    record: Any,
    *,
    now: datetime | None = None,
    writer: str = INTERNAL,
    limits: LimitSettings = DEFAULT_LIMITS,
) -> dict[str, Any]:
    """Validate, normalise and enrich one record; raise ValidationError naming the field.

    `writer`: CALLER for records from outside (only caller event types pass),
    INTERNAL for tiermem's own commands and jobs. Enrichment at write time:
    `ts` (now, UTC) and `event_id` when missing, `schema_version`, and for
    interactions `response_length` and the enrichment defaults (`tools_used` =
    [], `memory_level` = "global").
    """
    if type(record) is dict and record.get("type") == "interaction":
        fast = check_interaction(record, limits)  # compiled, when built
        if fast is None:
            fast = _fast_interaction(record, now, limits)
        if fast is not None:
            return fast
    return validate_full(record, now=now, writer=writer, limits=limits)


def _refuse_for_caller(spec: EventType) -> ValidationError:
    return ValidationError(
        "type",
        f"{spec.name!r} is an internal event, written only by {', '.join(spec.writers)}; "
        f"callers may send: {', '.join(CALLER_TYPES)}",
    )


def _type_of(rec: Mapping[str, Any], writer: str) -> EventType:
    etype = rec.get("type")
    if etype is None:
        raise ValidationError("type", "missing")
    if not isinstance(etype, str):
        raise ValidationError("type", f"expected a string, got {type(etype).__name__}")
    spec = EVENT_TYPES.get(etype)
    if spec is None:
        raise ValidationError(
            "type", f"unknown event type {_shown(etype)}; known: {', '.join(sorted(EVENT_TYPES))}"
        )
    if writer == CALLER and spec.origin != CALLER:
        raise _refuse_for_caller(spec)
    sv = rec.get("schema_version", spec.version)
    if type(sv) is not int or sv != spec.version:
        raise ValidationError("schema_version", f"expected {spec.version}, got {_shown(sv)}")
    return spec


def validate_full(
    record: Any,
    *,
    now: datetime | None = None,
    writer: str = INTERNAL,
    limits: LimitSettings = DEFAULT_LIMITS,
) -> dict[str, Any]:
    """The general validation path (every type, every version); `validate` may take a shortcut."""
    _check_field_names(record)
    rec = upcast(record)
    spec = _type_of(rec, writer)
    out, extra = _checked_fields(rec, spec, limits)
    _check_present(out, spec)
    _stamp(out, now)
    _check_type_rules(out, spec)
    if extra:
        out["extra"] = extra
    return _id_first(out)


def _check_field_names(record: Any) -> None:
    if not isinstance(record, Mapping):
        raise ValidationError("<record>", f"expected a JSON object, got {type(record).__name__}")
    for key in record:
        if not isinstance(key, str):
            raise ValidationError("<record>", f"field name {_shown(key)} is not a string")


def _checked_fields(
    rec: dict[str, Any], spec: EventType, limits: LimitSettings
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The declared fields checked and normalised, and `extra`: the caller's own plus every unknown field."""
    out: dict[str, Any] = {"type": spec.name, "schema_version": spec.version}
    if "extra" in rec and not isinstance(rec["extra"], dict | type(None)):
        raise ValidationError("extra", "expected an object")
    extra: dict[str, Any] = dict(rec.get("extra") or {})
    if extra:
        check_json_value("extra", extra, limits)
    declared = {**COMMON_FIELDS, **spec.fields}
    for name, value in rec.items():
        if name in ("type", "schema_version", "extra"):
            continue
        kind = declared.get(name)
        if kind is None:
            _check_text("<field name>", name, limits)
            check_json_value(name, value, limits)
            extra[name] = value  # kept, not dropped
            continue
        if value is None:
            continue
        out[name] = CHECKERS[kind](name, value, limits)
    return out, extra


def _check_present(out: dict[str, Any], spec: EventType) -> None:
    """A non-blank agent (where the type needs one) and every required field."""
    if "agent_id" not in out:
        if spec.agent_required:
            raise ValidationError("agent_id", "missing")
    elif not out["agent_id"].strip():
        raise ValidationError("agent_id", "empty")
    for name in spec.required:
        if name not in out:
            raise ValidationError(name, "missing")


def _stamp(out: dict[str, Any], now: datetime | None) -> None:
    """A given event id checked; the time (now when missing) normalised; a missing id made from it."""
    if "event_id" in out:
        eid = out["event_id"]
        if not eid or len(eid) > 128 or any(not c.isprintable() or c.isspace() or c in "/\\" for c in eid):
            raise ValidationError("event_id", "must be 1-128 printable characters without spaces or slashes")
    stamp = parse_ts(out["ts"]) if "ts" in out else (now or utcnow())
    out["ts"] = format_ts(stamp)
    if "event_id" not in out:
        out["event_id"] = new_event_id(stamp)


def _check_type_rules(out: dict[str, Any], spec: EventType) -> None:
    """What a type asks beyond field types: interaction enrichment, levels, importance range, scope."""
    if spec.name == "interaction":
        _enrich_interaction(out)
    elif spec.name == "memory_transition":
        for name in ("from_level", "to_level"):
            if out[name] not in MEMORY_LEVELS:
                raise ValidationError(
                    name, f"expected one of {', '.join(MEMORY_LEVELS)}, got {_shown(out[name])}"
                )
    elif spec.name == "episode" and not 1 <= out["importance"] <= 10:
        raise ValidationError("importance", f"must be 1-10, got {out['importance']}")
    if "scope" in out and out["scope"] not in SCOPES:
        raise ValidationError("scope", f"expected one of {', '.join(SCOPES)}, got {_shown(out['scope'])}")


def _id_first(out: dict[str, Any]) -> dict[str, Any]:
    # The id goes first on the stored line so that readers of raw lines (the id
    # index, seal verification) can find it without parsing the record.
    eid = out.pop("event_id")
    return {"event_id": eid, **out}


def _enrich_interaction(out: dict[str, Any]) -> None:
    level = out.setdefault("memory_level", "global")
    if level not in MEMORY_LEVELS:
        raise ValidationError(
            "memory_level", f"expected one of {', '.join(MEMORY_LEVELS)}, got {_shown(level)}"
        )
    if not out["user_message"] and not out["agent_response"]:
        raise ValidationError("user_message", "both user_message and agent_response are empty")
    actual = len(out["agent_response"])
    if "response_length" in out and out["response_length"] != actual:
        raise ValidationError(
            "response_length", f"says {out['response_length']} but agent_response has {actual} characters"
        )
    out["response_length"] = actual
    if "latency_ms" in out and out["latency_ms"] < 0:
        raise ValidationError("latency_ms", f"must be >= 0, got {out['latency_ms']}")
    out.setdefault("tools_used", [])
    if "attachments" in out:
        out["attachments"] = check_attachments(out["attachments"])


# ------------------------------------------------------------ the fast path
# Bulk ingest validates hundreds of thousands of interactions a second, so the
# common case (a current-version interaction whose fields all have exactly the
# expected types) is checked in one tight loop. Anything unusual returns None
# and takes `validate_full`, which produces the error that names the field; the
# two paths give identical results for what the fast one accepts (tested).
_FAST_ID = re.compile(r"[0-9A-Za-z_.:\-]{1,128}")
_FAST_KINDS: dict[str, str] = {**COMMON_FIELDS, **INTERACTION_FIELDS}
_FAST_STR = frozenset(name for name, kind in _FAST_KINDS.items() if kind == STR and name != "type")
_INTERACTION_VERSION = EVENT_TYPES["interaction"].version


def _fast_ts(value: str, bounds: tuple[str, str]) -> bool:
    if len(value) != 24 or value[23] != "Z" or value[10] != "T" or value[19] != ".":
        return False
    if not bounds[0] <= value[:4] <= bounds[1]:
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _fast_interaction(
    rec: dict[str, Any], now: datetime | None, limits: LimitSettings
) -> dict[str, Any] | None:
    out: dict[str, Any] = {"type": "interaction", "schema_version": _INTERACTION_VERSION}
    limit = limits.max_field_chars
    bounds = _year_bounds(limits)
    for name, value in rec.items():
        if type(value) is str:  # most fields: dispatch on the value's type first
            if name in _FAST_STR:
                if (
                    "\x00" in value
                    or len(value) > limit
                    or (not value.isascii() and _SURROGATE.search(value))
                ):
                    return None
                if name == "event_id" and not _FAST_ID.fullmatch(value):
                    return None
            elif name == "ts":
                if not _fast_ts(value, bounds):
                    return None
            elif name == "type":
                continue
            else:
                return None
            out[name] = value
            continue
        value = _fast_value(name, value, limits)
        if value is _SKIP:
            continue
        if value is None:
            return None
        out[name] = value
    return _fast_finish(out, now)


# What `_fast_value` returns for a field that is valid but not stored (a null, or
# the schema version already in the output); None means "take the full path".
_SKIP: Any = object()


def _fast_value(name: str, value: Any, limits: LimitSettings) -> Any:
    """A field that is not a string, normalised as the full path would; None when that path must decide."""
    if value is None:
        # A known field left null is skipped; an unknown one is kept in `extra`, even when null.
        # A null schema version is refused by the full path ("expected 1"): it decides.
        return _SKIP if name in _FAST_KINDS and name != "schema_version" else None
    kind = _FAST_KINDS.get(name)
    if kind is INT:
        if type(value) is not int or not -_INT64 <= value < _INT64:
            return None
        if name == "schema_version":
            return _SKIP if value == _INTERACTION_VERSION else None
        return value
    if kind is FLOAT:
        if type(value) is int and -_INT64 <= value < _INT64:
            return float(value)
        return value if type(value) is float and math.isfinite(value) else None
    if kind is STRLIST:
        return _fast_strlist(value, limits.max_field_chars)
    if kind is USAGE:
        return _fast_usage(value)
    if kind is JSON:
        return _fast_json(name, value, limits)
    return None  # unknown field (goes to `extra`), or a value of an unexpected type


def _fast_strlist(value: Any, limit: int) -> list[str] | None:
    if type(value) is not list:
        return None
    for item in value:
        if type(item) is not str or "\x00" in item or len(item) > limit:
            return None
        if not item.isascii() and _SURROGATE.search(item):
            return None
    return list(value)


def _fast_usage(value: Any) -> dict[str, int] | None:
    if type(value) is not dict:
        return None
    for key, n in value.items():
        if key not in USAGE_FIELDS or type(n) is not int or n < 0 or n >= _INT64:
            return None
    return dict(value)


def json_container_passes(name: str, value: Any, limits: LimitSettings) -> bool:
    """Whether `value` is a dict or list within the JSON limits (the fast paths' check: no error built)."""
    if type(value) is not dict and type(value) is not list:
        return False
    try:
        check_json_value(name, value, limits)
    except ValidationError:
        return False
    return True


def _fast_json(name: str, value: Any, limits: LimitSettings) -> Any:
    return value if json_container_passes(name, value, limits) else None


def _fast_finish(out: dict[str, Any], now: datetime | None) -> dict[str, Any] | None:
    """The record-level rules of the full path: both texts given, a non-blank agent, time, id, enrichment."""
    if "user_message" not in out or "agent_response" not in out:
        return None
    agent = out.get("agent_id")
    if agent is None or not agent.strip():
        return None
    if "ts" not in out:
        stamp = now or utcnow()
        out["ts"] = format_ts(stamp)
    if "event_id" not in out:
        out["event_id"] = new_event_id(parse_ts(out["ts"]))
    try:
        _enrich_interaction(out)
    except ValidationError:
        return None
    return _id_first(out)
