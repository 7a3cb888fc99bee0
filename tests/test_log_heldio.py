"""The append path's short system calls: the compiled ones and their stand-ins answer alike.

A `flock` held by another process must make the non-blocking try answer False
(the caller then blocks with the interpreter lock let go), never wait or pass.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tiermem import heldio

# (name, the compiled module's functions or the stand-ins) for each build the tests can see.
IMPLEMENTATIONS: list[tuple[str, dict[str, Any]]] = [
    (
        "stand-ins",
        {
            "flock_now": heldio._flock_now,
            "stat_at": heldio._stat_at,
            "size_of": heldio._size_of,
            "write_now": os.write,
            "pread_now": os.pread,
            "dup_now": os.dup,
            "close_now": os.close,
        },
    )
]
if heldio._held is not None:
    IMPLEMENTATIONS.append(
        ("compiled", {name: getattr(heldio._held, name) for name in IMPLEMENTATIONS[0][1]})
    )

# Holds an exclusive flock on the file until a line arrives on stdin.
HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


@pytest.mark.parametrize(("name", "calls"), IMPLEMENTATIONS, ids=[n for n, _ in IMPLEMENTATIONS])
def test_calls_answer_as_the_ordinary_ones(tmp_path: Path, name: str, calls: dict[str, Any]) -> None:
    path = tmp_path / "seg.jsonl"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    dir_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert calls["write_now"](fd, b"abc\n") == 4
        assert calls["write_now"](fd, memoryview(b"xdefg\n")[1:]) == 5
        assert calls["pread_now"](fd, 100, 0) == b"abc\ndefg\n"
        assert calls["pread_now"](fd, 3, 4) == b"def"
        assert calls["size_of"](fd) == 9
        st = os.stat(path)
        assert calls["stat_at"](dir_fd, "seg.jsonl") == (st.st_ino, 9)
        assert calls["stat_at"](dir_fd, "missing.jsonl") is None
        other = calls["dup_now"](fd)
        assert os.fstat(other).st_ino == st.st_ino and not os.get_inheritable(other)
        calls["close_now"](other)
        with pytest.raises(OSError):
            os.fstat(other)
        # Free: taken at once, and let go.
        assert calls["flock_now"](fd, fcntl.LOCK_EX) is True
        assert calls["flock_now"](fd, fcntl.LOCK_UN) is True
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert holder.stdout is not None and holder.stdin is not None
        try:
            assert holder.stdout.readline() == b"held\n"
            assert calls["flock_now"](fd, fcntl.LOCK_EX) is False  # held elsewhere: no wait, no pass
        finally:
            holder.stdin.write(b"\n")
            holder.stdin.flush()
            assert holder.wait(timeout=60) == 0
        assert calls["flock_now"](fd, fcntl.LOCK_EX) is True
        calls["flock_now"](fd, fcntl.LOCK_UN)
        with pytest.raises(OSError):
            calls["size_of"](other)  # a closed descriptor: the error, as os.fstat gives it
    finally:
        os.close(fd)
        os.close(dir_fd)
