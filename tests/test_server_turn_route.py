"""Posted turns answered in front of the framework: the same contract as the framework route.

`application()` puts `TurnRoute` in front of the FastAPI app; `create_app()` is
the framework alone. The same requests — ordinary turns, every refusal, every
kind of malformed body — must get the same status, content type and body from
both, and the ordinary ones must really have been answered in front (else this
would compare the framework with itself). Also: a batch is answered once its
append is durable and before the hot store's update, and a read that follows
the answer still sees the turn.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pydantic
import pytest
from fastapi.testclient import TestClient
from helpers_log import segment_files
from tiermem.runtime.memory import RecordedTurn, TurnToRecord, record_turns

from tiermem.app.api import Memory
from tiermem.app.server.app import application, create_app
from tiermem.app.server.keys import KeyStore
from tiermem.app.server.routes import TurnIn
from tiermem.app.server.turn_body import KINDS, from_model, plain_turn
from tiermem.errors import EventIdConflictError, ValidationError
from tiermem.settings import Settings, resolve_settings

AGENT = "route-bot"
OTHER = "other-bot"
MAX_BODY = 4_096
TURN = {"user": "alice", "user_message": "Where is my order?", "agent_response": "It ships tomorrow."}
JSON = {"content-type": "application/json"}


def _json(body: object) -> bytes:
    return orjson.dumps(body)


def _chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted while streaming
    yield b'{"user": "alice", "user_message": "'
    for _ in range(MAX_BODY // 500 + 2):
        yield b"y" * 500
    yield b'", "agent_response": "ok"}'


# (name, key name, path, body or body factory, headers, answered in front of the framework)
CASES: list[tuple[str, str | None, str, Any, dict[str, str], bool]] = [
    ("turn with an idempotency key", "agent", AGENT, _json({**TURN, "event_id": "e-1"}), JSON, True),
    ("the same turn again", "agent", AGENT, _json({**TURN, "event_id": "e-1"}), JSON, True),
    (
        "other words under a taken id",
        "agent",
        AGENT,
        _json({**TURN, "user": "bob", "event_id": "e-1"}),
        JSON,
        True,
    ),
    ("another agent's turn under a taken id", "other", OTHER, _json({**TURN, "event_id": "e-1"}), JSON, True),
    ("a new turn", "agent", AGENT, _json({**TURN, "model": "m", "usage": {"input_tokens": 9}}), JSON, True),
    ("no content type", "agent", AGENT, _json(TURN), {}, False),
    (
        "json with a charset",
        "agent",
        AGENT,
        _json(TURN),
        {"content-type": "application/json; charset=utf-8"},
        True,
    ),
    ("user-bound key, its user", "alice", AGENT, _json(TURN), JSON, True),
    ("no key", None, AGENT, _json(TURN), JSON, True),
    ("not a bearer key", "basic", AGENT, _json(TURN), JSON, True),
    ("unknown key", "unknown", AGENT, _json(TURN), JSON, True),
    ("another agent's key", "other", AGENT, _json(TURN), JSON, True),
    ("user-bound key, another user", "alice", AGENT, _json({**TURN, "user": "bob"}), JSON, True),
    (
        "caption over the log's limit",
        "agent",
        AGENT,
        _json({**TURN, "attachments": [{"kind": "image", "caption": "c" * 2001}]}),
        JSON,
        True,
    ),
    (
        "integer beyond 64 bits",
        "agent",
        AGENT,
        _json(TURN)[:-1] + b',"metadata":{"order":123456789012345678901234567890}}',
        JSON,
        False,
    ),
    ("user too long", "agent", AGENT, _json({**TURN, "user": "u" * 201}), JSON, False),
    ("unknown field", "agent", AGENT, _json({**TURN, "agent_id": OTHER}), JSON, False),
    ("negative latency", "agent", AGENT, _json({**TURN, "latency_ms": -1}), JSON, False),
    ("missing field", "agent", AGENT, _json({"user": "alice"}), JSON, False),
    ("invalid JSON", "agent", AGENT, b"{not json", JSON, False),
    ("a JSON list", "agent", AGENT, b"[1, 2]", JSON, False),
    ("empty body", "agent", AGENT, b"", JSON, False),
    ("not UTF-8 JSON", "agent", AGENT, _json(TURN).decode().encode("utf-16"), JSON, False),
    ("text/plain", "agent", AGENT, _json(TURN), {"content-type": "text/plain"}, False),
    ("agent id the path refuses", "agent", "bad%20agent", _json(TURN), JSON, False),
    ("no key and a bad body", None, AGENT, b"{", JSON, False),
    ("declared too large", "agent", AGENT, _json({**TURN, "user_message": "x" * MAX_BODY}), JSON, False),
    ("streamed too large", "agent", AGENT, _chunks, JSON, False),
]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return resolve_settings(data_dir=tmp_path / "data", env={})


def _keys(settings: Settings) -> dict[str, str]:
    store = KeyStore(settings)
    return {
        "agent": "Bearer " + store.create(operator=False, agent_id=AGENT)["key"],
        "alice": "Bearer " + store.create(operator=False, agent_id=AGENT, user="alice")["key"],
        "other": "Bearer " + store.create(operator=False, agent_id=OTHER)["key"],
        "basic": "Basic dXNlcjpwYXNz",
        "unknown": "Bearer tmk_" + "x" * 43,
    }


def _answers(app: Any, keys: dict[str, str]) -> list[tuple[int, str, dict[str, Any]]]:
    answers = []
    with TestClient(app) as client:
        for _name, key, agent, body, headers, _front in CASES:
            sent = dict(headers)
            if key is not None:
                sent["authorization"] = keys[key]
            content = body() if callable(body) else body
            response = client.post(f"/v1/agents/{agent}/turns", content=content, headers=sent)
            answers.append((response.status_code, response.headers.get("content-type", ""), response.json()))
    return answers


def test_posted_turns_get_the_framework_routes_answers(settings: Settings) -> None:
    keys = _keys(settings)
    framework = _answers(create_app(settings, max_body_bytes=MAX_BODY), keys)
    front = application(settings, max_body_bytes=MAX_BODY)
    answered = _answers(front, keys)
    new_ids = set()
    for case, expected, got in zip(CASES, framework, answered, strict=True):
        name = case[0]
        if got[0] == 201 and "event_id" not in json.loads(case[3]):  # (json reads UTF-16 too)
            # A new turn gets a new id from each server: compare everything else.
            new_ids.add(got[2]["event_id"])
            expected[2]["event_id"] = got[2]["event_id"]
        assert got == expected, name
    assert [status for status, _, _ in answered].count(201) == 6  # UTF-16 JSON too, by the framework
    assert {401, 403, 409, 413, 422} <= {status for status, _, _ in answered}
    assert front.answered == sum(1 for case in CASES if case[5])  # the ordinary ones, in front
    assert len(new_ids) == 4


def test_a_turn_is_answered_once_durable_and_a_later_read_sees_it(settings: Settings) -> None:
    keys = _keys(settings)
    with TestClient(application(settings)) as client:
        posted = client.post(
            f"/v1/agents/{AGENT}/turns",
            json={**TURN, "user_message": "My parcel number is canary-7731."},
            headers={"authorization": keys["agent"]},
        )
        assert posted.status_code == 201
        context = client.get(
            f"/v1/agents/{AGENT}/context", params={"user": "alice"}, headers={"authorization": keys["agent"]}
        )
        assert context.status_code == 200 and "canary-7731" in context.text


def test_record_turns_reports_durable_turns_before_the_hot_store_has_them(settings: Settings) -> None:
    seen: list[tuple[list[str], int, list[RecordedTurn | ValidationError]]] = []
    with Memory(settings) as mem:
        agent = mem.agent(AGENT).runtime

        def in_hot_store(ids: list[str]) -> int:
            marks = ",".join("?" * len(ids))
            row = agent.conn.execute(f"SELECT count(*) FROM wm_items WHERE event_id IN ({marks})", ids)
            return int(row.fetchone()[0])

        def durable(outcomes: list[RecordedTurn | ValidationError]) -> None:
            ids = [o.event_id for o in outcomes if isinstance(o, RecordedTurn)]
            logged = [
                orjson.loads(line)["event_id"]
                for path in segment_files(settings.data_dir)
                for line in path.read_bytes().splitlines()
            ]
            seen.append((sorted(set(ids) & set(logged)), in_hot_store(ids), outcomes))

        turns = [
            TurnToRecord(agent, f"message {n}", "ok", {"user": "alice", "event_id": f"d-{n}"})
            for n in range(5)
        ]
        turns.append(TurnToRecord(agent, "bad", "ok", {"user": "alice", "latency_ms": -5}))
        outcomes = record_turns(turns, durable)
        ((logged, hot_then, reported),) = seen
        assert logged == [f"d-{n}" for n in range(5)]  # every valid turn in the log when reported
        assert hot_then == 0  # and not yet in the hot store
        assert reported is outcomes and isinstance(outcomes[-1], ValidationError)
        assert in_hot_store([f"d-{n}" for n in range(5)]) == 5


def test_a_batch_of_turns_of_two_data_roots_is_refused(settings: Settings, tmp_path: Path) -> None:
    other = resolve_settings(data_dir=tmp_path / "elsewhere", env={})
    with Memory(settings) as mem, Memory(other) as elsewhere:
        here, there = mem.agent(AGENT).runtime, elsewhere.agent(AGENT).runtime
        same_root_again = Memory(resolve_settings(data_dir=settings.data_dir, env={}))
        try:
            again = same_root_again.agent(AGENT).runtime
            # Another settings object for the same root is the same root.
            assert isinstance(
                record_turns([TurnToRecord(here, "a", "b", {}), TurnToRecord(again, "c", "d", {})])[1],
                RecordedTurn,
            )
        finally:
            same_root_again.close()
        with pytest.raises(ValidationError, match="one data root"):
            record_turns([TurnToRecord(here, "a", "b", {}), TurnToRecord(there, "c", "d", {})])


def test_a_duplicate_key_never_puts_a_turn_the_log_lacks_into_the_hot_store(settings: Settings) -> None:
    # Agent A's turn is durable, its hot-store update still queued (as on the server's update
    # thread or in another worker) when agent B posts a turn with the same idempotency key.
    with Memory(settings) as mem:
        first, second = mem.agent(AGENT).runtime, mem.agent(OTHER).runtime
        queued: list[list[dict[str, Any]]] = []
        record_turns(
            [TurnToRecord(first, "alice canary-A-7731", "ok", {"user": "alice", "event_id": "x-1"})],
            apply=lambda events, _positions: queued.append(events),
        )
        (refused,) = record_turns(
            [TurnToRecord(second, "bob canary-B-9904", "ok", {"user": "bob", "event_id": "x-1"})]
        )
        assert isinstance(refused, EventIdConflictError)  # told, not answered as recorded
        (batch,) = queued
        first.store.apply_now(batch)
        rows = first.conn.execute("SELECT agent_id, user_message FROM wm_items WHERE event_id = 'x-1'")
        hot = [tuple(r) for r in rows]
        logged = [
            orjson.loads(line)
            for path in segment_files(settings.data_dir)
            for line in path.read_bytes().splitlines()
        ]
        assert [(e["agent_id"], e["user_message"]) for e in logged if e["event_id"] == "x-1"] == [
            (AGENT, "alice canary-A-7731")
        ]
        assert hot == [(AGENT, "alice canary-A-7731")]


def test_plain_turns_are_read_as_the_model_reads_them() -> None:
    # The hand check answers only for bodies the model accepts as they are, with what the model
    # gives: over generated bodies (each field plain, null, at or over a limit, of another type
    # the model may coerce, unknown, missing), whatever it accepts the model accepts with the
    # same values, types and field order; the rest is left to the model.
    assert list(KINDS) == list(TurnIn.model_fields)
    ident = ["a", "i" * 200, "i" * 201, "", 7, True, None, ["a"]]
    text = ["hello", "t" * 100_000, "", "t" * 100_001, 5, None, {"a": 1}]
    pools: dict[str, list[Any]] = {
        "user": ident,
        "user_message": text,
        "agent_response": text,
        "session_id": ident,
        "project_id": ident,
        "task_id": ident,
        "memory_level": ["global", "project", "task", "Global", "", 1, None],
        "event_id": ident,
        "model": ident,
        "usage": [{"input_tokens": 9}, {}, {"a": True}, {"a": 1.0}, {"a": "2"}, {"a": 1.5}, [1], None],
        "tools_used": [["a", "b"], [], ["x"] * 100, ["x"] * 101, [""], [1], "a", None],
        "latency_ms": [3, 2.5, 0, -0.0, -1, -0.5, "1.5", True, None, [1]],
        "selection_reason": ["", "why", "s" * 2_000, "s" * 2_001, 3, None],
        "approval_status": ident,
        "channel": ident,
        "metadata": [{"a": None, "b": [1, {"c": None}]}, {}, [], "x", 1, None],
        "attachments": [[{"kind": "image"}], [], [{}] * 16, [{}] * 17, [1], {"a": 1}, None],
    }
    rng = random.Random(20261125)
    accepted = plain_count = 0
    for _ in range(3_000):
        data: dict[str, Any] = {}
        for name in rng.sample(list(pools), len(pools)):  # any order: the model's order is the output's
            if (
                name in ("user", "user_message", "agent_response") and rng.random() < 0.97
            ) or rng.random() < 0.3:
                # Mostly the first two values (plain, accepted), sometimes any of them.
                data[name] = rng.choice(pools[name][:2] if rng.random() < 0.85 else pools[name])
        if rng.random() < 0.05:
            data["agent_id"] = "x"  # unknown: the model refuses it
        plain = plain_turn(data)
        try:
            model = TurnIn.model_validate(data)
        except pydantic.ValidationError:
            assert plain is None, data
            continue
        accepted += 1
        if plain is None:
            continue
        plain_count += 1
        expected = from_model(model)
        assert orjson.dumps(plain._asdict()) == orjson.dumps(expected._asdict()), data
        assert list(plain.fields) == list(expected.fields)
    assert plain_count > accepted // 3 > 50  # the hand check answers for most accepted bodies
