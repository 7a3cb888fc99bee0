"""`POST /v1/agents/{agent_id}/turns` answered from uvicorn's HTTP protocol itself.

The turn layer (`turn_route.TurnRoute`) already answers posted turns without
the framework; what was left on the event loop was mostly the ASGI machinery
around it: per request a task, an event, a scope, the ASGI messages, the
response head checked header by header with regular expressions, and two
socket writes, one for the head and one for the body. `TurnProtocol` is
uvicorn's httptools protocol with one difference: a request that is an
ordinary posted turn — `POST` to the turns path of an agent id the route
accepts, no root path, a body declared `application/json` with a
`Content-Length` within the limit, no `Transfer-Encoding`, no `Expect`, no
upgrade, nothing in flight before it on the connection — is read, checked by
the turn layer's own functions (the same parse, the same `TurnIn` model, the
same key check and permission decision, the same batch queue, the same problem
bodies) and answered with one write of the bytes uvicorn would have written.
Anything else, and a body the turn layer would hand to the framework, goes
down uvicorn's own path with the body already read, to the same application,
which answers as it always did.

The answer is written by a callback of the turn's future, not by a task: the
request costs no coroutine on the event loop at all.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from tiermem.app.server.routes import ID_MAX
from tiermem.app.server.turn_body import parse_turn
from tiermem.app.server.turn_route import TurnRoute, read_headers

# The route's path, with the agent id's pattern (AgentId in routes.py); no '%': an escaped
# path is unescaped by uvicorn first, so the framework's reading of it decides.
TURN_PATH = re.compile(rb"/v1/agents/([A-Za-z0-9][A-Za-z0-9._:@-]*)/turns")


class _NoEvent:
    """Stands for the request cycle's event, which uvicorn sets when the connection is lost."""

    __slots__ = ()

    def set(self) -> None:
        return None


NO_EVENT = _NoEvent()


class TurnCycle:
    """One posted turn on its connection: what uvicorn's code reads of a request cycle
    (`response_complete`, `keep_alive`, `disconnected`, `message_event`), and the request."""

    __slots__ = ("agent_id", "chunks", "disconnected", "keep_alive", "response_complete", "token")
    message_event = NO_EVENT

    def __init__(self, agent_id: str, token: str | None, keep_alive: bool) -> None:
        self.agent_id = agent_id
        self.token = token
        self.chunks: list[bytes] = []
        self.keep_alive = keep_alive
        self.response_complete = False
        self.disconnected = False


class TurnProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering ordinary posted turns itself (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        app = self.config.app
        self.route: TurnRoute | None = app if isinstance(app, TurnRoute) else None
        self.turn: TurnCycle | None = None  # the turn whose body is being read
        self.draining: asyncio.Task[None] | None = None  # an answer waiting for the client to read

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # A turn refused at once is answered while uvicorn is still parsing the bytes received,
        # which arms the keep-alive timer as if the connection were idle; uvicorn only stops it
        # when more bytes arrive, so a pipelined request after it would be cut off mid-answer
        # once the timer ran out. A request that begins is not idle: stop the timer.
        self._unset_keepalive_if_required()

    def on_headers_complete(self) -> None:
        cycle = self._turn_cycle()
        if cycle is None:
            super().on_headers_complete()
            return
        self.turn = self.cycle = cycle  # type: ignore[assignment]  # what uvicorn reads of a cycle

    def _turn_cycle(self) -> TurnCycle | None:
        """A cycle for this request when it is an ordinary posted turn, else None."""
        route = self.route
        parser = self.parser
        if (
            route is None
            or self.root_path
            or self.expect_100_continue
            or self.limit_concurrency is not None
            or (self.cycle is not None and not self.cycle.response_complete)  # pipelined: in order
            or parser.get_method() != b"POST"
            or parser.should_upgrade()
        ):
            return None
        path = self.url.partition(b"?")[0]
        match = TURN_PATH.fullmatch(path)
        if match is None or len(match[1]) > ID_MAX:
            return None
        token, json_body, declared, streamed = read_headers(self.headers)
        if not json_body or streamed or declared > route.limit:
            return None
        if parser.get_http_version() != "1.1":
            return None  # the scope's version and the response's framing are uvicorn's to decide
        return TurnCycle(match[1].decode("ascii"), token, parser.should_keep_alive())

    def on_body(self, body: bytes) -> None:
        turn = self.turn
        if turn is None:
            super().on_body(body)
            return
        turn.chunks.append(body)

    def on_message_complete(self) -> None:
        turn = self.turn
        if turn is None:
            super().on_message_complete()
            return
        self.turn = None
        route = self.route
        assert route is not None
        chunks = turn.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        parsed = parse_turn(body)
        if parsed is None:  # not the ordinary case: the application answers, as it always did
            self._to_application(body)
            return
        route.answered += 1
        route.answered_by_protocol += 1
        try:
            done = route.submit(turn.agent_id, turn.token, parsed)
        except Exception as exc:
            self._write(turn, *route.answer_error(exc))
            return
        done.add_done_callback(lambda future: self._answer(turn, future))

    def _to_application(self, body: bytes) -> None:
        """Start uvicorn's own cycle for this request, with its whole body already read."""
        self.cycle = None  # type: ignore[assignment]  # nothing is in flight: the turn cycle was not started
        super().on_headers_complete()  # the scope, the cycle and the application's task
        self.cycle.body += body
        super().on_message_complete()

    def _answer(self, turn: TurnCycle, done: asyncio.Future[Any]) -> None:
        route = self.route
        assert route is not None
        exc = None if done.cancelled() else done.exception()
        if done.cancelled() or (exc is not None and not isinstance(exc, Exception)):
            # Nothing cancels it, and the batch raises only errors; were it otherwise, the
            # connection is closed rather than left waiting for an answer.
            turn.response_complete = True
            self.transport.close()
        elif exc is None:
            self._write(turn, *route.answer_recorded(done.result()))
        else:
            self._write(turn, *route.answer_error(exc))

    def _write(
        self, turn: TurnCycle, status: int, headers: list[tuple[bytes, bytes]], content: bytes
    ) -> None:
        """The response uvicorn would write for it, in one write; then what it does after a response."""
        turn.response_complete = True
        if turn.disconnected or self.transport.is_closing():  # the client went away; recorded all the same
            return
        parts = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            parts += (name, b": ", value, b"\r\n")
        for name, value in headers:
            parts += (name, b": ", value, b"\r\n")
        if not turn.keep_alive:
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", content)
        self.transport.write(b"".join(parts))
        if not turn.keep_alive:
            self.transport.close()
        if self.flow.write_paused:
            # The client is not reading its answers: read no more of its requests until the
            # answer has drained, as uvicorn's own path waits for it before the next.
            self.flow.pause_reading()
            self.draining = self.loop.create_task(self._complete_once_drained())  # held: the loop's is weak
            return
        self.on_response_complete()

    async def _complete_once_drained(self) -> None:
        await self.flow.drain()  # also released when the connection is lost
        self.on_response_complete()
