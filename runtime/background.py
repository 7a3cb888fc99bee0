"""Catching up with the log off the request path: a projector thread.

A read must not wait for the projector. When other processes append to the
log (a bulk ingest, the scheduler's compression), catching up can take
seconds or minutes; a process that serves agents (`catch_up = "background"`)
therefore answers every read from the hot store as it is, and a thread of its
own applies the new events behind it, asked by `poke()` (from a read) and on a
short interval for what other processes wrote. A round asked for by a read
starts once the read has returned, so that the read does not share the
interpreter with the catch-up it asked for.

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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tiermem.runtime.applied import AppliedLines
from tiermem.runtime.projector import ProjectionInfo, project_if_free

from tiermem.settings import Settings

POLL_SECONDS = 1.0  # how soon events written by other processes are picked up unprompted


@dataclass
class ProjectorState:
    rounds: int = 0  # finished catch-up rounds (a round that found the lock held counts too)
    applied: int = 0  # events applied by this thread, all rounds
    error: str | None = None  # the last round's failure, if any (the thread keeps running)


class BackgroundProjector:
    """Applies new log events to the hot store on its own thread, never on the caller's.

    A round holds the interpreter lock for most of its time (it is Python
    applying events), so a read running beside it waits for its turn: a poke
    therefore asks for a round that starts when no read of this process is in
    flight any more (`reading()`), i.e. right after the read that poked, or at
    the poll interval whatever the reads (what other processes wrote is never
    left behind for long). `wait()` starts one at once.
    """

    def __init__(self, settings: Settings, poll_seconds: float = POLL_SECONDS) -> None:
        self.settings = settings
        self.poll_seconds = poll_seconds
        self.state = ProjectorState()
        # Lines this process applied to the hot store itself (a server's turns): passed over.
        self.applied = AppliedLines()
        self._cond = threading.Condition()  # guards every field below
        self._requested = 0  # pokes so far; a round started after poke n serves it
        self._served = 0
        self._reads = 0  # reads in flight (`reading()`)
        self._due = False  # start a round now: asked by `wait()`, or a read ended with pokes pending
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> BackgroundProjector:
        with self._cond:
            if self._thread is None:
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="tiermem-projector", daemon=True)
                self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Whether the thread is started (and not stopped)."""
        with self._cond:
            return self._thread is not None

    def poke(self) -> int:
        """Ask for a catch-up; returns a ticket for `wait`. Never blocks.

        The round starts when the next read ends (a caller pokes just before it
        reads), else at the poll interval; `wait()` starts it at once.
        """
        self.start()
        with self._cond:
            self._requested += 1
            return self._requested

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A read in flight: rounds asked for meanwhile start when it (and every other) has ended."""
        with self._cond:
            self._reads += 1
        try:
            yield
        finally:
            with self._cond:
                self._reads -= 1
                if self._reads == 0 and self._requested > self._served:
                    self._due = True
                    self._cond.notify_all()

    def wait(self, ticket: int | None = None, timeout: float | None = None, *, now: bool = True) -> bool:
        """Block until a round begun after `ticket` (default: a new poke) has finished.

        `now`: start that round at once, reads in flight or not (else wait for the
        round the pokes asked for: after the reads, or at the poll). False on timeout.
        """
        ticket = self.poke() if ticket is None else ticket
        with self._cond:
            if now:
                self._due = True
                self._cond.notify_all()
            return self._cond.wait_for(lambda: self._served >= ticket or self._stopping, timeout)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                # A poll that times out runs a round in any case: other processes' events.
                self._cond.wait_for(lambda: self._due or self._stopping, self.poll_seconds)
                if self._stopping:
                    return
                self._due = False
                serving = self._requested
            try:
                info = project_if_free(self.settings, applied=self.applied)
                if info is not None:
                    self.state.applied += info.applied
                self.state.error = None
            except Exception as exc:  # reported in the state; reads go on from the store
                self.state.error = f"{type(exc).__name__}: {exc}"
            with self._cond:
                self.state.rounds += 1
                self._served = max(self._served, serving)
                self._cond.notify_all()


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
