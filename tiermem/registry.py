"""The event registry: every event type declared once.

A declaration says everything the rest of tiermem needs to know about a type:

- its **fields** and their kinds (beyond the common ones), which are required,
  and its schema **version**: validation (`tiermem.events`), the typed columns
  of the log's views (`tiermem.catalog`) and the Parquet schema of sealed days
  (`tiermem.log.seal`) all read them from here;
- its **origin**, who may emit it: `caller` events may come from outside
  (`ingest`, `append`, `record_turn`, HTTP) as well as from tiermem itself;
  `internal` events are written only by the commands and jobs named in
  `writers`, and a caller sending one is refused with that reason;
- its **projection**, how the projector applies it to the hot store: a named
  kind that `tiermem.runtime.projector` maps to a handler (several types may
  share a kind; None: not projected), checked when the projector is imported;
- the analyst **views** that show it besides `events` and `<stream>_events`
  (which show every type of every stream): `tiermem.catalog` and
  `tiermem.sqlviews` take their type filters from here.

This module is data only and imports nothing from tiermem, so every layer can
read it. `docs/events.md` explains how to add a type.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

SCHEMA_VERSION = 1  # the newest version of any type; older records are upcast on read
MEMORY_LEVELS = ("global", "project", "task")
SCOPES = ("system", "agent_type", "project", "override")

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
FIELD_KINDS = (STR, INT, FLOAT, BOOL, TS, STRLIST, JSON, USAGE)

COMMON_FIELDS: dict[str, str] = {
    "event_id": STR,
    "type": STR,
    "ts": TS,
    "schema_version": INT,
    "agent_id": STR,
}

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "tool_calls")

# Who may emit an event type.
CALLER = "caller"  # anyone: callers from outside (ingest, append, record_turn, HTTP) and tiermem itself
INTERNAL = "internal"  # only tiermem's own commands and jobs (the `writers` of the type)
ORIGINS = (CALLER, INTERNAL)


@dataclass(frozen=True)
class EventType:
    name: str
    stream: str
    fields: Mapping[str, str]  # declared fields beyond the common ones
    required: tuple[str, ...] = ()
    agent_required: bool = True
    version: int = 1
    origin: str = INTERNAL
    writers: tuple[str, ...] = ()  # the commands, jobs and calls that write it (docs and refusals)
    projection: str | None = None  # the projector's handling (a kind runtime/projector.py knows)
    views: tuple[str, ...] = ()  # analyst views that show it, besides events and <stream>_events
    doc: str = ""


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
    # Media shared with the turn: [{kind, caption, url?, mime?, query?}] (tiermem.attachments).
    "attachments": JSON,
}

_DECLARED: tuple[EventType, ...] = (
    EventType(
        "interaction",
        "interactions",
        INTERACTION_FIELDS,
        ("user_message", "agent_response"),
        origin=CALLER,
        writers=("tiermem ingest", "tiermem append", "record_turn"),
        projection="turn",
        views=("interactions",),
        doc="one agent turn: what the user said, what the agent answered, and how",
    ),
    EventType(
        "session_ended",
        "sessions",
        {"session_id": STR, "user": STR, "reason": STR},
        ("session_id",),
        origin=CALLER,
        writers=("end_session", "tiermem ingest", "tiermem append"),
        projection="session_end",
        doc="a conversation is over: gap-fill and compression may run for it",
    ),
    EventType(
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
        writers=("finish_task", "finish_project"),
        projection="transition",
        doc="the agent left a task or project level; the summary is shown to every user of the agent",
    ),
    EventType(
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
        writers=("tiermem compress", "session gap-fill"),
        projection="episode",
        views=("episodes",),
        doc="a scored episode derived from turns",
    ),
    EventType(
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
        writers=("tiermem compress", "session gap-fill", "memory tools (idea save)"),
        projection="proposal",
        views=("proposals",),
        doc="a candidate fact waiting for the evolver's decision",
    ),
    EventType(
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
            # Added by the evolver (optional): per-fact revision (latest wins), the
            # full text behind a summary, and the lifecycle inputs.
            "revision": INT,
            "original": STR,
            "importance": INT,
            "confidence": FLOAT,
            "origin": STR,
            "seen_projects": STRLIST,
        },
        ("decision",),
        writers=("tiermem evolve", "tiermem proposals approve/reject", "memory tools"),
        projection="decision",
        views=("knowledge", "proposals"),
        doc="what the evolver (or a person) decided about a proposal or a fact",
    ),
    EventType(
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
        writers=("tiermem facts set", "memory tools (fact store)"),
        projection="fact_set",
        views=("knowledge",),
        doc="an explicit key-value fact",
    ),
    EventType(
        "fact_removed",
        "knowledge",
        {"fact_id": STR, "key": STR, "scope": STR, "project_id": STR, "agent_type": STR, "reason": STR},
        ("key",),
        writers=("tiermem facts remove",),
        projection="fact_removed",
        views=("knowledge",),
        doc="a key-value fact removed",
    ),
    EventType(
        "identity_set",
        "knowledge",
        {"content": STR, "participant": STR, "source": STR},
        ("content",),
        writers=("tiermem identity set",),
        projection="identity",
        doc="the agent's L0 identity (checked against its length limit by the runtime)",
    ),
    EventType(
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
        writers=("tiermem compress",),
        projection="relationship",
        doc="the agent's summary of its relationship with one participant",
    ),
    EventType(
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
        writers=("context", "recall", "memory tools"),
        projection="retrieval",
        # `knowledge` counts recalls per fact from these.
        views=("retrievals", "knowledge"),
        doc="memory delivered to a prompt or a tool result (what, why, at what cost)",
    ),
    EventType(
        "derived_note",
        "notes",
        {
            "text": STR,  # the note itself, e.g. "for 3 years = since about 2020"
            "kind": STR,  # "dates" | "who_did_what"
            "speaker": STR,
            "user": STR,
            "session_id": STR,
            "said_ts": TS,  # when the source turn was said (what relative dates were resolved against)
            "source_event_ids": STRLIST,
        },
        ("text", "kind", "source_event_ids"),
        writers=("tiermem compress",),
        projection="note",
        views=("notes",),
        doc="a short note derived from one turn (absolute dates, who did what), shown beside it",
    ),
    EventType(
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
        agent_required=False,
        writers=("tiermem forget",),
        projection="erasure",
        doc="a deletion request (ids only); every view hides what it covers",
    ),
)

EVENT_TYPES: dict[str, EventType] = {t.name: t for t in _DECLARED}

STREAMS: tuple[str, ...] = tuple(dict.fromkeys(t.stream for t in EVENT_TYPES.values()))

# The order in which the projector applies streams: erasures first (so nothing
# they cover is ever added), then the turns (derived items take their owners from
# the turns they cite), then what later streams refer to (facts and episodes
# before the retrievals that bump their recall counts). Every stream appears
# exactly once (checked below).
PROJECTION_ORDER: tuple[str, ...] = (
    "erasures",
    "interactions",
    "transitions",
    "sessions",
    "episodes",
    "notes",
    "knowledge",
    "relationships",
    "retrievals",
)

CALLER_TYPES: tuple[str, ...] = tuple(t.name for t in EVENT_TYPES.values() if t.origin == CALLER)


def stream_fields(stream: str) -> dict[str, str]:
    """All columns of a stream: common fields, every type's fields, then `extra`."""
    cols = dict(COMMON_FIELDS)
    for t in EVENT_TYPES.values():
        if t.stream == stream:
            for name, kind in t.fields.items():
                cols.setdefault(name, kind)
    cols["extra"] = JSON
    return cols


def types_shown_in(view: str) -> tuple[str, ...]:
    """The event types a named analyst view shows."""
    return tuple(t.name for t in EVENT_TYPES.values() if view in t.views)


def type_filter(view: str) -> str:
    """`type IN ('a', 'b')`: the SQL condition selecting the types a view shows."""
    names = types_shown_in(view)
    if not names:
        raise KeyError(f"no event type declares the view {view!r}")
    return "type IN (" + ", ".join("'" + n + "'" for n in names) + ")"


def _type_problems(t: EventType) -> list[str]:
    """What is wrong with one declaration on its own."""
    problems = []
    if t.origin not in ORIGINS:
        problems.append(f"{t.name}: origin {t.origin!r} is not one of {ORIGINS}")
    if not t.writers:
        problems.append(f"{t.name}: no writers named")
    for name, kind in t.fields.items():
        if kind not in FIELD_KINDS:
            problems.append(f"{t.name}.{name}: unknown kind {kind!r}")
        if name in COMMON_FIELDS or name == "extra":
            problems.append(f"{t.name}.{name}: redeclares a common field")
    problems.extend(
        f"{t.name}: required field {name!r} is not declared" for name in t.required if name not in t.fields
    )
    if not 1 <= t.version <= SCHEMA_VERSION:
        problems.append(f"{t.name}: version {t.version} outside 1..{SCHEMA_VERSION}")
    return problems


def _stream_problems(stream: str) -> list[str]:
    """Types sharing a stream (one Parquet schema) must agree on the kind of each field."""
    problems = []
    kinds: dict[str, str] = {}
    for t in EVENT_TYPES.values():
        if t.stream != stream:
            continue
        for name, kind in t.fields.items():
            if kinds.setdefault(name, kind) != kind:
                problems.append(f"{stream}.{name}: declared as {kinds[name]} and as {kind}")
    return problems


def check_registry() -> list[str]:
    """Inconsistencies in the declarations (empty when all is well); run at import."""
    problems = [p for t in EVENT_TYPES.values() for p in _type_problems(t)]
    problems += [p for stream in STREAMS for p in _stream_problems(stream)]
    if sorted(PROJECTION_ORDER) != sorted(STREAMS):
        problems.append(f"PROJECTION_ORDER {PROJECTION_ORDER} must list every stream {STREAMS} once")
    return problems


_PROBLEMS = check_registry()
if _PROBLEMS:  # a broken declaration must not get as far as writing events
    raise RuntimeError("event registry: " + "; ".join(_PROBLEMS))
