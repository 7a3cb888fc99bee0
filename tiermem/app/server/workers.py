"""`tiermem serve --workers N`: N server processes sharing one address.

Each worker is a whole server (its own event loop, memory thread and `Memory`)
that binds the same address with `SO_REUSEPORT`, so the kernel spreads new
connections over the workers. Nothing is shared in memory: the log takes
appends from several processes (each batch is one durable append, checked
for duplicate event ids against the one id index), and the hot store is one
SQLite file that takes several writers and catches each process up with what
the others appended. A single process runs its Python on one core at a time;
workers let the server use more than one.

The parent only supervises: it starts the workers (spawned, not forked: no
thread or open database of the parent is copied), passes SIGTERM or SIGINT on
to them, and stops them all when one of them exits on its own, so a broken
worker is never hidden behind the others.
"""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
from multiprocessing.process import BaseProcess
from types import FrameType

from tiermem.errors import ConfigError
from tiermem.settings import Settings

log = logging.getLogger("tiermem.serve")

STOP_GRACE_S = 30.0
PR_SET_PDEATHSIG = (
    1  # prctl option (linux/prctl.h)  # a worker still running this long after SIGTERM is killed
)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with SO_REUSEPORT, for one worker to listen on."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


def _stop_with_parent() -> None:
    """Ask Linux to send this worker SIGTERM when the supervising parent dies (even by SIGKILL),
    so no worker goes on serving alone; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _worker(
    settings: Settings, host: str, port: int, max_body_bytes: int, log_level: str, parent: int
) -> None:
    _stop_with_parent()
    if os.getppid() != parent:  # the parent died before the request above took effect
        return
    import uvicorn

    from tiermem.app.server.app import application, uvicorn_config

    sock = listening_socket(host, port)
    app = application(settings, max_body_bytes=max_body_bytes, server_process=True)
    config = uvicorn_config(app, host, port, log_level)
    uvicorn.Server(config).run(sockets=[sock])


def serve_workers(
    settings: Settings, *, host: str, port: int, max_body_bytes: int, log_level: str, workers: int
) -> int:
    """Run `workers` server processes on host:port until SIGTERM/SIGINT; the exit status to return."""
    # Bound here first: a busy address is reported once, in one line, and port 0 becomes one
    # port for every worker. Never listened on, so the kernel gives it no connection.
    reserved = listening_socket(host, port)
    port = int(reserved.getsockname()[1])
    context = multiprocessing.get_context("spawn")
    processes: list[BaseProcess] = [
        context.Process(
            target=_worker,
            args=(settings, host, port, max_body_bytes, log_level, os.getpid()),
            name=f"tiermem-serve-{n}",
        )
        for n in range(workers)
    ]
    stopping = False

    def stop(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        for process in processes:
            process.start()
        print(f"tiermem serve: {workers} workers on http://{host}:{port}", flush=True)
        while not stopping:
            ended = multiprocessing.connection.wait([p.sentinel for p in processes], timeout=0.5)
            if ended and not stopping:  # (when stopping, a worker may have had the signal first)
                log.error("a worker exited (status %s): stopping the others", _first_exit(processes))
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stop_all(processes)
        reserved.close()
    return 0 if stopping else 1


def _first_exit(processes: list[BaseProcess]) -> int | None:
    return next((p.exitcode for p in processes if p.exitcode is not None), None)


def _stop_all(processes: list[BaseProcess]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()  # SIGTERM: uvicorn shuts down cleanly, closing the memory
    for process in processes:
        process.join(STOP_GRACE_S)
        if process.is_alive():
            process.kill()
            process.join()
