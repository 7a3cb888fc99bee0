"""Catching up with the log off the request path: a projector thread.

A read must not wait for the projector. When other processes append to the
log (a bulk ingest, the scheduler's compression), catching up can take
seconds or minutes; a process that serves agents (`catch_up = "background"`)
therefore answers every read from the hot store as it is, and a thread of its
own applies the new events behind it, woken by `poke()` (before a read, after
a write) and on a short interval for what other processes wrote.

What an agent writes itself is never behind: `AgentMemory.append` applies
its events to the hot store before returning, so the turn just recorded is
in the next context whatever the thread is doing (the projector applying the
same events again later changes nothing).

Lease: the projector lock is taken without waiting. When another process
holds it (its own projector, a `tiermem project`), this round is skipped: that
process is catching up the same store, so there is nothing to queue behind.
"""

from __future__ import annotations

import fcntl
import os
import threading
from dataclasses import dataclass

from tiermem.runtime.projector import ProjectionInfo, project_if_free

from tiermem.settings import Settings

POLL_SECONDS = 1.0  # how soon events written by other processes are picked up unprompted


@dataclass
class ProjectorState:
    rounds: int = 0  # finished catch-up rounds (a round that found the lock held counts too)
    applied: int = 0  # events applied by this thread, all rounds
    error: str | None = None  # the last round's failure, if any (the thread keeps running)


class BackgroundProjector:
    """Applies new log events to the hot store on its own thread, never on the caller's."""

    def __init__(self, settings: Settings, poll_seconds: float = POLL_SECONDS) -> None:
        self.settings = settings
        self.poll_seconds = poll_seconds
        self.state = ProjectorState()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Condition()
        self._requested = 0  # pokes so far; a round started after poke n serves it
        self._served = 0
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundProjector:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tiermem-projector", daemon=True)
            self._thread.start()
        return self

    def poke(self) -> int:
        """Ask for a catch-up soon; returns a ticket for `wait(ticket)`. Never blocks."""
        self.start()
        with self._done:
            self._requested += 1
            ticket = self._requested
        self._wake.set()
        return ticket

    def wait(self, ticket: int | None = None, timeout: float | None = None) -> bool:
        """Block until a round begun after `ticket` (default: a new poke) has finished."""
        ticket = self.poke() if ticket is None else ticket
        with self._done:
            return self._done.wait_for(lambda: self._served >= ticket or self._stop.is_set(), timeout)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_seconds)
            self._wake.clear()
            if self._stop.is_set():
                break
            with self._done:
                serving = self._requested
            try:
                info = project_if_free(self.settings)
                if info is not None:
                    self.state.applied += info.applied
                self.state.error = None
            except Exception as exc:  # reported in the state; reads go on from the store
                self.state.error = f"{type(exc).__name__}: {exc}"
            with self._done:
                self.state.rounds += 1
                self._served = max(self._served, serving)
                self._done.notify_all()


def lock_is_free(settings: Settings) -> bool:
    """True when no projector holds the data root's projector lock right now (for tests and status)."""
    settings.locks_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(settings.locks_dir / "projector.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing releases a lock taken here
    return True


__all__ = ["BackgroundProjector", "ProjectionInfo", "ProjectorState", "lock_is_free"]
