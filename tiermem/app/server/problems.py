"""Errors as `application/problem+json`, and the request body size limit.

Every failure a client can cause maps to a status and a one-line `detail`;
anything unexpected becomes a 500 whose body names an id the server log
carries with the traceback, so the client never sees a traceback.
"""

from __future__ import annotations

import logging
import secrets
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tiermem.app.server.keys import AuthError, ForbiddenError
from tiermem.errors import (
    AlreadyRunningError,
    ConfigError,
    EventIdConflictError,
    LimitExceededError,
    NotFoundError,
    ReadOnlyQueryError,
    TiermemError,
    ValidationError,
)

log = logging.getLogger("tiermem.serve")

PROBLEM = "application/problem+json"

# The error catalogue: exception class → (HTTP status, problem type slug, title).
CATALOGUE: list[tuple[type[Exception], int, str, str]] = [
    (AuthError, 401, "unauthorized", "Missing or invalid API key"),
    (ForbiddenError, 403, "forbidden", "This key may not do that"),
    (NotFoundError, 404, "not-found", "Not found"),
    # Before ValidationError, of which it is a kind: the record is valid, its id is taken.
    (EventIdConflictError, 409, "event-id-conflict", "The event_id is already used"),
    (ValidationError, 422, "invalid-input", "Invalid input"),
    (LimitExceededError, 422, "limit-exceeded", "A limit was exceeded"),
    (ReadOnlyQueryError, 400, "read-only-sql", "Only read-only SQL is allowed"),
    (ConfigError, 400, "bad-setting", "Bad setting"),
    (AlreadyRunningError, 409, "busy", "Another job holds the lock"),
]


def problem(status: int, slug: str, title: str, detail: str, **extra: Any) -> Response:
    body = {
        "type": f"https://tiermem.dev/problems/{slug}",
        "title": title,
        "status": status,
        "detail": detail,
    }
    body.update(extra)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM, headers=headers)


def problem_for(exc: Exception) -> Response:
    for cls, status, slug, title in CATALOGUE:
        if isinstance(exc, cls):
            extra = {"field": exc.field} if isinstance(exc, ValidationError) else {}
            return problem(status, slug, title, str(exc), **extra)
    if isinstance(exc, TiermemError):
        return problem(500, "failed", "The operation failed", str(exc))
    incident = secrets.token_hex(6)
    log.error("incident %s: unexpected error", incident, exc_info=exc)
    return problem(500, "internal", "Internal error", f"unexpected server error (incident {incident})")


def _validation_detail(exc: RequestValidationError) -> tuple[str, str]:
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    return where, f"{where}: {first.get('msg', 'invalid')}"


def install_handlers(app: FastAPI) -> None:
    async def on_tiermem(_request: Request, exc: Exception) -> Response:
        return problem_for(exc)

    async def on_validation(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        field, detail = _validation_detail(exc)
        return problem(422, "invalid-input", "Invalid input", detail, field=field)

    async def on_http(_request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        slug = {404: "not-found", 405: "method-not-allowed", 413: "too-large"}.get(exc.status_code, "http")
        return problem(exc.status_code, slug, str(exc.detail), str(exc.detail))

    app.add_exception_handler(TiermemError, on_tiermem)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_tiermem)


class BodyLimit:
    """Refuse request bodies over `limit` bytes with 413, by Content-Length or while streaming."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _declared_length(scope) > self.limit:
            await self.too_large()(scope, receive, send)
            return
        seen = 0
        exceeded = False
        replaced = False

        async def limited_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    exceeded = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message: Message) -> None:
            # The framework may turn the interrupted read into its own 400: answer 413 instead.
            nonlocal replaced
            if exceeded:
                if not replaced:
                    replaced = True
                    await self.too_large()(scope, receive, send)
                return
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except _BodyTooLarge:
            if not replaced:
                await self.too_large()(scope, receive, send)

    def too_large(self) -> Response:
        # Built only when needed: every request passes through here.
        return problem(
            413, "too-large", "Request body too large", f"the request body is limited to {self.limit:,} bytes"
        )


def _declared_length(scope: Scope) -> int:
    """The Content-Length the client declared (0 if none; unparseable counts as too large)."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 1 << 62
    return 0


class _BodyTooLarge(Exception):
    pass
