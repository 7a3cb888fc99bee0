"""Event schema, version 1: field specs, validation, enrichment and upcasting.

The stored record is a flat JSON object. Every event has the common fields
(`event_id`, `type`, `ts`, `schema_version`, `agent_id`); each type declares
its own fields below. Unknown top-level fields are not dropped: they move to
`extra` so nothing a caller sent is lost. Records written under an older
schema version are upcast on read, so old files stay readable as the schema grows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tiermem.errors import ValidationError
from tiermem.ids import format_ts, new_event_id, parse_ts, utcnow

SCHEMA_VERSION = 1
MEMORY_LEVELS = ("global", "project", "task")
SCOPES = ("system", "agent_type", "project", "override")
MAX_TEXT = 1_000_000  # one field of one record; larger is a caller bug, not a turn

# Field kinds. Each maps to one Arrow type and one DuckDB type (see catalog/seal).
STR, INT, FLOAT, BOOL, TS, STRLIST, JSON, USAGE = (
    "str",
    "int",
    "float",
    "bool",
    "ts",
    "strlist",
    "json",
    "usage",
)

COMMON_FIELDS: dict[str, str] = {
    "event_id": STR,
    "type": STR,
    "ts": TS,
    "schema_version": INT,
    "agent_id": STR,
}

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "tool_calls")


@dataclass(frozen=True)
class EventType:
    name: str
    stream: str
    fields: Mapping[str, str]  # declared fields beyond the common ones
    required: tuple[str, ...] = ()
    agent_required: bool = True


def _t(
    name: str, stream: str, fields: dict[str, str], required: tuple[str, ...] = (), agent: bool = True
) -> EventType:
    return EventType(name, stream, fields, required, agent)


INTERACTION_FIELDS: dict[str, str] = {
    "agent_type": STR,
    "project_id": STR,
    "task_id": STR,
    "session_id": STR,
    "channel": STR,
    "user": STR,
    "memory_level": STR,
    "user_message": STR,
    "agent_response": STR,
    "model": STR,
    "usage": USAGE,
    "tools_used": STRLIST,
    "selection_reason": STR,
    "approval_status": STR,
    "latency_ms": FLOAT,
    "response_length": INT,
    "metadata": JSON,
}

EVENT_TYPES: dict[str, EventType] = {
    t.name: t
    for t in (
        _t("interaction", "interactions", INTERACTION_FIELDS, ("user_message", "agent_response")),
        _t(
            "memory_transition",
            "transitions",
            {
                "from_level": STR,
                "to_level": STR,
                "summary": STR,
                "project_id": STR,
                "task_id": STR,
                "session_id": STR,
                "source_event_ids": STRLIST,
            },
            ("from_level", "to_level", "summary"),
        ),
        _t(
            "episode",
            "episodes",
            {
                "name": STR,
                "summary": STR,
                "key_quotes": JSON,  # [{"text": verbatim quote, "event_id": turn it came from}]
                "participants": STRLIST,
                "start_ts": TS,
                "end_ts": TS,
                "importance": INT,
                "important": BOOL,
                "emotional_context": STR,
                "kind": STR,  # "episode" | "session_summary" | "task_summary"
                "scorer": STR,  # "offline" | "claude"
                "project_id": STR,
                "source_event_ids": STRLIST,
                "metadata": JSON,
            },
            ("name", "summary", "start_ts", "end_ts", "importance", "source_event_ids"),
        ),
        _t(
            "knowledge_proposed",
            "knowledge",
            {
                "agent_type": STR,
                "project_id": STR,
                "scope": STR,
                "category": STR,  # "user" | "domain" | "personal" | free-form
                "topic": STR,
                "key": STR,
                "content": STR,
                "participant": STR,
                "confidence": FLOAT,
                "importance": INT,
                "origin": STR,  # "compressor" | "agent" | "gap_fill" | "user"
                "is_correction": BOOL,
                "corrects": STR,
                "evidence": JSON,
                "source_event_ids": STRLIST,
            },
            ("content",),
        ),
        _t(
            "knowledge_decided",
            "knowledge",
            {
                "proposal_id": STR,
                "decision": STR,  # created|touched|merged|superseded|deactivated|promoted|archived|rejected|pending|approved
                "fact_id": STR,
                "content": STR,
                "previous_content": STR,
                "scope": STR,
                "category": STR,
                "topic": STR,
                "key": STR,
                "participant": STR,
                "project_id": STR,
                "agent_type": STR,
                "status": STR,
                "similarity": FLOAT,
                "note": STR,
                "decided_by": STR,
                "source_event_ids": STRLIST,
                # Added by the evolver (optional): per-fact revision (latest wins),
                # the full text behind a summary (seed 001 §9), and lifecycle inputs.
                "revision": INT,
                "original": STR,
                "importance": INT,
                "confidence": FLOAT,
                "origin": STR,
                "seen_projects": STRLIST,
            },
            ("decision",),
        ),
        _t(
            "fact_set",
            "knowledge",
            {
                "fact_id": STR,
                "key": STR,
                "value": STR,
                "scope": STR,
                "agent_type": STR,
                "project_id": STR,
                "participant": STR,
                "source": STR,  # "user" | "agent" | "system"
                "source_event_ids": STRLIST,
            },
            ("key", "value"),
        ),
        _t(
            "fact_removed",
            "knowledge",
            {"fact_id": STR, "key": STR, "scope": STR, "project_id": STR, "agent_type": STR, "reason": STR},
            ("key",),
        ),
        _t(
            "identity_set",
            "knowledge",
            {"content": STR, "participant": STR, "source": STR},
            ("content",),
        ),
        _t(
            "relationship_updated",
            "relationships",
            {
                "participant": STR,
                "summary": STR,
                "rapport": FLOAT,
                "trust": FLOAT,
                "last_spoke_ts": TS,
                "interactions": INT,
                "source_event_ids": STRLIST,
            },
            ("participant", "summary"),
        ),
        _t(
            "retrieval",
            "retrievals",
            {
                "query": STR,
                "tool": STR,
                "participant": STR,
                "item_ids": STRLIST,
                "scores": JSON,
                "tokens": INT,
                "reason": STR,
                "session_id": STR,
            },
            ("tool",),
        ),
        _t(
            "session_ended",
            "sessions",
            {"session_id": STR, "user": STR, "reason": STR},
            ("session_id",),
        ),
        _t(
            "erasure",
            "erasures",
            # What to erase, never the erased content itself.
            {
                "target_kind": STR,
                "target": STR,
                "requested_by": STR,
                "reason": STR,
                "erased_event_ids": STRLIST,
            },
            ("target_kind", "target"),
            agent=False,
        ),
    )
}

STREAMS: tuple[str, ...] = tuple(dict.fromkeys(t.stream for t in EVENT_TYPES.values()))


def stream_fields(stream: str) -> dict[str, str]:
    """All columns of a stream: common fields, every type's fields, then `extra`."""
    cols = dict(COMMON_FIELDS)
    for t in EVENT_TYPES.values():
        if t.stream == stream:
            for name, kind in t.fields.items():
                cols.setdefault(name, kind)
    cols["extra"] = JSON
    return cols


def stream_of(event_type: str) -> str:
    try:
        return EVENT_TYPES[event_type].stream
    except KeyError:
        raise ValidationError(
            "type", f"unknown event type {event_type!r}; known: {sorted(EVENT_TYPES)}"
        ) from None


# ---------------------------------------------------------------- validation


def _check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValidationError(name, f"expected a string, got {type(value).__name__}")
    if len(value) > MAX_TEXT:
        raise ValidationError(name, f"longer than {MAX_TEXT} characters ({len(value)})")
    if "\x00" in value:
        raise ValidationError(name, "contains a NUL character")
    return value


def _check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(name, f"expected an integer, got {type(value).__name__}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise ValidationError(name, f"expected an integer, got {value!r}")
    if not -(2**63) <= int(value) < 2**63:
        raise ValidationError(name, "integer out of 64-bit range")
    return int(value)


def _check_float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(name, f"expected a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValidationError(name, f"expected a finite number, got {value!r}")
    return float(value)


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(name, f"expected true or false, got {type(value).__name__}")
    return value


def _check_ts(name: str, value: Any) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError(name, "naive datetime; give a UTC offset")
        return format_ts(value)
    if not isinstance(value, str):
        raise ValidationError(name, f"expected an ISO-8601 timestamp string, got {type(value).__name__}")
    try:
        parsed = parse_ts(value)
    except ValueError as exc:
        raise ValidationError(name, f"not an ISO-8601 timestamp with offset: {value!r} ({exc})") from None
    if not 1970 <= parsed.year <= 9999:
        raise ValidationError(name, f"year {parsed.year} out of range")
    return format_ts(parsed)


def _check_strlist(name: str, value: Any) -> list[str]:
    if not isinstance(value, list):
        raise ValidationError(name, f"expected a list of strings, got {type(value).__name__}")
    for i, item in enumerate(value):
        _check_str(f"{name}[{i}]", item)
    return list(value)


def _check_json(name: str, value: Any) -> Any:
    # Free-form maps/lists: only JSON-representable values (orjson enforces the rest).
    if not isinstance(value, dict | list):
        raise ValidationError(name, f"expected an object or list, got {type(value).__name__}")
    return value


def _check_usage(name: str, value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ValidationError(name, f"expected an object with {', '.join(USAGE_FIELDS)}")
    unknown = set(value) - set(USAGE_FIELDS)
    if unknown:
        raise ValidationError(
            f"{name}.{sorted(unknown)[0]}", f"unknown usage field; known: {', '.join(USAGE_FIELDS)}"
        )
    out: dict[str, int] = {}
    for key, item in value.items():
        if item is None:
            continue
        n = _check_int(f"{name}.{key}", item)
        if n < 0:
            raise ValidationError(f"{name}.{key}", f"must be >= 0, got {n}")
        out[key] = n
    return out


CHECKERS: dict[str, Callable[[str, Any], Any]] = {
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

    Version 0 is the seed's original log line (camelCase `agentId`, `timestamp`,
    `usage.inputTokens`, no `type`): files written that way stay readable.
    """
    rec = dict(record)
    version = rec.get("schema_version", 0 if "agentId" in rec or "timestamp" in rec else SCHEMA_VERSION)
    if version == 0:
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
    elif isinstance(version, int) and version > SCHEMA_VERSION:
        raise ValidationError(
            "schema_version", f"{version} is newer than this tiermem ({SCHEMA_VERSION}); upgrade"
        )
    return rec


def validate(record: Any, *, now: datetime | None = None) -> dict[str, Any]:
    """Validate, normalise and enrich one record; raise ValidationError naming the field.

    Enrichment at write time: `ts` (now, UTC) and `event_id` when missing,
    `schema_version`, and for interactions `response_length` and the
    enrichment defaults (`tools_used` = [], `memory_level` = "global").
    """
    if type(record) is dict and record.get("type") == "interaction":
        fast = _fast_interaction(record, now)
        if fast is not None:
            return fast
    return validate_full(record, now=now)


def validate_full(record: Any, *, now: datetime | None = None) -> dict[str, Any]:
    """The general validation path (every type, every version); `validate` may take a shortcut."""
    if not isinstance(record, Mapping):
        raise ValidationError("<record>", f"expected a JSON object, got {type(record).__name__}")
    rec = upcast(record)
    etype = rec.get("type")
    if etype is None:
        raise ValidationError("type", "missing")
    if not isinstance(etype, str):
        raise ValidationError("type", f"expected a string, got {type(etype).__name__}")
    spec = EVENT_TYPES.get(etype)
    if spec is None:
        raise ValidationError(
            "type", f"unknown event type {etype!r}; known: {', '.join(sorted(EVENT_TYPES))}"
        )
    sv = rec.get("schema_version", SCHEMA_VERSION)
    if sv != SCHEMA_VERSION:
        raise ValidationError("schema_version", f"expected {SCHEMA_VERSION}, got {sv!r}")

    out: dict[str, Any] = {"type": etype, "schema_version": SCHEMA_VERSION}
    extra: dict[str, Any] = dict(rec.get("extra") or {}) if isinstance(rec.get("extra"), dict) else {}
    if "extra" in rec and not isinstance(rec["extra"], dict | type(None)):
        raise ValidationError("extra", "expected an object")
    declared = {**COMMON_FIELDS, **spec.fields}
    for name, value in rec.items():
        if name in ("type", "schema_version", "extra"):
            continue
        kind = declared.get(name)
        if kind is None:
            extra[name] = value  # kept, not dropped
            continue
        if value is None:
            continue
        out[name] = CHECKERS[kind](name, value)

    if "agent_id" not in out:
        if spec.agent_required:
            raise ValidationError("agent_id", "missing")
    elif not out["agent_id"].strip():
        raise ValidationError("agent_id", "empty")
    for name in spec.required:
        if name not in out:
            raise ValidationError(name, "missing")

    if "event_id" in out:
        eid = out["event_id"]
        if not eid or len(eid) > 128 or any(c.isspace() or c in "/\\" for c in eid):
            raise ValidationError("event_id", "must be 1-128 characters without spaces or slashes")
    stamp = parse_ts(out["ts"]) if "ts" in out else (now or utcnow())
    out["ts"] = format_ts(stamp)
    if "event_id" not in out:
        out["event_id"] = new_event_id(stamp)

    if etype == "interaction":
        _enrich_interaction(out)
    elif etype == "memory_transition":
        for name in ("from_level", "to_level"):
            if out[name] not in MEMORY_LEVELS:
                raise ValidationError(name, f"expected one of {', '.join(MEMORY_LEVELS)}, got {out[name]!r}")
    elif etype == "episode" and not 1 <= out["importance"] <= 10:
        raise ValidationError("importance", f"must be 1-10, got {out['importance']}")
    if "scope" in out and out["scope"] not in SCOPES:
        raise ValidationError("scope", f"expected one of {', '.join(SCOPES)}, got {out['scope']!r}")
    if extra:
        out["extra"] = extra
    # The id goes first on the stored line so that readers of raw lines (the id
    # index, seal verification) can find it without parsing the record.
    eid = out.pop("event_id")
    return {"event_id": eid, **out}


def _enrich_interaction(out: dict[str, Any]) -> None:
    level = out.setdefault("memory_level", "global")
    if level not in MEMORY_LEVELS:
        raise ValidationError("memory_level", f"expected one of {', '.join(MEMORY_LEVELS)}, got {level!r}")
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


# ------------------------------------------------------------ the fast path
# Bulk ingest validates hundreds of thousands of interactions a second, so the
# common case (a current-version interaction whose fields all have exactly the
# expected types) is checked in one tight loop. Anything unusual returns None
# and takes `validate_full`, which produces the error that names the field; the
# two paths give identical results for what the fast one accepts (tested).
_FAST_ID = re.compile(r"[0-9A-Za-z_.:\-]{1,128}")
_FAST_KINDS: dict[str, str] = {**COMMON_FIELDS, **INTERACTION_FIELDS}
_FAST_STR = frozenset(name for name, kind in _FAST_KINDS.items() if kind == STR and name != "type")


def _fast_ts(value: str) -> bool:
    if len(value) != 24 or value[23] != "Z" or value[10] != "T" or value[19] != "." or value[:4] < "1970":
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _fast_interaction(rec: dict[str, Any], now: datetime | None) -> dict[str, Any] | None:
    out: dict[str, Any] = {"type": "interaction", "schema_version": SCHEMA_VERSION}
    for name, value in rec.items():
        if type(value) is str:  # most fields: dispatch on the value's type first
            if name in _FAST_STR:
                if "\x00" in value or len(value) > MAX_TEXT:
                    return None
                if name == "event_id" and not _FAST_ID.fullmatch(value):
                    return None
            elif name == "ts":
                if not _fast_ts(value):
                    return None
            elif name == "type":
                continue
            else:
                return None
            out[name] = value
            continue
        if value is None:
            if name not in _FAST_KINDS:  # an unknown field (kept in `extra`, even when null)
                return None
            continue
        kind = _FAST_KINDS.get(name)
        if kind is INT:
            if type(value) is not int or not -(2**63) <= value < 2**63:
                return None
            if name == "schema_version":
                if value != SCHEMA_VERSION:
                    return None
                continue
        elif kind is FLOAT:
            if type(value) is int:
                value = float(value)
            elif type(value) is not float or not math.isfinite(value):
                return None
        elif kind is STRLIST:
            if type(value) is not list:
                return None
            for item in value:
                if type(item) is not str or "\x00" in item or len(item) > MAX_TEXT:
                    return None
            value = list(value)
        elif kind is USAGE:
            if type(value) is not dict:
                return None
            for key, n in value.items():
                if key not in USAGE_FIELDS or type(n) is not int or n < 0 or n >= 2**63:
                    return None
            value = dict(value)
        elif kind is JSON:
            if type(value) is not dict and type(value) is not list:
                return None
        else:  # unknown field (goes to `extra`), or a value of an unexpected type
            return None
        out[name] = value
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
    eid = out.pop("event_id")
    return {"event_id": eid, **out}
