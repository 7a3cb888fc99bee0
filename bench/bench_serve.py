"""Load on `tiermem serve`: N concurrent clients posting turns for T seconds against a real server.

    .venv/bin/python bench/bench_serve.py                  # 64 clients, 60 s
    .venv/bin/python bench/bench_serve.py --clients 8 --seconds 5 --json

Starts `tiermem serve` in a subprocess on a free loopback port over a fresh
data root (default fsync policy: every append durable before its 201), then
runs the clients in one asyncio process: each posts a turn, waits for the
answer, posts the next, until the time is up (bounded: at most one request in
flight per client, nothing sent after the deadline). Reports requests/s,
latency p50/p99 of the 201s, errors, and "lost": the 201s minus the
interactions the log holds afterwards (counted with `tiermem sql`), which must
be 0 — every acknowledged turn is in the log, once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

from tiermem.app.api import Memory
from tiermem.app.server.keys import KeyStore
from tiermem.settings import resolve_settings

AGENT = "bench-bot"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TIERMEM_", "ANTHROPIC_"))}
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tiermem.app.cli",
                "--data-dir",
                str(data_dir),
                "serve",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    deadline = time.monotonic() + 120
    with httpx2.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit(f"server exited: {log_path.read_text()}")
            try:
                if client.get("/healthz").status_code == 200:
                    return process
            except httpx2.TransportError:
                pass
            time.sleep(0.05)
    process.kill()
    raise SystemExit("server not ready in 120 s")


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


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def load(url: str, key: str, clients: int, seconds: float, kind: str = "raw") -> dict[str, Any]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    if kind == "raw":
        port = int(url.rsplit(":", 1)[1])
        start = time.monotonic()
        deadline = start + seconds
        oks = await asyncio.gather(
            *(one_raw_client(port, key, n, deadline, latencies, errors) for n in range(clients))
        )
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
    return {
        "created_201": sum(oks),
        "wall_s": round(wall, 2),
        "turns_per_s": round(sum(oks) / wall, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 2) if latencies else None,
        "p99_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 2)
        if latencies
        else None,
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
        choices=("raw", "httpx"),
        default="raw",
        help="raw: hand-written HTTP/1.1 over keep-alive sockets (little CPU); "
        "httpx: the general client of the first measurements",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        data_dir = Path(tmp) / "data"
        settings = resolve_settings(data_dir=data_dir, env={})
        key = KeyStore(settings).create(operator=False, agent_id=AGENT)["key"]
        port = free_port()
        server = start_server(data_dir, port, Path(tmp) / "server.log")
        load_before = os.getloadavg()[0]
        try:
            server_cpu, client_cpu = process_cpu_s(server.pid), time.process_time()
            result = asyncio.run(
                load(f"http://127.0.0.1:{port}", key, args.clients, args.seconds, args.client)
            )
            server_cpu, client_cpu = process_cpu_s(server.pid) - server_cpu, time.process_time() - client_cpu
        finally:
            server.terminate()
            server.wait(timeout=60)
        with Memory(settings) as mem:
            rows = mem.query(
                "SELECT count(*) AS n, count(DISTINCT event_id) AS distinct_ids FROM interactions "
                f"WHERE agent_id = '{AGENT}'"
            ).records()
        result.update(
            clients=args.clients,
            client=args.client,
            seconds=args.seconds,
            log_interactions=rows[0]["n"],
            log_distinct_ids=rows[0]["distinct_ids"],
            lost=result["created_201"] - rows[0]["distinct_ids"],
            fsync=settings.fsync,
            server_cpu_s=round(server_cpu, 1),
            client_cpu_s=round(client_cpu, 1),
            server_cpu_us_per_turn=round(1e6 * server_cpu / max(1, result["created_201"])),
            client_cpu_us_per_turn=round(1e6 * client_cpu / max(1, result["created_201"])),
            machine=f"{platform.processor() or platform.machine()}, nproc {os.cpu_count()}, "
            f"load {load_before:.1f} before / {os.getloadavg()[0]:.1f} after",
        )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['clients']} {result['client']} clients x {result['seconds']:.0f} s: {result['created_201']:,} turns acknowledged (201), "
            f"{result['turns_per_s']:,}/s, p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, "
            f"errors {result['errors'] or 0}; log holds {result['log_interactions']:,} "
            f"({result['log_distinct_ids']:,} distinct): lost {result['lost']}; "
            f"CPU server {result['server_cpu_s']} s ({result['server_cpu_us_per_turn']} us/turn), "
            f"clients {result['client_cpu_s']} s ({result['client_cpu_us_per_turn']} us/turn); {result['machine']}"
        )
    return 0 if result["lost"] == 0 and result["log_interactions"] == result["created_201"] else 1


if __name__ == "__main__":
    sys.exit(main())
