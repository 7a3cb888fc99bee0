"""`tiermem serve --workers 2`: two server processes on one port, one log, no turn twice.

Turns are posted over fresh connections (the kernel spreads them over the
workers), each event id by several threads at once, so that both processes
receive copies of the same turn: every answer is 201 with the turn's id and
the log holds each id exactly once. Stopping the parent stops its workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import httpx2
import orjson
from helpers_log import segment_files
from helpers_server import make_key, running_server

AGENT = "workers-bot"
TURNS = 12
THREADS = 4
STOP_LIMIT_S = 60.0  # a bound on a broken shutdown, not a timing expectation


def workers_of(pid: int) -> list[int]:
    """The worker processes of a server (multiprocessing's resource tracker is a child too)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        for child in (task / "children").read_text().split():
            if b"resource_tracker" not in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
    return found


def test_two_workers_share_the_port_and_store_each_turn_once(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = make_key(data_dir, agent=AGENT)
    answers: list[tuple[int, str]] = []
    lock = threading.Lock()
    with running_server(data_dir, "--workers", "2") as server:
        workers = workers_of(server.process.pid)
        assert len(workers) == 2

        def post(thread: int) -> None:
            order = range(TURNS) if thread % 2 else reversed(range(TURNS))
            for i in order:
                body = {
                    "user": "alice",
                    "user_message": f"turn {i}",
                    "agent_response": "ok",
                    "event_id": f"w-{i}",
                }
                # A new connection per request: the kernel picks a worker for each.
                with httpx2.Client(base_url=server.url, timeout=60) as client:
                    response = client.post(
                        f"/v1/agents/{AGENT}/turns", json=body, headers={"Authorization": f"Bearer {key}"}
                    )
                with lock:
                    answers.append((response.status_code, response.json()["event_id"]))

        threads = [threading.Thread(target=post, args=(t,)) for t in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=60) == 0
        for pid in workers:  # the parent waited for them: they are gone, not orphaned
            assert not Path(f"/proc/{pid}").exists()
        assert "Traceback" not in server.log()

    assert Counter(status for status, _ in answers) == {201: TURNS * THREADS}
    assert Counter(event_id for _, event_id in answers) == {f"w-{i}": THREADS for i in range(TURNS)}
    stored = [
        orjson.loads(line)["event_id"]
        for path in segment_files(data_dir)
        for line in path.read_bytes().splitlines()
        if line.endswith(b"}")
    ]
    assert Counter(stored) == {f"w-{i}": 1 for i in range(TURNS)}


def test_workers_stop_when_their_parent_is_killed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with running_server(data_dir, "--workers", "2") as server:
        workers = workers_of(server.process.pid)
        assert len(workers) == 2
        try:
            server.process.kill()  # no chance to stop them itself
            server.process.wait()
            deadline = time.monotonic() + STOP_LIMIT_S
            while any(Path(f"/proc/{pid}").exists() for pid in workers) and time.monotonic() < deadline:
                time.sleep(0.05)  # polling for the kernel's SIGTERM to take effect
            assert not any(Path(f"/proc/{pid}").exists() for pid in workers)
        finally:
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
