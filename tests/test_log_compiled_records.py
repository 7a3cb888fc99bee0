"""The compiled check of an ordinary interaction gives exactly the Python fast path's event, or nothing.

Generated records mix valid values with the ways a field can be wrong (type,
range, NUL, surrogates, length, timestamp shape and date, unknown fields), in
random key order. Whenever the compiled check settles a record, the Python fast
path must settle it too, into the same keys, in the same order, with the same
values: the stored line is byte for byte the same.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from helpers_log import interaction
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tiermem import compiled_records
from tiermem.events import _fast_interaction, validate
from tiermem.settings import LimitSettings

pytestmark = pytest.mark.skipif(not compiled_records.available(), reason="built without a C compiler")

# A small field limit, so that over-long texts are generated too.
LIMITS = LimitSettings(max_field_chars=24, min_year=1990, max_year=2100)

texts = st.text(max_size=30) | st.sampled_from(["", "   ", "\t\x1c", "a\x00b", "ok", "é✓", "\ud800x"])
ints = st.integers(-(2**64), 2**64) | st.sampled_from([0, -1, 2**63 - 1, 2**63, -(2**63), True, False])
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, -1.5, 812.5])
anything = (
    st.none() | texts | ints | floats | st.lists(texts, max_size=3) | st.dictionaries(texts, ints, max_size=2)
)
stamps = st.sampled_from(
    [
        "2026-03-01T10:00:00.000Z",
        "2024-02-29T23:59:59.999Z",
        "2023-02-29T10:00:00.000Z",  # no such day
        "2026-13-01T10:00:00.000Z",
        "2026-04-31T10:00:00.000Z",
        "2026-03-01T24:00:00.000Z",
        "2026-03-01T10:60:00.000Z",
        "2026-03-01T10:00:60.000Z",
        "1989-12-31T10:00:00.000Z",  # before the accepted years
        "2101-01-01T10:00:00.000Z",
        "0000-01-01T10:00:00.000Z",
        "2026-W09-1T10:00:00.000Z",  # an ISO week date: the Python path's own decision
        "2026-03-01T10:00:00.000",
        "2026-03-01 10:00:00.000Z",
        "2026-03-01T10:00:00.000+00:00",
        "2026-03-01T10:00:00Z",
        "2026-03-0１T10:00:00.000Z",
    ]
) | st.text(max_size=26)
ids = st.sampled_from(["a-1", "x" * 128, "x" * 129, "", "a b", "a/b", "ok:id.1_2-3", "é"]) | texts
usages = (
    st.dictionaries(
        st.sampled_from(["input_tokens", "output_tokens", "cache_read_tokens", "tool_calls", "other"]),
        ints | floats | texts,
        max_size=4,
    )
    | anything
)
tools = st.lists(texts | ints, max_size=3) | anything

FIELDS: dict[str, Any] = {
    "type": st.just("interaction"),
    "event_id": ids | anything,
    "ts": stamps | anything,
    "schema_version": st.sampled_from([1, 2, 0]) | anything,
    "agent_id": texts | anything,
    "agent_type": texts | anything,
    "project_id": texts,
    "session_id": texts,
    "channel": texts,
    "user": texts | anything,
    "memory_level": st.sampled_from(["global", "project", "task", "other"]) | anything,
    "user_message": texts | anything,
    "agent_response": texts | anything,
    "model": texts,
    "usage": usages,
    "tools_used": tools,
    "selection_reason": texts,
    "approval_status": texts,
    "latency_ms": floats | ints | anything,
    "response_length": st.integers(0, 40) | anything,
    "metadata": st.none() | st.dictionaries(texts, ints, max_size=2),
    "attachments": st.none() | st.lists(st.dictionaries(texts, texts, max_size=2), max_size=1),
    "unknown_field": anything,
}
# What each field holds in an ordinary record; a generated record takes most of its fields
# from here and a few from FIELDS above (which also holds these values, and every wrong one).
plain = st.text(
    st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_categories=("Cs",)), max_size=20
)
GOOD: dict[str, Any] = {
    "type": st.just("interaction"),
    "event_id": st.text("abcXYZ019_.:-", min_size=1, max_size=20),
    "ts": st.sampled_from(
        ["2026-03-01T10:00:00.000Z", "2024-02-29T23:59:59.999Z", "1990-01-01T00:00:00.000Z"]
    ),
    "schema_version": st.just(1),
    "agent_id": plain.filter(str.strip),
    "agent_type": plain,
    "project_id": plain,
    "session_id": plain,
    "channel": plain,
    "user": plain,
    "memory_level": st.sampled_from(["global", "project", "task"]),
    "user_message": plain,
    "agent_response": plain,
    "model": plain,
    "usage": st.dictionaries(
        st.sampled_from(["input_tokens", "output_tokens", "cache_read_tokens", "tool_calls"]),
        st.integers(0, 2**63 - 1),
        max_size=4,
    ),
    "tools_used": st.lists(plain, max_size=3),
    "selection_reason": plain,
    "approval_status": plain,
    "latency_ms": st.floats(min_value=0, allow_infinity=False) | st.integers(0, 2**63 - 1),
    "response_length": st.none(),
    "metadata": st.none(),
    "attachments": st.none(),
    "unknown_field": st.none(),
}
USUAL = ("type", "event_id", "ts", "agent_id", "user_message", "agent_response")


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    names = [
        n for n in FIELDS if (n in USUAL and draw(st.integers(0, 19)) > 0) or draw(st.integers(0, 3)) == 0
    ]
    if "type" not in names:
        names.append("type")  # `validate` takes this path only for a record of this type
    names = draw(st.permutations(names))
    rec = {name: draw(FIELDS[name] if draw(st.integers(0, 7)) == 0 else GOOD[name]) for name in names}
    if "agent_response" in rec and draw(st.booleans()) and type(rec["agent_response"]) is str:
        rec["response_length"] = len(rec["agent_response"]) + draw(st.sampled_from([0, 0, 0, 1]))
    return rec


@hsettings(max_examples=1500, deadline=None)
@given(records())
def test_the_compiled_check_settles_a_record_only_as_the_python_fast_path_does(rec: dict[str, Any]) -> None:
    before = copy.deepcopy(rec)
    compiled = compiled_records.check_interaction(rec, LIMITS)
    assert rec == before  # the caller's record is left as it was
    if compiled is None:
        return
    python = _fast_interaction(copy.deepcopy(rec), None, LIMITS)
    assert python is not None
    assert orjson.dumps(compiled) == orjson.dumps(python)
    assert list(compiled) == list(python)
    assert [type(v) for v in compiled.values()] == [type(v) for v in python.values()]


def test_ordinary_records_are_settled_by_the_compiled_check_with_the_same_event() -> None:
    limits = LimitSettings()
    for i in range(40):
        rec = interaction(i, event_id=f"e-{i}", latency_ms=i if i % 2 else 10.5 + i)
        if i % 3 == 0:
            rec["memory_level"] = "project"
            rec["response_length"] = len(rec["agent_response"])
        compiled = compiled_records.check_interaction(rec, limits)
        assert compiled is not None
        assert orjson.dumps(compiled) == orjson.dumps(_fast_interaction(rec, None, limits))
        assert orjson.dumps(validate(rec, limits=limits)) == orjson.dumps(compiled)
        # Its own containers: changing the caller's lists or counts later changes nothing stored.
        assert compiled["tools_used"] is not rec.get("tools_used", compiled["tools_used"]) or not rec.get(
            "tools_used"
        )
        assert compiled["usage"] == rec["usage"] and compiled["usage"] is not rec["usage"]


def test_records_the_compiled_check_leaves_alone_go_on_to_the_python_paths() -> None:
    limits = LimitSettings()
    # No id (the Python path makes one), no time, an unknown field, metadata: all for Python.
    for rec in (
        {k: v for k, v in interaction(1).items()},
        {k: v for k, v in interaction(1, event_id="a").items() if k != "ts"},
        interaction(1, event_id="a", mood="fine"),
        interaction(1, event_id="a", metadata={"k": 1}),
    ):
        assert compiled_records.check_interaction(rec, limits) is None
        assert validate(rec, limits=limits)["type"] == "interaction"  # still accepted
    # Years the Python path compares as strings of another length: never settled here.
    wide = LimitSettings(min_year=1970, max_year=10_000)
    assert compiled_records.check_interaction(interaction(1, event_id="a"), wide) is None


def test_a_null_schema_version_is_refused_by_every_path() -> None:
    from tiermem.errors import ValidationError

    rec = interaction(1, event_id="n-1", ts="2026-03-01T10:00:00.000Z")
    rec["schema_version"] = None
    assert compiled_records.check_interaction(rec, LIMITS) is None
    assert _fast_interaction(dict(rec), None, LIMITS) is None
    with pytest.raises(ValidationError, match="schema_version"):
        validate(dict(rec))


def test_what_the_record_becomes_during_the_check_never_reaches_the_event() -> None:
    # A collection during the check's allocations may run a finalizer that changes the record
    # (or frees a value it held): the event must hold only values that were checked.
    import gc

    from tiermem import _records  # type: ignore[attr-defined]

    rec: dict[str, Any] | None = None

    class Changer:
        cycle: Any = None

        def __del__(self) -> None:
            if rec is not None:
                rec["user_message"] = "bad\x00nul"
                rec["agent_response"] = "".join(["x", "y"])

    accepted = 0
    gc.freeze()  # the test session's heap out of the collections below (each would walk all of it)
    try:
        for trial in range(600):
            rec = {
                "type": "interaction",
                "event_id": "e1",
                "ts": "2026-03-01T10:00:00.000Z",
                "agent_id": "a",
                "user_message": "hello",
                "agent_response": "r" * (1 + trial % 5) + str(trial),
            }
            changer = Changer()
            changer.cycle = [changer]  # garbage with a finalizer, collected at the next pass
            del changer
            gc.set_threshold(1 + trial % 7)
            out = _records.check_interaction(262144, 1970, 2199, 1, rec)
            gc.set_threshold(700)
            rec = None
            gc.collect()
            if out is not None:
                assert "\x00" not in out["user_message"]
                assert out["response_length"] == len(out["agent_response"])
                accepted += 1
    finally:
        gc.set_threshold(700)
        gc.unfreeze()
    assert accepted  # the check did settle these records
