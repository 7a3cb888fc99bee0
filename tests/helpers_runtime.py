"""Helpers for the runtime tests: events and a memory on a fresh data root."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

from tiermem.eventlog import EventLog
from tiermem.settings import Settings


def episode(agent_id: str, name: str, summary: str, **fields: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "episode",
        "agent_id": agent_id,
        "name": name,
        "summary": summary,
        "start_ts": fields.pop("start_ts", "2026-03-01T10:00:00Z"),
        "end_ts": fields.pop("end_ts", "2026-03-01T11:00:00Z"),
        "importance": fields.pop("importance", 7),
        "source_event_ids": fields.pop("source_event_ids", ["src-" + name.replace(" ", "-")]),
        "participants": fields.pop("participants", []),
        "key_quotes": fields.pop("key_quotes", []),
    }
    event.update(fields)
    return event


def quotes(*turns: tuple[str, str, str]) -> list[dict[str, str]]:
    """An episode's key quotes from (event id, speaker, text) triples."""
    return [{"speaker": who, "text": text, "event_id": eid} for eid, who, text in turns]


def small_talk_days(
    agent_id: str, speakers: tuple[str, str], chores: str, participant: str
) -> list[dict[str, Any]]:
    """Twelve episodes of small talk on other days (April 2023), so that a question's words are rare.

    `chores`: what the second speaker did each day (kept off the question's topic by the caller).
    """
    first, second = speakers
    return [
        episode(
            agent_id,
            f"day {k}",
            "small talk",
            key_quotes=quotes(
                (f"x{k}", first, f"The weather on day {k} was grey and the bus was late again."),
                (f"y{k}", second, f"I baked bread number {k} and {chores}."),
            ),
            participants=[participant],
            start_ts=f"2023-04-{k + 1:02d}T10:00:00Z",
            end_ts=f"2023-04-{k + 1:02d}T11:00:00Z",
        )
        for k in range(12)
    ]


def interaction(
    agent_id: str, user_message: str, agent_response: str = "ok", **fields: Any
) -> dict[str, Any]:
    return {
        "type": "interaction",
        "agent_id": agent_id,
        "user_message": user_message,
        "agent_response": agent_response,
        **fields,
    }


def append(settings: Settings, *records: dict[str, Any]) -> list[str]:
    with EventLog(settings) as log:
        result = log.append_many(records)
        assert not result.rejected, result.rejected
        return [r.event_id for r in result.results]


@contextmanager
def projector_held(settings: Settings) -> Iterator[None]:
    """Hold the data root's projector lock, as a projector in another process would.

    A `Memory`'s projector thread skips its rounds meanwhile, so what other
    processes append stays unprojected until the block ends (or `refresh()`,
    which waits for the lock, runs after it).
    """
    settings.locks_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(settings.locks_dir / "projector.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class Rows:
    """The episode rows `TEXTS.prepared` reads, without a database."""

    def __init__(self, rows: list[tuple[str, ...]]) -> None:
        self.rows = rows

    def execute(self, sql: str, ids: Any = ()) -> SimpleNamespace:
        found = [r for r in self.rows if r[0] in ids]
        return SimpleNamespace(fetchall=lambda: found, fetchone=lambda: (0,))


def _open_store(path: str) -> None:
    from tiermem.runtime.hotstore import connect

    connect(path).close()


def open_in_processes(path: Any, processes: int = 2) -> None:
    """Open the hot store at `path` (making what an older store lacks) from several spawned
    processes at once; each must exit cleanly."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_open_store, args=(str(path),)) for _ in range(processes)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
