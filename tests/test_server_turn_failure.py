"""A batch of posted turns that fails before its turns are durable answers each of its requests
with the error (none of them is acknowledged), and the batches after it go on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tiermem.runtime.memory import RecordedTurn

from tiermem.app.server import service as service_module
from tiermem.app.server.service import MemoryService
from tiermem.settings import Settings

AGENT = "pump-bot"


def _post(service: MemoryService, n: int) -> asyncio.Future[RecordedTurn]:
    return service.submit_turn(AGENT, "alice", f"message {n}", "reply", {"event_id": f"p{n}"})


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
