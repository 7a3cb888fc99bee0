"""Short system calls on the log's own files that keep the interpreter lock (`_heldio.c`).

With several threads appending (group commit), each system call that lets go of
the interpreter lock while others wait for it costs a hand-off to another thread
and back, more than the call itself. The compiled versions keep the lock; they
are used only for calls that do not wait on another process (a `flock` is tried
without blocking first). Without a C compiler the build leaves them out, and the
ordinary calls of `os` and `fcntl` stand in, with the same results.
"""

from __future__ import annotations

import fcntl
import importlib
import os
from collections.abc import Callable
from types import ModuleType

_held: ModuleType | None
try:
    _held = importlib.import_module("tiermem._heldio")
except ImportError:  # built without a C compiler
    _held = None


def _flock_now(fd: int, op: int) -> bool:
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _stat_at(dir_fd: int, name: str) -> tuple[int, int] | None:
    try:
        st = os.stat(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size


def _size_of(fd: int) -> int:
    return os.fstat(fd).st_size


# flock_now(fd, op) -> True when done, False when another holder would make it wait.
flock_now: Callable[[int, int], bool] = _held.flock_now if _held else _flock_now
# stat_at(dir_fd, name) -> (inode, size), or None when there is no such file.
stat_at: Callable[[int, str], tuple[int, int] | None] = _held.stat_at if _held else _stat_at
size_of: Callable[[int], int] = _held.size_of if _held else _size_of
write_now: Callable[[int, bytes | memoryview], int] = _held.write_now if _held else os.write
pread_now: Callable[[int, int, int], bytes] = _held.pread_now if _held else os.pread
dup_now: Callable[[int], int] = _held.dup_now if _held else os.dup
close_now: Callable[[int], None] = _held.close_now if _held else os.close


def available() -> bool:
    return _held is not None


def lock(fd: int) -> None:
    """An exclusive `flock`: at once when nobody holds it, else the blocking call (lock let go)."""
    if not flock_now(fd, fcntl.LOCK_EX):
        fcntl.flock(fd, fcntl.LOCK_EX)


def unlock(fd: int) -> None:
    flock_now(fd, fcntl.LOCK_UN)  # never waits


# Writes up to this size keep the lock: a record or a small group goes into the page cache in
# microseconds. A larger one may wait (the kernel throttles writers when dirty pages pile up),
# and a wait with the interpreter lock held would stop every other thread of the process.
HELD_WRITE_MAX = 64 * 1024


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data`: with the lock kept when it is small (see `HELD_WRITE_MAX`)."""
    write = write_now if len(data) <= HELD_WRITE_MAX else os.write
    n = write(fd, data)
    if n != len(data):  # a short write: the rest, as many times as it takes
        view = memoryview(data)[n:]
        while view:
            view = view[write(fd, view) :]
