"""The memory panel at `/`: what one agent remembers, as a person wants to see and fix it.

Signing in: the person pastes an API key once (operator key: every agent and
forgetting users; agent key: that agent). The server keeps the key in memory
behind a random session id, which the browser holds in an HttpOnly,
SameSite=Strict cookie, so page scripts never see the key and other sites
cannot send it. The key is checked again on every request (a revoked key ends
its sessions). Every state-changing form carries the session's CSRF token,
compared in constant time; sessions end with the server process or on sign out.

What a page shows is read as one principal (agent, user), through the hot
store's visibility rule: a key bound to a user sees that user's memory and
the agent-level memory; an agent key without a user sees agent-level memory
only; an operator picks one of the agent's users with `?user=` and without
one sees agent-level memory only.
"""

from __future__ import annotations

import difflib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from tiermem.app.server import html as h
from tiermem.app.server import panel_data as data
from tiermem.app.server import panel_views as views
from tiermem.app.server.keys import ForbiddenError, KeyStore, Principal, authorize
from tiermem.app.server.routes import edit_proposal
from tiermem.app.server.service import MemoryService
from tiermem.errors import TiermemError
from tiermem.runtime.visibility import Principal as Reader

COOKIE = "tiermem_panel"
FORM_MAX = 64_000
# The panel needs no script and no other origin: say so, so injected markup could do nothing.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _html(content: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(content, status_code=status_code, headers=HEADERS)


@dataclass(frozen=True)
class Session:
    token: str  # the API key, kept server-side only
    csrf: str


class Sessions:
    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}

    def start(self, token: str) -> str:
        sid = secrets.token_urlsafe(32)
        self._by_id[sid] = Session(token, secrets.token_urlsafe(32))
        return sid

    def get(self, sid: str | None) -> Session | None:
        return self._by_id.get(sid) if sid else None

    def end(self, sid: str | None) -> None:
        if sid:
            self._by_id.pop(sid, None)


@dataclass(frozen=True)
class Visitor:
    principal: Principal
    csrf: str

    @property
    def who(self) -> str:
        p = self.principal
        return "operator" if p.is_operator else f"agent key · {p.agent_id}"


router = APIRouter(include_in_schema=False)


def _sessions(request: Request) -> Sessions:
    if not hasattr(request.app.state, "panel_sessions"):
        request.app.state.panel_sessions = Sessions()
    sessions: Sessions = request.app.state.panel_sessions
    return sessions


def _visitor(request: Request) -> Visitor | None:
    session = _sessions(request).get(request.cookies.get(COOKIE))
    if session is None:
        return None
    store: KeyStore = request.app.state.keys
    principal = store.verify(session.token)
    if principal is None:
        return None
    return Visitor(principal, session.csrf)


def _viewed_user(visitor: Visitor, request: Request, agent_id: str) -> str | None:
    """The user whose memory the page shows: the key's own user, the operator's `?user=`, or nobody.

    An agent key without a user sees agent-level memory only: it names no
    person, so the panel does not let it browse people one by one.
    """
    asked = request.query_params.get("user") or None
    if visitor.principal.is_operator:
        return asked
    if visitor.principal.user is not None:
        return authorize(visitor.principal, agent_id=agent_id, user=asked)
    if asked is not None:
        raise ForbiddenError("an agent key without a user sees agent-level memory only")
    return None


def _reader(svc: MemoryService, agent_id: str, user: str | None) -> Reader:
    """The runtime principal of a panel read (worker thread only)."""
    handle = svc.agent(agent_id)
    return Reader(agent_id, user, handle.agent_type, handle.project_id)


def _svc(request: Request) -> MemoryService:
    svc: MemoryService = request.app.state.service
    return svc


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    if len(body) > FORM_MAX:
        raise _PanelError(413, "the form is too large")
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


class _PanelError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _checked(visitor: Visitor | None, form: dict[str, str]) -> Visitor:
    """A signed-in visitor whose form carries the session's CSRF token."""
    if visitor is None:
        raise _PanelError(401, "sign in first")
    if not hmac.compare_digest(form.get("csrf", ""), visitor.csrf):
        raise _PanelError(403, "the form has expired or did not come from this panel; reload the page")
    return visitor


def _error_page(status: int, message: str, visitor: Visitor | None) -> HTMLResponse:
    body = h.flash(message, error=True) + "<p><a href='/'>Back to the panel</a></p>"
    return _html(
        h.page("Error", body, who=visitor.who if visitor else None, csrf=visitor.csrf if visitor else None),
        status_code=status,
    )


def _back(location: str, message: str) -> RedirectResponse:
    path, _, fragment = location.partition("#")
    sep = "&" if "?" in path else "?"
    return RedirectResponse(
        f"{path}{sep}msg={quote(message)}" + (f"#{fragment}" if fragment else ""), status_code=303
    )


# ---------------------------------------------------------------- signing in


@router.get("/login", response_class=HTMLResponse)
async def login_form(request: Request) -> HTMLResponse:
    return _html(views.login_page(request.query_params.get("msg")))


@router.post("/login")
async def login(request: Request) -> Response:
    form = await _form(request)
    token = form.get("key", "").strip()
    store: KeyStore = request.app.state.keys
    principal = store.verify(token)
    if principal is None:
        return _html(views.login_page("That key is unknown or revoked.", error=True), status_code=401)
    sid = _sessions(request).start(token)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    try:
        _checked(_visitor(request), await _form(request))
    except _PanelError as exc:
        return _error_page(exc.status, str(exc), None)
    _sessions(request).end(request.cookies.get(COOKIE))
    response = RedirectResponse("/login?msg=Signed+out", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# ---------------------------------------------------------------- pages


@router.get("/", response_class=HTMLResponse)
async def home(request: Request) -> Response:
    visitor = _visitor(request)
    if visitor is None:
        return RedirectResponse("/login", status_code=303)
    if not visitor.principal.is_operator:
        return RedirectResponse(h.url("agents", str(visitor.principal.agent_id)), status_code=303)
    svc = _svc(request)

    def read() -> list[dict[str, Any]]:
        svc.refresh()
        return data.agents(svc.hot())

    rows = await svc.run(read)
    return _html(h.page("Agents", views.agents_list(rows), who=visitor.who, csrf=visitor.csrf))


@router.get("/agents/{agent_id}", response_class=HTMLResponse)
async def agent_page(request: Request, agent_id: str) -> Response:
    visitor = _visitor(request)
    if visitor is None:
        return RedirectResponse("/login", status_code=303)
    try:
        authorize(visitor.principal, agent_id=agent_id)
        user = _viewed_user(visitor, request, agent_id)
    except TiermemError as exc:
        return _error_page(403, str(exc), visitor)
    svc = _svc(request)
    operator = visitor.principal.is_operator

    def read() -> tuple[data.AgentView, list[dict[str, Any]], list[dict[str, Any]]] | None:
        svc.refresh()
        conn = svc.agent(agent_id).runtime.conn
        if operator:
            users = data.users_of(conn, agent_id)
            if user is not None and user not in users:
                return None
        else:
            users = [user] if user else []
        who = _reader(svc, agent_id, user)
        view = data.agent_view(conn, who, users)
        view.viewed_user = user
        queued = svc.memory.proposals(status="pending", agent=agent_id)
        visible = data.visible_proposals(conn, who, [str(p["proposal_id"]) for p in queued])
        pending = [p for p in queued if p["proposal_id"] in visible]
        return view, pending, data.review_reports(svc.settings, agent_id)

    shown = await svc.run(read)
    if shown is None:
        return _error_page(404, f"agent {agent_id} has no user {user!r}", visitor)
    view, pending, reports = shown
    body = views.agent_page(view, pending, reports, visitor.csrf, operator, request.query_params.get("msg"))
    return _html(h.page(agent_id, body, who=visitor.who, csrf=visitor.csrf))


@router.get("/agents/{agent_id}/turns/{event_id}", response_class=HTMLResponse)
async def turn_page(request: Request, agent_id: str, event_id: str) -> Response:
    visitor = _visitor(request)
    if visitor is None:
        return RedirectResponse("/login", status_code=303)
    try:
        authorize(visitor.principal, agent_id=agent_id)
        user = _viewed_user(visitor, request, agent_id)
    except TiermemError as exc:
        return _error_page(403, str(exc), visitor)
    svc = _svc(request)

    def read() -> data.TurnView | None:
        svc.refresh()
        return data.turn_view(svc.agent(agent_id).runtime.conn, _reader(svc, agent_id, user), event_id)

    turn = await svc.run(read)
    if turn is None:
        return _error_page(
            404,
            f"no turn {event_id} of agent {agent_id} visible here (erased, not a turn, or another user's)",
            visitor,
        )
    return _html(h.page("Turn", views.turn_page(agent_id, turn, user), who=visitor.who, csrf=visitor.csrf))


@router.get("/agents/{agent_id}/proposals/{proposal_id}", response_class=HTMLResponse)
async def proposal_page(request: Request, agent_id: str, proposal_id: str) -> Response:
    visitor = _visitor(request)
    if visitor is None:
        return RedirectResponse("/login", status_code=303)
    svc = _svc(request)
    try:
        authorize(visitor.principal, agent_id=agent_id)
        user = _viewed_user(visitor, request, agent_id)

        def read() -> tuple[dict[str, Any], bool]:
            svc.refresh()
            shown = svc.memory.proposal(proposal_id)
            conn = svc.agent(agent_id).runtime.conn
            return shown, bool(data.visible_proposals(conn, _reader(svc, agent_id, user), [proposal_id]))

        shown, visible = await svc.run(read)
        if shown["proposal"].get("agent_id") != agent_id or not visible:
            return _error_page(404, f"no proposal {proposal_id} for agent {agent_id} visible here", visitor)
    except ForbiddenError as exc:
        return _error_page(403, str(exc), visitor)
    except TiermemError as exc:
        return _error_page(404, str(exc), visitor)
    decide = visitor.principal.is_operator or visitor.principal.user is None
    body = views.proposal_page(
        agent_id, shown, visitor.csrf, request.query_params.get("msg"), user, decide=decide
    )
    return _html(h.page("Proposal", body, who=visitor.who, csrf=visitor.csrf))


@router.get("/agents/{agent_id}/reports/{day}.png")
async def report_chart(request: Request, agent_id: str, day: str) -> Response:
    visitor = _visitor(request)
    if visitor is None:
        return Response(status_code=401)
    try:
        authorize(visitor.principal, agent_id=agent_id)
    except TiermemError:
        return Response(status_code=403)
    path = data.report_chart(_svc(request).settings, agent_id, day)
    if path is None:
        return Response(status_code=404)
    return FileResponse(path, media_type="image/png")


# ---------------------------------------------------------------- actions (POST, CSRF-checked)


@router.post("/agents/{agent_id}/proposals/{proposal_id}/{action}")
async def decide(request: Request, agent_id: str, proposal_id: str, action: str) -> Response:
    visitor = _visitor(request)
    svc = _svc(request)
    try:
        form = await _form(request)
        visitor = _checked(visitor, form)
        # The review queue spans the agent's users: a key bound to one user does not decide it.
        authorize(visitor.principal, agent_id=agent_id, whole_agent=True)
        user = form.get("user") or None if visitor.principal.is_operator else None

        def read() -> tuple[dict[str, Any], bool]:
            shown = svc.memory.proposal(proposal_id)
            conn = svc.agent(agent_id).runtime.conn
            return shown, bool(data.visible_proposals(conn, _reader(svc, agent_id, user), [proposal_id]))

        shown, visible = await svc.run(read)
        if shown["proposal"].get("agent_id") != agent_id or not visible:
            raise _PanelError(404, f"no proposal {proposal_id} for agent {agent_id} visible here")
        by = "operator (panel)" if visitor.principal.is_operator else f"{visitor.principal.key_id} (panel)"
        back = h.url("agents", agent_id) + (f"?user={quote(user)}" if user else "") + "#queue"
        if action == "approve":
            await svc.run(lambda: svc.memory.approve(proposal_id, by=by))
            return _back(back, f"Approved: {shown['proposal']['content']}")
        if action == "reject":
            await svc.run(lambda: svc.memory.reject(proposal_id, by=by, reason=form.get("reason") or None))
            return _back(back, f"Rejected: {shown['proposal']['content']}")
        if action == "edit":
            edited = form.get("content", "").strip()
            if not edited:
                raise _PanelError(422, "the edited text is empty")
            original = str(shown["proposal"]["content"])
            await svc.run(edit_proposal, svc, agent_id, proposal_id, edited, None, by)
            changed = "; ".join(
                d for d in difflib.ndiff(original.split(), edited.split()) if d.startswith(("+", "-"))
            )
            return _back(back, f"Edited and saved as a fact: {edited} (changes: {changed or 'none'})")
        raise _PanelError(404, f"unknown action {action!r}")
    except _PanelError as exc:
        return _error_page(exc.status, str(exc), visitor if isinstance(visitor, Visitor) else None)
    except ForbiddenError as exc:
        return _error_page(403, str(exc), visitor if isinstance(visitor, Visitor) else None)
    except TiermemError as exc:
        return _error_page(422, str(exc), visitor if isinstance(visitor, Visitor) else None)


@router.post("/agents/{agent_id}/forget")
async def forget_user(request: Request, agent_id: str) -> Response:
    """Forget one user everywhere, after the person typed the user's name again to confirm."""
    visitor = _visitor(request)
    svc = _svc(request)
    try:
        form = await _form(request)
        visitor = _checked(visitor, form)
        authorize(visitor.principal, operator_only=True)
        user = form.get("user", "").strip()
        if not user or form.get("confirm", "").strip() != user:
            raise _PanelError(422, "to forget a user, type the user's name again in the confirmation box")
        info = await svc.run(lambda: svc.memory.forget(user=user, reason="forgotten from the memory panel"))
        return _back(
            h.url("agents", agent_id),
            f"Forgot {user}: {info.erased_events} event(s) erased from every view now; "
            f"{info.cold_files_pending} log file(s) are rewritten at the next seal.",
        )
    except _PanelError as exc:
        return _error_page(exc.status, str(exc), visitor if isinstance(visitor, Visitor) else None)
    except ForbiddenError as exc:
        return _error_page(403, str(exc), visitor if isinstance(visitor, Visitor) else None)
    except TiermemError as exc:
        return _error_page(422, str(exc), visitor if isinstance(visitor, Visitor) else None)
