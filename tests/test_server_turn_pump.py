"""The order of a server's batches: the next one is handed to the memory thread as soon as the
last one is durable, before that one's requests are answered; a batch that fails before its
turns are durable answers each of its requests with the error, and the batches go on."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from tiermem.runtime.memory import RecordedTurn

from tiermem.app.server import service as service_module
from tiermem.app.server.service import MemoryService
from tiermem.settings import Settings

AGENT = "pump-bot"


def _post(service: MemoryService, n: int) -> asyncio.Future[RecordedTurn]:
    return service.submit_turn(AGENT, "alice", f"message {n}", "reply", {"event_id": f"p{n}"})


def test_the_next_batch_starts_before_the_last_one_is_answered(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = MemoryService(settings)
    order: list[str] = []
    real_next, real_settle, real_record = (
        service._next_batch,
        service_module._settle,
        service._record_batch,
    )
    second_queued = threading.Event()
    loop_of: list[asyncio.AbstractEventLoop] = []
    later: list[asyncio.Future[RecordedTurn]] = []

    def next_batch() -> list[Any]:
        batch = real_next()
        order.append(f"start {len(batch)}")
        return batch

    def settle(batch: list[Any], outcomes: list[Any]) -> None:
        order.append(f"answer {len(batch)}")
        real_settle(batch, outcomes)

    def record_batch(batch: list[Any], on_durable: Callable[[Any], None]) -> Any:
        if len(order) == 1:  # the first batch: three more turns arrive while it is written

            def queue_more() -> None:
                later.extend(_post(service, n) for n in range(5, 8))
                second_queued.set()

            loop_of[0].call_soon_threadsafe(queue_more)
            assert second_queued.wait(30)
        return real_record(batch, on_durable)

    monkeypatch.setattr(service, "_next_batch", next_batch)
    monkeypatch.setattr(service_module, "_settle", settle)
    monkeypatch.setattr(service, "_record_batch", record_batch)

    async def post_all() -> list[RecordedTurn]:
        loop_of.append(asyncio.get_running_loop())
        first = [_post(service, n) for n in range(5)]
        done = await asyncio.gather(*first)
        assert len(later) == 3  # queued while the first batch was written
        return [*done, *await asyncio.gather(*later)]

    try:
        recorded = asyncio.run(post_all())
        assert [r.event_id for r in recorded] == [f"p{n}" for n in range(8)]
        assert order == ["start 5", "start 3", "answer 5", "answer 3"]
    finally:
        service.close()


def test_a_batch_failing_before_its_turns_are_durable_answers_each_with_the_error(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = MemoryService(settings)
    real_record_turns = service_module.record_turns
    failures = [OSError("disk full")]

    def record_turns(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_record_turns(*args, **kwargs)

    monkeypatch.setattr(service_module, "record_turns", record_turns)

    async def post(first: int, last: int) -> list[Any]:
        return await asyncio.gather(*(_post(service, n) for n in range(first, last)), return_exceptions=True)

    try:
        failed = asyncio.run(post(0, 4))
        assert [type(o) for o in failed] == [OSError] * 4
        assert not service._draining  # nothing holds the queue: the next turn starts a batch
        after = asyncio.run(post(4, 6))
        assert [getattr(o, "event_id", None) for o in after] == ["p4", "p5"]  # the batches go on
        assert service.turn_batches == 2
    finally:
        service.close()


def test_a_batch_failing_after_its_turns_are_durable_is_answered_and_logged(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service = MemoryService(settings)
    real_record_turns = service_module.record_turns

    def record_turns(*args: Any, **kwargs: Any) -> Any:
        real_record_turns(*args, **kwargs)
        raise RuntimeError("after the append")

    monkeypatch.setattr(service_module, "record_turns", record_turns)

    async def post_all() -> list[Any]:
        outcomes = await asyncio.gather(*(_post(service, n) for n in range(3)), return_exceptions=True)
        # Once a later call on the memory thread returns, the batch's own end has been seen.
        await asyncio.get_running_loop().run_in_executor(service._executor, lambda: None)
        return outcomes

    try:
        with caplog.at_level(logging.ERROR, logger="tiermem.serve"):
            outcomes = asyncio.run(post_all())
        assert [getattr(o, "event_id", None) for o in outcomes] == ["p0", "p1", "p2"]
    finally:
        service.close()
    assert any("failed afterwards" in r.getMessage() for r in caplog.records)
