"""`POST /v1/agents/{agent_id}/turns` without the framework's per-request machinery.

Posting turns is the server's hot path: under load the framework's routing,
dependency solving and response building cost several times the turn's own
work on the event loop. This ASGI layer answers the ordinary case of that one
route itself, with the same pieces the framework route uses: the `TurnIn`
model validates the body (same limits, same `extra="forbid"`), the bearer key
is verified by the same `KeyStore.verify`, `authorize` makes the one
permission decision, the turn joins the same batch queue, and errors become
the same problem bodies through `problem_for`. The 201 body is the one the
route's response model produces.

Anything out of the ordinary — another method or path, an agent id the path
pattern refuses, a body that is not a JSON object in UTF-8, a content type
other than `application/json` (or none), a body the model rejects — is handed, body and all, to the
framework route, which answers exactly as it always did (its 422 details
included). So the contract has one definition, the route in `routes.py`,
which also keeps the OpenAPI documentation; this layer only skips work for
requests whose answer it can give identically.
"""

from __future__ import annotations

import asyncio
import re

import orjson
from fastapi import FastAPI
from starlette.types import Message, Receive, Scope, Send

from tiermem.app.server.keys import KeyStore, authorize
from tiermem.app.server.problems import problem_for
from tiermem.app.server.routes import ID_MAX
from tiermem.app.server.service import MemoryService
from tiermem.app.server.turn_body import PostedTurn, parse_turn
from tiermem.runtime.memory import RecordedTurn

PREFIX = "/v1/agents/"
SUFFIX = "/turns"
# The route's path parameter pattern and length (AgentId in routes.py).
AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*")
JSON_HEADERS = [(b"content-type", b"application/json")]
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]  # status, headers, body


class TurnRoute:
    """ASGI middleware: answers well-formed posted turns, passes every other request on."""

    def __init__(self, app: FastAPI, max_body_bytes: int) -> None:
        self.app = app
        self.state = app.state
        self.limit = max_body_bytes
        self.answered = 0  # requests answered here rather than by the framework route
        self.answered_by_protocol = 0  # of them, by the HTTP protocol itself (`turn_protocol`)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        agent_id = _turn_path(scope)
        if agent_id is None:
            await self.app(scope, receive, send)
            return
        token, json_body, declared, _ = read_headers(scope["headers"])
        if not json_body or declared > self.limit:  # the framework route answers, as it always did
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before sending its turn
                return
            chunk = message.get("body", b"")
            chunks.append(chunk)
            size += len(chunk)
            more = message.get("more_body", False)
            if size > self.limit:  # the framework's body limit answers 413, reading the rest
                break
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        turn = None if size > self.limit else parse_turn(body)
        if turn is None:  # not the ordinary case: the framework route answers, as it always did
            await self.app(scope, _replay(body, more, receive), send)
            return
        self.answered += 1
        try:
            recorded = await self.submit(agent_id, token, turn)
        except Exception as exc:
            status, headers, content = self.answer_error(exc)
        else:
            status, headers, content = self.answer_recorded(recorded)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    def submit(self, agent_id: str, token: str | None, turn: PostedTurn) -> asyncio.Future[RecordedTurn]:
        """Check the key and the permission, and queue the turn for its batch: the future gets its
        outcome once durable. Raises what the route answers as a problem (401, 403)."""
        keys: KeyStore = self.state.keys
        svc: MemoryService = self.state.service
        caller = keys.verify(token) if token else None
        user = authorize(caller, agent_id=agent_id, user=turn.user)
        return svc.submit_turn(agent_id, user, turn.user_message, turn.agent_response, turn.fields)

    @staticmethod
    def answer_recorded(recorded: RecordedTurn) -> Answer:
        """The route's 201: its response model's body."""
        content = orjson.dumps({"event_id": recorded.event_id, "memory_level": recorded.memory_level})
        return 201, [(b"content-length", str(len(content)).encode()), *JSON_HEADERS], content

    @staticmethod
    def answer_error(exc: Exception) -> Answer:
        """What the framework's exception handlers answer for `exc`."""
        response = problem_for(exc)
        return response.status_code, response.raw_headers, bytes(response.body)


def _turn_path(scope: Scope) -> str | None:
    """The agent id of a `POST /v1/agents/{agent_id}/turns` the route would accept, else None."""
    if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
        return None
    path: str = scope["path"]
    if not (path.startswith(PREFIX) and path.endswith(SUFFIX)):
        return None
    agent_id = path[len(PREFIX) : -len(SUFFIX)]
    if len(agent_id) > ID_MAX or AGENT_ID.fullmatch(agent_id) is None:
        return None
    return agent_id


def read_headers(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, bool, int, bool]:
    """The bearer token (as the route's `bearer` reads it), whether the body is declared JSON,
    its declared length (0 when not declared; an unreadable one counts as too long), and
    whether a transfer coding is named (the body's length is then not the declared one)."""
    authorization: bytes | None = None
    content_type: bytes | None = None
    length: bytes | None = None
    streamed = False
    for name, value in headers:
        if name == b"authorization":
            if authorization is None:
                authorization = value
        elif name == b"content-type":
            if content_type is None:
                content_type = value
        elif name == b"content-length":
            if length is None:
                length = value
        elif name == b"transfer-encoding":
            streamed = True
    # The framework reads a body as JSON only when it is declared so (no content type: not JSON).
    json_body = (
        content_type is not None and content_type.split(b";", 1)[0].strip().lower() == b"application/json"
    )
    try:
        declared = int(length) if length is not None else 0
    except ValueError:
        declared = 1 << 62
    if authorization is None:
        return None, json_body, declared, streamed
    scheme, _, token = authorization.decode("latin-1").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None, json_body, declared, streamed
    return token.strip(), json_body, declared, streamed


def _replay(body: bytes, more: bool, receive: Receive) -> Receive:
    """A `receive` that gives the body already read, then whatever the client sends next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": more}
        return await receive()

    return replay
