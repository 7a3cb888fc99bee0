"""Turns posted concurrently to `tiermem serve` are batched into shared durable appends.

A batch never answers 201 before its write, each turn keeps its own checks
(a bad turn fails alone, a key reaches only its agent), and a server killed
with SIGKILL under concurrent posting has every acknowledged turn in the log;
replaying every sent turn afterwards stores none of them twice.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import orjson
import pytest
from helpers_log import segment_files
from helpers_server import make_key, running_server
from tiermem.runtime.memory import RecordedTurn, TurnToRecord, _turn_record, record_turns

from tiermem.app.api import Memory
from tiermem.app.server.service import MemoryService
from tiermem.errors import ValidationError
from tiermem.events import CALLER, validate
from tiermem.ids import new_event_id, parse_ts
from tiermem.settings import Settings, resolve_settings

AGENT = "batch-bot"
CLIENTS = 12


def turn(client: int, i: int, **extra: object) -> dict[str, object]:
    return {
        "user": f"user-{client % 4}",
        "user_message": f"client {client} turn {i}: where is my order?",
        "agent_response": "It ships tomorrow.",
        "session_id": f"s-{client}",
        "event_id": f"c{client}-t{i}",
        **extra,
    }


def stored_ids(data_dir: Path) -> list[str]:
    """Event ids of the interaction lines in the log (a torn last line is not a stored record)."""
    return [
        orjson.loads(line)["event_id"]
        for path in segment_files(data_dir)
        for line in path.read_bytes().split(b"\n")
        if line.endswith(b"}")
    ]


def test_turns_queued_together_are_one_batch_with_one_outcome_each(settings: Settings) -> None:
    service = MemoryService(settings)

    async def post_all() -> list[object]:
        posts = [
            service.record_turn(
                AGENT if n % 2 else "second-bot",
                f"user-{n % 3}",
                f"message {n}",
                "reply",
                {"event_id": f"t{n}", "memory_level": "nowhere" if n == 5 else "global"},
            )
            for n in range(50)
        ]
        return await asyncio.gather(*posts, return_exceptions=True)

    try:
        outcomes = asyncio.run(post_all())
        # All 50 were queued before the memory thread was free: one batch, one write.
        assert (service.turn_batches, service.turns_recorded) == (1, 50)
        assert isinstance(outcomes[5], ValidationError)  # the bad turn fails alone
        assert [getattr(o, "event_id", None) for o in outcomes] == [
            None if n == 5 else f"t{n}" for n in range(50)
        ]
        rows = asyncio.run(
            service.run(
                lambda: service.memory.query(
                    "SELECT event_id, agent_id, user FROM interactions ORDER BY event_id"
                ).records()
            )
        )
        want = sorted(
            (f"t{n}", AGENT if n % 2 else "second-bot", f"user-{n % 3}") for n in range(50) if n != 5
        )
        assert sorted((r["event_id"], r["agent_id"], r["user"]) for r in rows) == want
    finally:
        service.close()


def test_concurrent_turns_share_appends_and_keep_their_own_checks(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = make_key(data_dir, agent=AGENT)
    other = make_key(data_dir, agent="other-bot")
    acked: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(CLIENTS)

    with running_server(data_dir) as server:

        def client(n: int) -> None:
            with server.client(other if n == 0 else key) as c:
                start.wait()
                for i in range(40):
                    # client 1 sends one invalid turn (an unknown memory level) among its good ones
                    body = turn(n, i, memory_level="nowhere") if (n, i) == (1, 7) else turn(n, i)
                    r = c.post(f"/v1/agents/{AGENT}/turns", json=body)
                    with lock:
                        if r.status_code == 201:
                            acked.append(r.json()["event_id"])
                        else:
                            failures.append(f"{n}:{i}:{r.status_code}")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert "Traceback" not in server.log()

    # client 0's key reaches another agent only: all 40 refused; client 1's bad turn failed alone
    assert Counter(f.split(":")[2] for f in failures) == {"403": 40, "422": 1}
    assert "1:7:422" in failures
    expected = {f"c{n}-t{i}" for n in range(1, CLIENTS) for i in range(40)} - {"c1-t7"}
    assert set(acked) == expected
    ids = stored_ids(data_dir)
    assert sorted(ids) == sorted(expected)  # every acknowledged turn, once, and nothing else


@pytest.mark.slow
def test_sigkilled_server_under_concurrent_posting_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = make_key(data_dir, agent=AGENT)
    sent: set[str] = set()
    acked: set[str] = set()
    lock = threading.Condition()
    stop = threading.Event()

    with running_server(data_dir) as server:

        def client(n: int) -> None:
            with server.client(key) as c:
                i = 0
                while not stop.is_set():  # until the server is gone
                    body = turn(n, i)
                    with lock:
                        sent.add(str(body["event_id"]))
                    try:
                        r = c.post(f"/v1/agents/{AGENT}/turns", json=body)
                    except httpx2.TransportError:
                        return
                    if r.status_code == 201:
                        with lock:
                            acked.add(r.json()["event_id"])
                            lock.notify_all()
                    i += 1

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        with lock:  # real acknowledgements first, so that the kill lands mid-run
            assert lock.wait_for(lambda: len(acked) >= 300, timeout=120)
        server.process.send_signal(signal.SIGKILL)
        assert server.process.wait(timeout=60) == -signal.SIGKILL
        stop.set()
        for t in threads:
            t.join()

    stored = Counter(stored_ids(data_dir))
    assert acked <= set(stored)  # nothing acknowledged is missing
    assert max(stored.values()) == 1

    # The clients retry everything they sent (their idempotency keys) against a new server.
    with running_server(data_dir) as server, server.client(key) as c:
        for event_id in sorted(sent):
            n, i = (int(x[1:]) for x in event_id.split("-"))
            r = c.post(f"/v1/agents/{AGENT}/turns", json=turn(n, i))
            assert r.status_code == 201 and r.json()["event_id"] == event_id
        assert "Traceback" not in server.log()
    lines = [x for p in segment_files(data_dir) for x in p.read_bytes().split(b"\n") if x]
    counts = Counter(orjson.loads(x)["event_id"] for x in lines)  # every line parses: none torn
    assert set(counts) == sent and max(counts.values()) == 1


def test_a_batch_stamps_its_turns_as_validation_would(tmp_path: Path) -> None:
    # The batch stamps each turn's time and id before validating it (so that the compiled check
    # takes it): what is stored must be what validation makes of the turn left unstamped.
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    variants: list[dict[str, Any]] = [
        {},
        {"event_id": "given-1"},
        {"model": "m", "usage": {"input_tokens": 9, "output_tokens": 2}, "session_id": "s"},
        {"metadata": {"order": [1, 2]}, "channel": "web"},
        {"tools_used": ["search"], "latency_ms": 3, "memory_level": "task"},
        {"ts": "2026-01-02T03:04:05.678Z"},  # a time given keeps deciding the id's
    ]
    with Memory(settings) as mem:
        agent = mem.agent(AGENT).runtime
        sent = [
            TurnToRecord(agent, f"message {n}", "ok", {"user": "alice", **v}) for n, v in enumerate(variants)
        ]
        outcomes = record_turns(sent)
        stored = {
            line["event_id"]: line
            for path in segment_files(settings.data_dir)
            for line in map(orjson.loads, path.read_bytes().splitlines())
        }
        for turn, outcome in zip(sent, outcomes, strict=True):
            assert isinstance(outcome, RecordedTurn)
            line = stored[outcome.event_id]
            unstamped = _turn_record(agent, turn.user_message, turn.agent_response, turn.fields, {})
            expected = validate(unstamped, now=parse_ts(line["ts"]), writer=CALLER, limits=settings.limits)
            if "event_id" not in unstamped:  # a fresh id either way, of the same time
                assert expected["event_id"][:10] == line["event_id"][:10]
                expected["event_id"] = line["event_id"]
            assert list(line.items()) == list(expected.items())
    assert stored["given-1"]["ts"] == stored[outcomes[0].event_id]["ts"]  # one time for the batch
    assert stored[outcomes[-1].event_id]["ts"] == "2026-01-02T03:04:05.678Z"
    assert outcomes[-1].event_id.startswith(new_event_id(parse_ts("2026-01-02T03:04:05.678Z"))[:10])
