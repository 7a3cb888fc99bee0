"""Job locks: one exclusive `flock` per job name and data root, shared by every process.

A job holds `<data>/locks/job-<name>.lock` while it runs, so a scheduled run and
a manual run of the same job never overlap, across processes. The lock file
carries the holder's pid and start time so that whoever is refused can be told
by whom. Components take these locks around their own batch work; the
application layer decides which commands share which lock.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson

from tiermem.errors import AlreadyRunningError
from tiermem.ids import format_ts, utcnow
from tiermem.settings import Settings

# Locks this process holds: name -> (thread id, depth). flock conflicts between two
# open files of the same process, so a nested take of the same lock by the same
# thread (e.g. the CLI wrapper around a job function that also locks) is counted
# here instead of deadlocking against itself.
_held: dict[str, tuple[int, int]] = {}
_held_guard = threading.Lock()


def lock_path(settings: Settings, name: str) -> Path:
    return settings.locks_dir / f"job-{name}.lock"


def read_lock_holder(path: Path) -> str:
    """A short description of who holds the lock file at `path` ("pid 123 since …"), best effort."""
    try:
        info = orjson.loads(path.read_bytes() or b"{}")
    except (OSError, orjson.JSONDecodeError):
        return "another process"
    if not isinstance(info, dict) or "pid" not in info:
        return "another process"
    what = f" ({info['what']})" if info.get("what") else ""
    return f"pid {info['pid']}{what} since {info.get('since', '?')}"


def try_flock(path: Path, what: str) -> int | None:
    """Take an exclusive flock on `path` without waiting; return the fd, or None when it is held.

    The holder's pid and start time are written into the file for the error
    message of whoever is refused next.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    stamp = orjson.dumps({"pid": os.getpid(), "what": what, "since": format_ts(utcnow())})
    os.ftruncate(fd, 0)
    os.pwrite(fd, stamp, 0)
    return fd


def release_flock(fd: int) -> None:
    # Truncate before unlocking so a stale holder description never outlives the lock.
    try:
        os.ftruncate(fd, 0)
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def lock_is_held(path: Path) -> bool:
    """True when some process holds the flock on `path` right now (probes without keeping it)."""
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return True
        raise
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@contextmanager
def job_lock(settings: Settings, name: str, *, wait_seconds: float = 0.0, what: str = "") -> Iterator[None]:
    """Hold the job lock `name` on this data root for the duration of the block.

    Raises AlreadyRunningError naming the holder when another process (or
    another thread of this one) has it and it does not come free within
    `wait_seconds`. Re-entrant for the thread that already holds it.
    """
    me = threading.get_ident()
    with _held_guard:
        holder = _held.get(name)
        if holder is not None and holder[0] == me:
            _held[name] = (me, holder[1] + 1)
            nested = True
        else:
            nested = False
    if nested:
        try:
            yield
        finally:
            with _held_guard:
                tid, depth = _held[name]
                _held[name] = (tid, depth - 1)
        return

    path = lock_path(settings, name)
    deadline = time.monotonic() + wait_seconds
    fd: int | None = None
    while True:
        with _held_guard:
            taken_here = name in _held
        if not taken_here:
            fd = try_flock(path, what or name)
            if fd is not None:
                break
        if time.monotonic() >= deadline:
            who = "another thread of this process" if taken_here else read_lock_holder(path)
            raise AlreadyRunningError(
                f"job {name!r} is already running on {settings.data_dir} ({who}); "
                "it will be picked up again when that run finishes"
            )
        time.sleep(0.1)
    with _held_guard:
        _held[name] = (me, 1)
    try:
        yield
    finally:
        with _held_guard:
            _held.pop(name, None)
        release_flock(fd)
