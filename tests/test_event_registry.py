"""The event registry: one declaration per type, read by validation, the projector and the views."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from helpers_log import interaction, write_jsonl
from tiermem.ingest.pipeline import ingest_file
from tiermem.log.seal import arrow_schema, seal
from tiermem.log.sql import run_query
from tiermem.runtime import projector, sqlite_apply
from tiermem.runtime.store import open_store

from tiermem import registry
from tiermem.errors import ValidationError
from tiermem.eventlog import EventLog
from tiermem.events import CALLER, INTERNAL, validate
from tiermem.registry import (
    BOOL,
    EVENT_TYPES,
    FLOAT,
    INT,
    JSON,
    STR,
    STREAMS,
    STRLIST,
    TS,
    USAGE,
    EventType,
    check_registry,
    types_shown_in,
)
from tiermem.settings import Settings
from tiermem.sqlviews import DERIVED_VIEWS, open_catalog

DOCS = Path(__file__).resolve().parent.parent / "docs" / "events.md"
SAMPLE = {
    STR: "x",
    INT: 5,
    FLOAT: 0.5,
    BOOL: True,
    TS: "2026-01-02T03:04:05.000Z",
    STRLIST: [],
    JSON: {},
    USAGE: {"input_tokens": 1},
}
SPECIAL = {"from_level": "task", "to_level": "global", "scope": "project", "memory_level": "global"}


def minimal(etype: EventType, n: int = 0) -> dict[str, Any]:
    """The smallest valid record of a type, made from its declaration alone."""
    rec: dict[str, Any] = {
        "type": etype.name,
        "event_id": f"{etype.name}-{n}",
        "ts": "2026-01-02T03:04:05.000Z",
        "agent_id": "agent-r",
    }
    for name in etype.required:
        rec[name] = SPECIAL.get(name, SAMPLE[etype.fields[name]])
    return rec


def test_declarations_are_consistent() -> None:
    assert check_registry() == []
    assert sorted(registry.PROJECTION_ORDER) == sorted(STREAMS)


def test_every_projected_type_has_a_handler() -> None:
    assert sqlite_apply.unhandled_types() == []
    for etype in EVENT_TYPES.values():
        assert etype.projection in sqlite_apply.HANDLERS, etype.name


def test_the_caller_gate_follows_the_origin() -> None:
    for etype in EVENT_TYPES.values():
        rec = minimal(etype)
        assert validate(rec, writer=INTERNAL)["type"] == etype.name
        if etype.origin == registry.CALLER:
            assert validate(rec, writer=CALLER)["type"] == etype.name
        else:
            with pytest.raises(ValidationError) as err:
                validate(rec, writer=CALLER)
            assert err.value.field == "type" and etype.writers[0] in err.value.reason


def test_hand_written_views_name_the_types_the_registry_declares() -> None:
    for view, sql in DERIVED_VIEWS.items():
        named = set(re.findall(r"type\s*=\s*'(\w+)'", sql)) | set(re.findall(r"'(\w+)'", _in_lists(sql)))
        named.discard("erasure")  # every view hides what erasures cover
        assert named == set(types_shown_in(view)), view
    declared_views = {v for t in EVENT_TYPES.values() for v in t.views}
    assert declared_views <= set(DERIVED_VIEWS) | {"interactions"}


def _in_lists(sql: str) -> str:
    return " ".join(re.findall(r"type IN \(([^)]*)\)", sql))


def test_every_type_is_stored_shown_sealed_and_projected(settings: Settings) -> None:
    with EventLog(settings) as log:
        log.append_many([minimal(t) for t in EVENT_TYPES.values() if t.name != "erasure"])
    con = open_catalog(settings)
    try:
        shown = dict(con.execute("SELECT type, count(*) FROM events GROUP BY 1").fetchall())
        for view in ("interactions", "episodes", "retrievals"):
            assert con.execute(f"SELECT count(*) FROM {view}").fetchone() == (len(types_shown_in(view)),)
    finally:
        con.close()
    assert set(shown) == set(EVENT_TYPES) - {"erasure"}
    seal(settings, before="2099-01-01")
    for stream in STREAMS:
        assert set(registry.stream_fields(stream)) <= set(arrow_schema(stream).names)
    info = projector.project(settings)
    assert info.applied == len(EVENT_TYPES) - 1


def test_a_type_declared_once_is_validated_stored_shown_and_sealed(
    settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding an event type touches the registry alone (here: a caller type, not projected)."""
    rated = EventType(
        "turn_rated",
        "interactions",
        {"rating": INT, "rated_event_id": STR},
        ("rating",),
        origin=registry.CALLER,
        writers=("tiermem ingest",),
        doc="a user's thumbs up or down",
    )
    monkeypatch.setitem(EVENT_TYPES, "turn_rated", rated)
    assert check_registry() == []
    src = write_jsonl(
        tmp_path / "r.jsonl",
        [
            interaction(1, event_id="t1"),
            {
                "type": "turn_rated",
                "agent_id": "agent-1",
                "rating": 4,
                "rated_event_id": "t1",
                "ts": "2026-03-02T00:00:00Z",
            },
            {"type": "turn_rated", "agent_id": "agent-1", "rating": "great"},
        ],
    )
    info = ingest_file(settings, src, progress=False)
    assert (info.accepted, info.rejected, info.reject_fields) == (2, 1, {"rating": 1})
    rows = run_query(
        settings, "SELECT rating, rated_event_id FROM interactions_events WHERE type = 'turn_rated'"
    )
    assert rows.rows == [(4, "t1")]
    assert run_query(settings, "SELECT count(*) FROM interactions").rows == [(1,)]  # not a turn
    seal(settings, before="2099-01-01")
    assert "rating" in arrow_schema("interactions").names
    assert run_query(settings, "SELECT rating FROM interactions_events WHERE type = 'turn_rated'").rows == [
        (4,)
    ]
    store = open_store(settings)
    try:
        done = projector.project(settings, store)
        assert done.by_type == {"interaction": 1}  # declared without a projection: not applied
    finally:
        store.close()


def test_docs_table_matches_the_registry() -> None:
    rows = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `(\w+)` \| (\w+) \| (\w+) \| ([^|]+) \| (\w+|—) \| ([^|]+) \|", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4).strip(), m.group(5), m.group(6).strip())
    expected = {
        t.name: (t.stream, t.origin, ", ".join(t.writers), t.projection or "—", ", ".join(t.views) or "—")
        for t in EVENT_TYPES.values()
    }
    assert rows == expected


def test_rejects_name_the_file_and_line(settings: Settings, tmp_path: Path) -> None:
    src = write_jsonl(
        tmp_path / "x.jsonl",
        [interaction(1, event_id="ok"), {"type": "fact_set", "agent_id": "a", "key": "k", "value": "v"}],
    )
    ingest_file(settings, src, progress=False)
    (path,) = settings.rejects_dir.rglob("*.jsonl")
    (rej,) = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert (rej["file"], rej["line"], rej["field"]) == (str(src), 2, "type")
    assert "tiermem facts set" in rej["reason"]
