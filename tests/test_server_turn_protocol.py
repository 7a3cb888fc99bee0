"""Posted turns answered by the HTTP protocol itself: byte for byte what uvicorn's own protocol writes.

Two real servers on loopback sockets run the same application (`application()`,
the turn layer in front of the framework), one with uvicorn's httptools
protocol, one with `TurnProtocol`. The same raw requests — every case of the
turn layer's contract test, plus what only a protocol sees: pipelined
requests, `Connection: close`, HTTP/1.0, `Expect: 100-continue`, a chunked
body, a query string, several turns on one keep-alive connection — must get
the same bytes back from both (the `date` header and the ids of new turns
apart), and the ordinary turns must really have been answered by the protocol.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from helpers_log import segment_files
from test_server_turn_route import CASES, MAX_BODY, TURN, _keys

from tiermem.app.server.app import application
from tiermem.app.server.turn_protocol import TurnProtocol
from tiermem.app.server.turn_route import TurnRoute
from tiermem.settings import Settings, resolve_settings

AGENT = "route-bot"
Protocol = Any  # uvicorn's name for a protocol, or the class


@contextmanager
def serving(settings: Settings, http: Protocol, keep_alive_s: float = 5) -> Iterator[tuple[int, TurnRoute]]:
    """A real uvicorn server on a loopback port, in a thread, with `http` as its protocol."""
    app = application(settings, max_body_bytes=MAX_BODY)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        access_log=False,
        server_header=False,
        http=http,
        timeout_keep_alive=keep_alive_s,
    )
    server = uvicorn.Server(config)
    app.state.uvicorn_server = server  # for a test that reaches the connections' protocols
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        while not server.started:  # the lifespan has run and the socket listens
            assert thread.is_alive(), "the server did not start"
            time.sleep(0.01)
        yield sock.getsockname()[1], app
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


def request(
    agent: str,
    body: bytes | Callable[[], Iterator[bytes]],
    headers: dict[str, str],
    *,
    version: str = "1.1",
    target: str | None = None,
) -> bytes:
    """A raw `POST` of a turn; a body factory is sent chunked."""
    lines = [f"POST {target or f'/v1/agents/{agent}/turns'} HTTP/{version}", "host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    if callable(body):
        lines.append("transfer-encoding: chunked")
        content = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in body()) + b"0\r\n\r\n"
    else:
        lines.append(f"content-length: {len(body)}")
        content = body
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + content


def read_response(stream: Any) -> bytes:
    """One response from the socket's file: the head and a body framed by length or chunks."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = stream.readline()
        assert line, f"the connection closed mid-response: {head!r}"
        head += line
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:-2])
    if fields.get(b"transfer-encoding") == b"chunked":
        body = b""
        while True:
            size = int(stream.readline().strip(), 16)
            body += stream.read(size + 2)[:size]
            if size == 0:
                return head + body
    return head + stream.read(int(fields.get(b"content-length", b"0")))


def exchange(port: int, sent: bytes, answers: int, *, closes: bool = False, times: int = 1) -> list[bytes]:
    """On a new connection, `times` over: write `sent`, read `answers` responses; then, if
    `closes`, the end of the connection."""
    with socket.create_connection(("127.0.0.1", port)) as conn, conn.makefile("rb") as stream:
        got = []
        for _ in range(times):
            conn.sendall(sent)
            got += [read_response(stream) for _ in range(answers)]
        if closes:
            assert stream.read() == b""  # the server closed the connection
    return got


DATE = re.compile(rb"\r\ndate: [^\r]*\r\n")
NEW_ID = re.compile(rb'"event_id":"[^"]*"')


def normal(response: bytes, generated_id: bool) -> bytes:
    response = DATE.sub(b"\r\ndate: -\r\n", response)
    return NEW_ID.sub(b'"event_id":"-"', response) if generated_id else response


def _conversation(keys: dict[str, str]) -> list[tuple[str, bytes, int, bool, bool, int]]:
    """(name, bytes sent on one connection, responses, whether the server closes it, whether the
    answers carry generated ids, how many times it is sent on that connection)."""
    agent = {"authorization": keys["agent"], "content-type": "application/json"}
    out: list[tuple[str, bytes, int, bool, bool, int]] = []
    for name, key, path_agent, body, headers, _front in CASES:
        sent = dict(headers)
        if key is not None:
            sent["authorization"] = keys[key]
        generated = _is_json(body) and "event_id" not in json.loads(body)
        out.append((name, request(path_agent, body, sent), 1, False, generated, 1))
    turn = orjson.dumps(TURN)
    pipelined = (
        request(AGENT, orjson.dumps({**TURN, "event_id": "p-1"}), agent)
        + b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
        + request(AGENT, orjson.dumps({**TURN, "event_id": "p-2"}), agent)
    )
    query = f"/v1/agents/{AGENT}/turns?x=1"
    out += [
        ("pipelined: a turn, a read, a turn", pipelined, 3, False, False, 1),
        ("three turns, one after another", request(AGENT, turn, agent), 1, False, True, 3),
        ("two turns at once", request(AGENT, turn, agent) * 2, 2, False, True, 1),
        ("connection: close", request(AGENT, turn, {**agent, "connection": "close"}), 1, True, True, 1),
        ("HTTP/1.0", request(AGENT, turn, agent, version="1.0"), 1, True, True, 1),
        (
            "expect: 100-continue",
            request(AGENT, turn, {**agent, "expect": "100-continue"}),
            2,
            False,
            True,
            1,
        ),
        ("a chunked turn", request(AGENT, lambda: iter([turn[:10], turn[10:]]), agent), 1, False, True, 1),
        ("a query string", request(AGENT, turn, agent, target=query), 1, False, True, 1),
    ]
    return out


def _is_json(body: Any) -> bool:
    if callable(body):
        return False
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


# Answered by the protocol: the contract cases the turn layer answers, the first of the pipelined
# ones (the second waits behind the read: uvicorn's path keeps them in order), 3 one after another,
# the first of two at once, the one closing its connection and the one with a query string.
BY_PROTOCOL = sum(1 for case in CASES if case[5]) + 1 + 3 + 1 + 1 + 1


def _run(settings: Settings, http: Protocol) -> tuple[list[bytes], int]:
    keys = _keys(settings)
    responses = []
    with serving(settings, http) as (port, route):
        for _name, sent, answers, closes, generated, times in _conversation(keys):
            got = exchange(port, sent, answers, closes=closes, times=times)
            responses.append(b"\n".join(normal(r, generated) for r in got))
    return responses, route.answered_by_protocol


def test_the_protocol_writes_what_uvicorns_own_protocol_writes(tmp_path: Path) -> None:
    plain, by_plain = _run(resolve_settings(data_dir=tmp_path / "plain", env={}), "httptools")
    fast, by_fast = _run(resolve_settings(data_dir=tmp_path / "fast", env={}), TurnProtocol)
    names = [case[0] for case in _conversation(_keys(resolve_settings(data_dir=tmp_path / "n", env={})))]
    for name, expected, got in zip(names, plain, fast, strict=True):
        assert got == expected, name
    assert by_plain == 0
    assert by_fast == BY_PROTOCOL  # the ordinary ones were answered by the protocol itself
    statuses = [r.split(b" ", 2)[1] for r in fast]
    assert statuses.count(b"201") >= 10 and {b"401", b"403", b"409", b"413", b"422"} <= set(statuses)


def test_a_turn_whose_client_went_away_is_recorded_and_the_server_goes_on(tmp_path: Path) -> None:
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    keys = _keys(settings)
    agent = {"authorization": keys["agent"], "content-type": "application/json"}
    with serving(settings, TurnProtocol) as (port, route):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(request(AGENT, orjson.dumps({**TURN, "event_id": "gone-1"}), agent))
        # Turns are batched in arrival order: once a later turn is answered, the first is durable.
        (answer,) = exchange(port, request(AGENT, orjson.dumps({**TURN, "event_id": "after-1"}), agent), 1)
        assert answer.startswith(b"HTTP/1.1 201 ")
        assert route.answered_by_protocol == 2
    logged = [
        orjson.loads(line)["event_id"]
        for path in segment_files(settings.data_dir)
        for line in path.read_bytes().splitlines()
    ]
    assert sorted(logged) == ["after-1", "gone-1"]


def test_a_refused_turn_does_not_cut_off_the_request_pipelined_after_it(tmp_path: Path) -> None:
    # The refusal (401) is written while the bytes after it are still being parsed; the next
    # turn then waits for its batch, held here past the keep-alive timeout: it must still be answered.
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    keys = _keys(settings)
    agent = {"authorization": keys["agent"], "content-type": "application/json"}
    unknown = {"authorization": "Bearer tm-not-a-key", "content-type": "application/json"}
    keep_alive_s = 0.2
    with serving(settings, TurnProtocol, keep_alive_s=keep_alive_s) as (port, route):
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            held.set()
            release.wait(30)

        route.state.service._executor.submit(hold)  # the memory thread: no batch is written meanwhile
        assert held.wait(30)
        sent = request(AGENT, orjson.dumps(TURN), unknown) + request(
            AGENT, orjson.dumps({**TURN, "event_id": "kept-1"}), agent
        )
        with socket.create_connection(("127.0.0.1", port)) as conn, conn.makefile("rb") as stream:
            conn.sendall(sent)
            assert read_response(stream).startswith(b"HTTP/1.1 401 ")
            time.sleep(3 * keep_alive_s)  # the timer, had it been left armed, would have closed it
            release.set()
            assert read_response(stream).startswith(b"HTTP/1.1 201 ")
    logged = [
        orjson.loads(line)["event_id"]
        for path in segment_files(settings.data_dir)
        for line in path.read_bytes().splitlines()
    ]
    assert logged == ["kept-1"]


def test_a_client_that_does_not_read_its_answers_gets_no_more_requests_read(tmp_path: Path) -> None:
    # When the transport's buffer is full (a client not reading), the protocol answers and then
    # reads nothing more of that connection until the buffer has drained, as uvicorn's own path
    # does. The transport's signal is given by hand here: filling real socket buffers would take
    # megabytes of answers.
    settings = resolve_settings(data_dir=tmp_path / "data", env={})
    keys = _keys(settings)
    agent = {"authorization": keys["agent"], "content-type": "application/json"}
    with serving(settings, TurnProtocol) as (port, route):
        server = route.state.uvicorn_server
        with socket.create_connection(("127.0.0.1", port)) as conn, conn.makefile("rb") as stream:
            conn.sendall(request(AGENT, orjson.dumps({**TURN, "event_id": "w-1"}), agent))
            assert read_response(stream).startswith(b"HTTP/1.1 201 ")
            (protocol,) = server.server_state.connections
            loop = protocol.loop
            asyncio.run_coroutine_threadsafe(_call(protocol.flow.pause_writing), loop).result(30)
            conn.sendall(request(AGENT, orjson.dumps({**TURN, "event_id": "w-2"}), agent))
            assert read_response(stream).startswith(b"HTTP/1.1 201 ")  # written all the same
            conn.sendall(request(AGENT, orjson.dumps({**TURN, "event_id": "w-3"}), agent))
            # Not read while the answer before it has not drained: its turn is not recorded.
            waiting = asyncio.run_coroutine_threadsafe(
                _call(
                    lambda: (protocol.flow.read_paused, protocol.draining.done(), route.answered_by_protocol)
                ),
                loop,
            ).result(30)
            assert waiting == (True, False, 2)
            asyncio.run_coroutine_threadsafe(_call(protocol.flow.resume_writing), loop).result(30)
            assert read_response(stream).startswith(b"HTTP/1.1 201 ")
            assert route.answered_by_protocol == 3
    logged = [
        orjson.loads(line)["event_id"]
        for path in segment_files(settings.data_dir)
        for line in path.read_bytes().splitlines()
    ]
    assert logged == ["w-1", "w-2", "w-3"]


async def _call(fn: Callable[[], Any]) -> Any:
    """`fn()` on the server's event loop (its protocol's state is the loop's own)."""
    return fn()
