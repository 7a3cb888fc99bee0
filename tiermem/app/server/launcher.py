"""`tiermem serve` in a child process on a loopback port: for tests and benchmarks.

The server is started as a user starts it (`python -m tiermem.app.cli
--data-dir D serve --port P`), by any interpreter (another installation's, for
A/B runs), with the caller's environment less its `TIERMEM_*` and
`ANTHROPIC_*` variables (the data root and options are the arguments; no API
key reaches it) plus what the caller adds. It is ready at the first `GET
/healthz` answered 200, polled while the process is alive, never after a fixed
sleep; a start that fails says why, with the server's own output.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tiermem.errors import TiermemError

READY_WITHIN_S = 120.0  # a bound on a broken start, not a timing expectation
POLL_S = 0.05  # between readiness checks while the port is not yet open


class ServerStartError(TiermemError):
    """The server process exited, or did not answer `/healthz`, before it was ready."""


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without tiermem's settings and API keys, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIERMEM_", "ANTHROPIC_"))}
    env.update(extra or {})
    return env


@dataclass
class LaunchedServer:
    url: str
    port: int
    data_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        """What the server printed so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM (a graceful shutdown), SIGKILL if it has not exited within `timeout`."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def __enter__(self) -> LaunchedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def launch(
    data_dir: Path,
    *,
    port: int | None = None,
    workers: int = 1,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    python: str = sys.executable,
    log_path: Path | None = None,
    command: Sequence[str] | None = None,
    ready_within: float = READY_WITHIN_S,
) -> LaunchedServer:
    """Start `tiermem serve` on `data_dir` and return once it answers `/healthz`.

    `args`: more `serve` options; `env`: variables added to the clean environment;
    `python`: the interpreter (it runs its own installation's tiermem: the child
    starts in the log's directory, not this checkout's, which `-m` would put first
    on its path); `command`: another program serving the same way, in place of
    `python -m tiermem.app.cli ...` (a profiled server). The log defaults to
    `server-PORT.log` beside the data root.
    """
    port = port if port is not None else free_port()
    log_path = log_path if log_path is not None else data_dir.parent / f"server-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = (
        list(command)
        if command is not None
        else [
            python,
            "-m",
            "tiermem.app.cli",
            "--data-dir",
            str(data_dir),
            "serve",
            "--port",
            str(port),
            *(["--workers", str(workers)] if workers != 1 else []),
            *args,
        ]
    )
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=clean_env(env), cwd=log_path.parent
        )
    server = LaunchedServer(f"http://127.0.0.1:{port}", port, data_dir, process, log_path)
    try:
        wait_ready(server, ready_within)
    except BaseException:
        server.stop()
        raise
    return server


def wait_ready(server: LaunchedServer, within: float = READY_WITHIN_S) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServerStartError(f"tiermem serve exited with {server.process.returncode}:\n{server.log()}")
        if _healthy(server.port):
            return
        time.sleep(POLL_S)
    raise ServerStartError(f"tiermem serve not ready after {within:.0f} s:\n{server.log()}")


def _healthy(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:  # not listening yet, or reset while starting
        return False
    finally:
        conn.close()
