"""Load on `tiermem serve`: N concurrent clients posting turns for T seconds against a real server.

    .venv/bin/python bench/bench_serve.py                  # 64 clients, 60 s
    .venv/bin/python bench/bench_serve.py --clients 8 --seconds 5 --json
    .venv/bin/python bench/bench_serve.py --workers 2      # two server processes on one port
    .venv/bin/python bench/bench_serve.py --server-python ../main-export/.venv/bin/python  # A/B
    .venv/bin/python bench/bench_serve.py --seconds 20 --profile /tmp/serve  # cProfile per thread

Starts `tiermem serve` in a subprocess on a free loopback port over a fresh
data root (default fsync policy: every append durable before its 201), then
runs the clients in one asyncio process: each posts a turn, waits for the
answer, posts the next, until the time is up (bounded: at most one request in
flight per client, nothing sent after the deadline). Reports requests/s,
latency p50/p99 of the 201s, errors, and "lost": the 201s minus the
interactions the log holds afterwards (counted with `tiermem sql`), which must
be 0 — every acknowledged turn is in the log, once.

Beside the latencies: the CPU time of the server (its event-loop thread and
its other threads apart, every worker process included) and of the load
generator per acknowledged turn, the load average before and after, and the
disk's raw fsync rate measured just before and just after the load (one
thread writing 512 bytes and fsyncing, in the data root's file system), so
that a run on a busy machine can be read against what the disk gave then.
`--server-python` runs the server with another installation's interpreter
(e.g. an export of `main` with its own venv) for interleaved A/B runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
import orjson
import uvloop

from tiermem.app.api import Memory
from tiermem.app.server.keys import KeyStore
from tiermem.app.server.launcher import LaunchedServer, free_port, launch
from tiermem.settings import resolve_settings

AGENT = "bench-bot"


def start_server(
    data_dir: Path,
    log_path: Path,
    python: str = sys.executable,
    workers: int = 1,
    profile: str | None = None,
    env: dict[str, str] | None = None,
    trace: str | None = None,
) -> LaunchedServer:
    """The server under test, by the project's launcher (`--profile`: the profiled server,
    `--trace`: the server that times each turn's parts)."""
    port = free_port()
    command = None
    if profile is not None:
        profiled = str(Path(__file__).resolve().parent / "serve_profiled.py")
        command = [python, profiled, str(data_dir), str(port), profile]
    elif trace is not None:
        traced = str(Path(__file__).resolve().parent / "serve_traced.py")
        command = [python, traced, str(data_dir), str(port), trace]
    return launch(
        data_dir, port=port, workers=workers, env=env, python=python, log_path=log_path, command=command
    )


def turn_body(n: int, i: int) -> dict[str, Any]:
    return {
        "user": f"user-{n % 16}",
        "user_message": f"client {n} turn {i}: where is my order?",
        "agent_response": "It ships tomorrow.",
        "session_id": f"bench-{n}",
        "model": "claude-sonnet-5",
        "usage": {"input_tokens": 900, "output_tokens": 120},
    }


def count_error(errors: dict[str, int], what: str) -> None:
    errors[what] = errors.get(what, 0) + 1


async def one_client(
    client: httpx2.AsyncClient, n: int, deadline: float, latencies: list[float], errors: dict[str, int]
) -> int:
    ok = 0
    i = 0
    while time.monotonic() < deadline:
        body = turn_body(n, i)
        i += 1
        t0 = time.perf_counter()
        try:
            response = await client.post(f"/v1/agents/{AGENT}/turns", json=body)
        except httpx2.TransportError as exc:
            count_error(errors, type(exc).__name__)
            continue
        elapsed = time.perf_counter() - t0
        if response.status_code == 201:
            ok += 1
            latencies.append(elapsed)
        else:
            count_error(errors, str(response.status_code))
    return ok


async def one_raw_client(
    port: int, key: str, n: int, deadline: float, latencies: list[float], errors: dict[str, int]
) -> int:
    """The same requests as `one_client` over one keep-alive connection, written and parsed by hand.

    A general HTTP client spends about a millisecond of CPU per request in Python; the load
    generator shares the server's two cores, so that much would measure the client. This one
    sends pre-formatted bytes and reads the status line, the headers and `Content-Length` bytes.
    """
    head = (
        f"POST /v1/agents/{AGENT}/turns HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: "
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    ok = 0
    i = 0
    try:
        while time.monotonic() < deadline:
            body = json.dumps(turn_body(n, i)).encode()
            i += 1
            t0 = time.perf_counter()
            writer.write(head + str(len(body)).encode() + b"\r\n\r\n" + body)
            try:
                headers = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                count_error(errors, type(exc).__name__)
                return ok
            status = headers[9:12].decode()
            length = 0
            for line in headers.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            elapsed = time.perf_counter() - t0
            if status == "201":
                ok += 1
                latencies.append(elapsed)
            else:
                count_error(errors, status)
    finally:
        writer.close()
    return ok


class TurnPoster(asyncio.Protocol):
    """One closed-loop client on one keep-alive connection, as an asyncio protocol: the same
    requests as `one_raw_client`, each answer parsed (status line, `Content-Length`, the body)
    and checked (a 201's body is a JSON object naming the turn's `event_id` and
    `memory_level`) as its bytes arrive, without a coroutine and a stream reader per
    request, so that the load generator takes less of the two cores it shares with the server."""

    def __init__(
        self, head: bytes, n: int, deadline: float, latencies: list[float], errors: dict[str, int]
    ) -> None:
        self.head = head
        self.n = n
        self.i = 0
        self.deadline = deadline
        self.latencies = latencies
        self.errors = errors
        self.ok = 0
        self.buffer = b""
        self.sent_at = 0.0
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        # The body bytes `json.dumps(turn_body(n, i))` gives, with only the turn number varying.
        text = json.dumps(turn_body(n, 0)).encode()
        self.before, self.after = text.split(b" turn 0: ", 1)
        assert self.body(12345) == json.dumps(turn_body(n, 12345)).encode()

    def body(self, i: int) -> bytes:
        return b"%s turn %d: %s" % (self.before, i, self.after)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.send()

    def send(self) -> None:
        assert self.transport is not None
        if time.monotonic() >= self.deadline:
            self.transport.close()
            return
        body = self.body(self.i)
        self.i += 1
        self.sent_at = time.perf_counter()
        self.transport.write(b"%s%d\r\n\r\n%s" % (self.head, len(body), body))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buffer[:end]
        length = 0
        for line in head.split(b"\r\n")[1:]:
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        if len(self.buffer) < end + 4 + length:
            return
        elapsed = time.perf_counter() - self.sent_at
        body, self.buffer = self.buffer[end + 4 : end + 4 + length], self.buffer[end + 4 + length :]
        status = head[9:12].decode()
        if status == "201" and head.startswith(b"HTTP/1.1 201 ") and _answered_turn(body):
            self.ok += 1
            self.latencies.append(elapsed)
        else:
            count_error(self.errors, status if status != "201" else "201 with an unexpected body")
        self.send()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None or time.monotonic() < self.deadline:
            count_error(self.errors, type(exc).__name__ if exc else "connection closed by the server")
        if not self.done.done():
            self.done.set_result(self.ok)


def _answered_turn(body: bytes) -> bool:
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return (
        type(answer) is dict
        and type(answer.get("event_id")) is str
        and len(answer["event_id"]) == 26
        and answer.get("memory_level") == "global"
    )


async def one_protocol_client(
    port: int, key: str, n: int, deadline: float, latencies: list[float], errors: dict[str, int]
) -> int:
    head = (
        f"POST /v1/agents/{AGENT}/turns HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\nContent-Length: "
    ).encode()
    loop = asyncio.get_running_loop()
    _, client = await loop.create_connection(
        lambda: TurnPoster(head, n, deadline, latencies, errors), "127.0.0.1", port
    )
    return await client.done


def _cpu_s(stat_path: Path) -> float:
    """User + system CPU seconds from a /proc .../stat file (0 when it is gone)."""
    try:
        fields = stat_path.read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree(pid: int) -> list[int]:
    """The process and its descendants (uvicorn's worker processes), Linux /proc."""
    pids = [pid]
    for p in pids:
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                pids += [int(c) for c in (task / "children").read_text().split()]
            except FileNotFoundError:
                continue
    return pids


def server_cpu(pid: int) -> dict[tuple[int, int], float]:
    """CPU seconds of every thread of the server's processes, by (process, thread)."""
    cpu: dict[tuple[int, int], float] = {}
    for p in _tree(pid):
        for task in Path(f"/proc/{p}/task").glob("*"):
            cpu[(p, int(task.name))] = _cpu_s(task / "stat")
    return cpu


def cpu_split(before: dict[tuple[int, int], float], after: dict[tuple[int, int], float]) -> dict[str, float]:
    """CPU seconds spent between two `server_cpu` readings: event-loop threads (each process's
    main thread), other threads (the memory thread, SQLite's and the log's helpers), and all."""
    loop = other = 0.0
    for (proc, thread), seconds in after.items():
        spent = seconds - before.get((proc, thread), 0.0)
        if proc == thread:
            loop += spent
        else:
            other += spent
    return {"event_loop": loop, "other_threads": other, "total": loop + other}


def fsync_rate(directory: Path, seconds: float = 1.5) -> dict[str, float]:
    """The raw reference: one thread appending 512 bytes and fsyncing, for `seconds`."""
    path = directory / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    waits: list[float] = []
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            os.write(fd, b"x" * 511 + b"\n")
            os.fsync(fd)
            waits.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
        path.unlink()
    waits.sort()
    return {
        "per_s": round(len(waits) / sum(waits)),
        "p50_ms": round(1000 * waits[len(waits) // 2], 2),
        "p99_ms": round(1000 * waits[min(len(waits) - 1, int(0.99 * len(waits)))], 2),
    }


async def load(url: str, key: str, clients: int, seconds: float, kind: str = "raw") -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    if kind in ("raw", "streams"):
        port = int(url.rsplit(":", 1)[1])
        one = one_protocol_client if kind == "raw" else one_raw_client
        start = time.monotonic()
        deadline = start + seconds
        oks = await asyncio.gather(*(one(port, key, n, deadline, latencies, errors) for n in range(clients)))
        wall = time.monotonic() - start
    else:
        limits = httpx2.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx2.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, limits=limits, timeout=120
        ) as client:
            start = time.monotonic()
            deadline = start + seconds
            oks = await asyncio.gather(
                *(one_client(client, n, deadline, latencies, errors) for n in range(clients))
            )
            wall = time.monotonic() - start
    latencies.sort()

    def pct(q: float) -> float | None:
        if not latencies:
            return None
        return round(1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))], 2)

    return {
        "created_201": sum(oks),
        "wall_s": round(wall, 2),
        "turns_per_s": round(sum(oks) / wall, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 2) if latencies else None,
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "p999_ms": pct(0.999),
        "max_ms": round(1000 * latencies[-1], 2) if latencies else None,
        "errors": errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--client",
        choices=("raw", "streams", "httpx"),
        default="raw",
        help="raw: hand-written HTTP/1.1 over keep-alive sockets, an asyncio protocol on uvloop, every "
        "answer parsed and checked (least CPU); streams: the same over asyncio streams (the client "
        "until the eighth session); httpx: the general client of the first measurements",
    )
    parser.add_argument("--workers", type=int, default=1, help="server processes (`tiermem serve --workers`)")
    parser.add_argument(
        "--server-python",
        default=sys.executable,
        help="the interpreter that runs the server (another installation's, for A/B runs)",
    )
    parser.add_argument(
        "--profile",
        metavar="OUT",
        help="run the server under cProfile (bench/serve_profiled.py): OUT.loop/.memory/.update.prof",
    )
    parser.add_argument(
        "--trace",
        metavar="OUT",
        help="run the server with each turn's time taken apart (bench/serve_traced.py): OUT.json, "
        "read with `python bench/serve_traced.py --report OUT.json`",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server (e.g. TIERMEM_RUNTIME__CATCH_UP=inline); repeatable",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    server_env = dict(item.split("=", 1) for item in args.server_env)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        data_dir = Path(tmp) / "data"
        settings = resolve_settings(data_dir=data_dir, env={})
        key = KeyStore(settings).create(operator=False, agent_id=AGENT)["key"]
        fsync_before = fsync_rate(Path(tmp))
        server = start_server(
            data_dir,
            Path(tmp) / "server.log",
            args.server_python,
            args.workers,
            args.profile,
            server_env,
            args.trace,
        )
        load_before = os.getloadavg()[0]
        try:
            pid = server.process.pid
            cpu_before, client_cpu = server_cpu(pid), time.process_time()
            with asyncio.Runner(
                loop_factory=uvloop.new_event_loop if args.client == "raw" else None
            ) as runner:
                result = runner.run(load(server.url, key, args.clients, args.seconds, args.client))
            cpu, client_cpu = cpu_split(cpu_before, server_cpu(pid)), time.process_time() - client_cpu
            load_after = os.getloadavg()[0]
        finally:
            server.stop(timeout=60)
        if any(str(code).startswith("5") for code in result.get("errors", {})):
            # A server error is a defect, not noise: show what the server said about it.
            log = server.log()
            at = log.find("Traceback")
            print(
                f"server errors {result['errors']}; the server's log:\n{log[at - 2000 if at > 2000 else 0 :]}"[
                    :20000
                ],
                file=sys.stderr,
            )
        fsync_after = fsync_rate(Path(tmp))
        with Memory(settings) as mem:
            rows = mem.query(
                "SELECT count(*) AS n, count(DISTINCT event_id) AS distinct_ids FROM interactions "
                f"WHERE agent_id = '{AGENT}'"
            ).records()
        turns = max(1, result["created_201"])
        result.update(
            clients=args.clients,
            client=args.client,
            workers=args.workers,
            server_python=args.server_python,
            server_env=server_env,
            seconds=args.seconds,
            log_interactions=rows[0]["n"],
            log_distinct_ids=rows[0]["distinct_ids"],
            lost=result["created_201"] - rows[0]["distinct_ids"],
            fsync=settings.fsync,
            server_cpu_s=round(cpu["total"], 1),
            client_cpu_s=round(client_cpu, 1),
            server_cpu_us_per_turn=round(1e6 * cpu["total"] / turns),
            event_loop_cpu_us_per_turn=round(1e6 * cpu["event_loop"] / turns),
            other_threads_cpu_us_per_turn=round(1e6 * cpu["other_threads"] / turns),
            client_cpu_us_per_turn=round(1e6 * client_cpu / turns),
            raw_fsync_before=fsync_before,
            raw_fsync_after=fsync_after,
            load_before=round(load_before, 1),
            load_after=round(load_after, 1),
            machine=f"{platform.processor() or platform.machine()}, nproc {os.cpu_count()}",
        )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['clients']} {result['client']} clients x {result['seconds']:.0f} s, "
            f"{result['workers']} server process(es): {result['created_201']:,} turns acknowledged (201), "
            f"{result['turns_per_s']:,}/s, p50 {result['p50_ms']} ms, p90 {result['p90_ms']} ms, "
            f"p99 {result['p99_ms']} ms, p99.9 {result['p999_ms']} ms, max {result['max_ms']} ms, "
            f"errors {result['errors'] or 0}; log holds {result['log_interactions']:,} "
            f"({result['log_distinct_ids']:,} distinct): lost {result['lost']}; "
            f"server CPU {result['server_cpu_s']} s = {result['server_cpu_us_per_turn']} us/turn "
            f"(event loop {result['event_loop_cpu_us_per_turn']}, other threads "
            f"{result['other_threads_cpu_us_per_turn']}), clients {result['client_cpu_s']} s = "
            f"{result['client_cpu_us_per_turn']} us/turn; raw fsync {result['raw_fsync_before']['per_s']}/s "
            f"before, {result['raw_fsync_after']['per_s']}/s after (p99 {result['raw_fsync_before']['p99_ms']} / "
            f"{result['raw_fsync_after']['p99_ms']} ms); load {result['load_before']} / {result['load_after']}; "
            f"{result['machine']}"
        )
    return 0 if result["lost"] == 0 and result["log_interactions"] == result["created_201"] else 1


if __name__ == "__main__":
    sys.exit(main())
