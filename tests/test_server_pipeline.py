"""The server writes the next batch of turns while the last one's fsync runs; no turn is
answered before a fsync that covers its own bytes.

`tiermem.deferred_sync.Syncer` makes written appends durable: a point below the size an
earlier fsync of the same file began at is covered by it; one written after needs its own;
after a failed fsync, nothing written before the failure is ever reported durable.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers_log import segment_files

from tiermem import deferred_sync
from tiermem.app.server import service as service_module
from tiermem.app.server.service import MemoryService
from tiermem.deferred_sync import Syncer
from tiermem.errors import StorageError
from tiermem.eventlog import EventLog
from tiermem.events import CALLER, validate
from tiermem.settings import Settings

AGENT = "pipe-bot"


def _events(prefix: str, n: int) -> list[dict[str, Any]]:
    return [
        validate(
            {
                "type": "interaction",
                "agent_id": AGENT,
                "user_message": f"{prefix} {i}",
                "agent_response": "ok",
                "event_id": f"{prefix}-{i}",
            },
            writer=CALLER,
        )
        for i in range(n)
    ]


def _is_segment(fd: int) -> bool:
    """Whether `fd` is a log segment (the log also fsyncs its index's lag list, its rejects)."""
    return os.readlink(f"/proc/self/fd/{fd}").endswith(".jsonl")


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch, fail: Callable[[], bool] = lambda: False) -> list[int]:
    """Each fsync of a segment, as the size of the file when it began."""
    sizes: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if not _is_segment(fd):
            return real_fsync(fd)
        sizes.append(os.fstat(fd).st_size)
        if fail():
            raise OSError(5, "Input/output error")
        return real_fsync(fd)

    monkeypatch.setattr(deferred_sync.os, "fsync", fsync)
    return sizes


def test_a_fsync_covers_what_was_written_before_it_began_and_nothing_after(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = _record_fsyncs(monkeypatch)
    syncer = Syncer("always")
    with EventLog(settings) as log:
        _, first = log.write_validated(_events("a", 3))
        _, second = log.write_validated(_events("b", 2))  # written before the first fsync
        syncer.make_durable(first)
        assert len(sizes) == 1 and sizes[0] >= second[0][1].end
        syncer.make_durable(second)  # covered: no fsync of its own
        assert len(sizes) == 1
        _, third = log.write_validated(_events("c", 1))
        syncer.make_durable(third)
        assert len(sizes) == 2 and sizes[1] >= third[0][1].end > sizes[0]
    assert syncer.fsyncs == 2


def test_after_a_failed_fsync_nothing_written_before_it_is_reported_durable(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing = [True]
    sizes = _record_fsyncs(monkeypatch, fail=lambda: failing[0])
    syncer = Syncer("always")
    with EventLog(settings) as log:
        _, first = log.write_validated(_events("a", 3))
        _, second = log.write_validated(_events("b", 2))
        with pytest.raises(StorageError):
            syncer.make_durable(first)
        failing[0] = False
        # The kernel reports a failed write-back once: a second fsync would succeed for lost pages.
        with pytest.raises(StorageError):
            syncer.make_durable(second)
        assert len(sizes) == 1
        _, third = log.write_validated(_events("c", 1))  # written after the failure: its own fsync
        syncer.make_durable(third)
        assert len(sizes) == 2


def test_the_next_batch_is_written_while_the_last_ones_fsync_runs_and_each_answer_follows_its_own(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch's fsync is held until a second batch has been written; every answer is
    given only once a fsync that began past its turn's line has returned."""
    steps: list[str] = []
    durable: dict[int, int] = {}  # inode -> bytes flushed by fsyncs that returned
    written = [threading.Event(), threading.Event()]  # the first batch written, the second
    real_write = service_module.write_turns
    real_fsync = os.fsync

    def write_turns(*args: Any) -> Any:
        done = real_write(*args)
        n = sum(event.is_set() for event in written)
        steps.append(f"written {n + 1}")
        if n < 2:
            written[n].set()
        return done

    def fsync(fd: int) -> None:
        if not _is_segment(fd):
            return real_fsync(fd)
        st = os.fstat(fd)
        if not durable:  # the first fsync of a segment waits for the next batch to be written
            assert written[1].wait(timeout=60)
        real_fsync(fd)
        steps.append("fsync returned")
        durable[st.st_ino] = max(durable.get(st.st_ino, 0), st.st_size)
        return None

    answered: list[str] = []
    early: list[str] = []  # answered before a fsync covered them
    real_record_batch = MemoryService._record_batch

    def record_batch(self: MemoryService, batch: list[Any], settle: Any) -> None:
        def checked(batch: list[Any], outcomes: Any) -> None:
            # At the moment the answers are given: each turn's line ends within what a fsync
            # flushed (noted here, asserted below: an error on this thread would answer nobody).
            for outcome in outcomes:
                path = _segment_holding(settings, outcome.event_id)
                end = _line_end(path, outcome.event_id)
                if end > durable.get(path.stat().st_ino, 0):
                    early.append(outcome.event_id)
                answered.append(outcome.event_id)
            steps.append(f"answered {len(outcomes)}")
            settle(batch, outcomes)

        real_record_batch(self, batch, checked)

    monkeypatch.setattr(service_module, "write_turns", write_turns)
    monkeypatch.setattr(deferred_sync.os, "fsync", fsync)
    monkeypatch.setattr(MemoryService, "_record_batch", record_batch)

    async def serve() -> None:
        svc = MemoryService(settings)
        try:
            await svc.warm()
            first = asyncio.ensure_future(svc.record_turn(AGENT, "alice", "one", "ok", {"event_id": "t-1"}))
            await asyncio.to_thread(written[0].wait, 60)  # batch 1 written: its fsync now waits
            later = [
                svc.record_turn(AGENT, "bob", f"two {i}", "ok", {"event_id": f"t-2-{i}"}) for i in range(5)
            ]
            await asyncio.gather(first, *later)
        finally:
            svc.close()

    asyncio.run(serve())
    assert early == []
    assert steps[:3] == ["written 1", "written 2", "fsync returned"]  # batch 2 written before batch 1 durable
    assert sorted(answered) == ["t-1", *(f"t-2-{i}" for i in range(5))]


def _segment_holding(settings: Settings, event_id: str) -> Path:
    needle = f'"event_id":"{event_id}"'.encode()
    return next(p for p in segment_files(settings.data_dir) if needle in p.read_bytes())


def _line_end(path: Path, event_id: str) -> int:
    data = path.read_bytes()
    at = data.index(f'"event_id":"{event_id}"'.encode())
    return data.index(b"\n", at) + 1
