"""The memory panel's pages, rendered from `panel_data` values (all memory text escaped)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from tiermem.app.server import html as h
from tiermem.app.server.panel_data import AgentView, TurnView


def login_page(message: str | None, *, error: bool = False) -> str:
    body = (
        "<section style='max-width:520px;margin:40px auto'><h1>Sign in</h1>"
        f"{h.flash(message, error=error)}"
        "<p class='muted'>Paste an API key from <code>tiermem keys create --operator</code> (every agent) or "
        "<code>tiermem keys create --agent NAME</code> (one agent). It is kept by the server for this "
        "session only; your browser holds an HttpOnly cookie.</p>"
        "<form method='post' action='/login'><input type='password' name='key' id='key' "
        "placeholder='tmk_…' style='width:100%' autocomplete='off' required>"
        "<p><button class='primary' type='submit'>Sign in</button></p></form></section>"
    )
    return h.page("Sign in", body)


def agents_list(rows: list[dict[str, Any]]) -> str:
    table = h.table(
        ["agent", "turns", "active facts", "episodes", "last turn"],
        (
            [
                f"<a href='{h.url('agents', r['agent_id'])}'>{h.esc(r['agent_id'])}</a>",
                h.esc(r["turns"]),
                h.esc(r["facts"]),
                h.esc(r["episodes"]),
                h.short_ts(r["last_ts"]),
            ]
            for r in rows
        ),
        empty="no agent has memory yet: record a turn (POST /v1/agents/NAME/turns) or run `tiermem demo`",
    )
    return f"<h1>Agents</h1><section>{table}</section>"


SECTIONS = [
    ("identity", "Identity & pinned facts"),
    ("queue", "Approval queue"),
    ("knowledge", "Knowledge"),
    ("episodes", "Episodes"),
    ("turns", "Recent turns"),
    ("used", "Memories used"),
    ("reports", "Review reports"),
]


def _as(user: str | None) -> str:
    """The query that keeps the viewed user on a link (the operator's `?user=` selector)."""
    return f"?user={quote(user)}" if user else ""


def _user_field(user: str | None) -> str:
    return f"<input type='hidden' name='user' value='{h.esc(user)}'>" if user else ""


def _viewer(agent: str, view: AgentView, operator: bool) -> str:
    """Whose memory this page shows, and (for the operator) the selector of the agent's users."""
    who = (
        f"user {h.esc(view.viewed_user)} and agent-level memory"
        if view.viewed_user
        else "agent-level memory only"
    )
    if not operator:
        return f"<p class='muted' id='viewing'>Showing {who}.</p>"
    options = "<option value=''>agent-level only</option>" + "".join(
        f"<option value='{h.esc(u)}'{' selected' if u == view.viewed_user else ''}>{h.esc(u)}</option>"
        for u in view.users
    )
    return (
        f"<form method='get' action='{h.url('agents', agent)}' id='viewing'><span class='muted'>Showing {who}.</span> "
        f"<select name='user' id='view-user'>{options}</select> <button type='submit'>View</button></form>"
    )


def agent_page(
    view: AgentView,
    pending: list[dict[str, Any]],
    reports: list[dict[str, Any]],
    csrf: str,
    operator: bool,
    message: str | None,
) -> str:
    agent = view.agent_id
    nav = "".join(f"<a href='#{key}'>{h.esc(label)}</a>" for key, label in SECTIONS)
    if operator:
        nav += "<a href='#forget'>Forget a user</a>"
    parts = [
        f"<h1>{h.esc(agent)}</h1>",
        f"<p class='muted'>{len(view.users)} user(s) · {sum(len(v) for v in view.knowledge.values())} "
        f"knowledge item(s) · {len(view.episodes)} episode(s) · {len(pending)} waiting for approval</p>",
        h.flash(message),
        f"<nav class='sections'>{nav}</nav>",
        _viewer(agent, view, operator),
        _identity(view),
        # A key bound to one user reads the queue but does not decide it (it spans the agent's users).
        _queue(agent, pending, csrf, view.viewed_user, decide=operator or view.viewed_user is None),
        _knowledge(agent, view),
        _episodes(view),
        _turns(agent, view),
        _used(view),
        _reports(agent, reports),
    ]
    if operator:
        parts.append(_forget(agent, view.users, csrf))
    return "".join(parts)


def _identity(view: AgentView) -> str:
    ident = view.identity
    text = (
        f"<p>{h.esc(ident['content'])}</p><p class='muted'>set by {h.esc(ident['source'])} · {h.short_ts(ident['ts'])}</p>"
        if ident
        else "<p class='muted'>no identity set (PUT /v1/agents/NAME/identity)</p>"
    )
    facts = h.table(
        ["scope", "key", "value", "source", "updated"],
        (
            [
                h.badge(f["scope"]),
                h.esc(f["key"]),
                h.esc(f["content"]),
                h.esc(f["source"]),
                h.short_ts(f["updated_at"]),
            ]
            for f in view.pinned
        ),
        empty="no pinned facts",
    )
    return f"<section id='identity'><h2>Identity</h2>{text}<h3>Pinned facts</h3>{facts}</section>"


def _queue(agent: str, pending: list[dict[str, Any]], csrf: str, user: str | None, *, decide: bool) -> str:
    rows = []
    for p in pending:
        pid = str(p["proposal_id"])
        link = h.url("agents", agent, "proposals", pid) + _as(user)
        base = h.url("agents", agent, "proposals", pid)
        buttons = (
            h.post_form(f"{base}/approve", csrf, "Approve", cls="primary", fields=_user_field(user))
            + h.post_form(f"{base}/reject", csrf, "Reject", fields=_user_field(user))
            if decide
            else ""
        )
        label = "edit · diff · sources" if decide else "diff · sources"
        actions = f"<div class='actions'>{buttons}<a href='{link}'>{label}</a></div>"
        rows.append(
            [
                f"<a href='{link}'>{h.esc(p['content'])}</a>" + actions,
                h.esc(p.get("origin")),
                h.esc(p.get("confidence")),
                h.short_ts(p.get("ts")),
            ]
        )
    table = h.table(
        ["proposal", "origin", "confidence", "proposed"], rows, empty="nothing waits for approval"
    )
    return f"<section id='queue'><h2>Approval queue</h2>{table}</section>"


def _sources(agent: str, ids: list[str], turn_ids: set[str], user: str | None) -> str:
    """Links to the source turns still held; other sources (events, erased turns) by id."""
    if not ids:
        return "<span class='muted'>—</span>"
    out = []
    for i in ids[:5]:
        if i in turn_ids:
            out.append(
                f"<a href='{h.url('agents', agent, 'turns', i)}{_as(user)}' title='{h.esc(i)}'>turn …{h.esc(i[-6:])}</a>"
            )
        else:
            out.append(f"<span class='muted' title='{h.esc(i)}'>event …{h.esc(i[-6:])}</span>")
    return " ".join(out)


def _knowledge(agent: str, view: AgentView) -> str:
    if not view.knowledge:
        return "<section id='knowledge'><h2>Knowledge</h2><p class='muted'>no knowledge yet (run `tiermem compress` then `tiermem evolve`)</p></section>"
    blocks = []
    for scope, facts in sorted(view.knowledge.items()):
        table = h.table(
            ["content", "status", "topic", "about", "source", "provenance (source turns)", "recalled"],
            (
                [
                    h.esc(f["content"]),
                    h.badge(f["status"]),
                    h.esc(f["topic"]),
                    h.esc(f["participant"]),
                    h.esc(f["source"]),
                    _sources(agent, f["sources"], view.turn_ids, view.viewed_user),
                    h.esc(f["recall_count"]),
                ]
                for f in facts
            ),
        )
        blocks.append(f"<h3>scope: {h.esc(scope)}</h3>{table}")
    return f"<section id='knowledge'><h2>Knowledge</h2>{''.join(blocks)}</section>"


def _episodes(view: AgentView) -> str:
    rows = []
    for e in view.episodes:
        quotes = "".join(
            f"<div class='quote'>“{h.clip(q.get('text') if isinstance(q, dict) else q, 160)}”</div>"
            for q in e["key_quotes"][:2]
        )
        rows.append(
            [
                h.importance(e["importance"]),
                f"<b>{h.esc(e['name'])}</b><br>{h.esc(e['summary'])}{quotes}",
                h.esc(", ".join(str(p) for p in e["participants"])),
                f"{h.short_ts(e['start_ts'])}<br><span class='muted'>to {h.short_ts(e['end_ts'])}</span>",
            ]
        )
    table = h.table(
        ["importance", "episode", "with", "when"], rows, empty="no episodes yet (run `tiermem compress`)"
    )
    return (
        f"<section id='episodes'><h2>Episodes <span class='muted'>by importance</span></h2>{table}</section>"
    )


def _turns(agent: str, view: AgentView) -> str:
    blocks = []
    for level, turns in view.turns.items():
        table = h.table(
            ["when", "user", "message", "response", ""],
            (
                [
                    h.short_ts(t["ts"]),
                    h.esc(t["user"]),
                    h.clip(t["user_message"]),
                    h.clip(t["agent_response"]),
                    f"<a href='{h.url('agents', agent, 'turns', t['event_id'])}{_as(view.viewed_user)}'>memories used</a>",
                ]
                for t in turns
            ),
        )
        blocks.append(f"<h3>level: {h.esc(level)}</h3>{table}")
    inner = "".join(blocks) or "<p class='muted'>no turns yet</p>"
    return f"<section id='turns'><h2>Recent turns <span class='muted'>by memory level</span></h2>{inner}</section>"


def _retrieval_rows(retrievals: list[dict[str, Any]], labels: dict[str, str]) -> list[list[str]]:
    rows = []
    for r in retrievals:
        items = "".join(
            f"<div>{h.clip(labels.get(i) or i + ' (no longer held)', 140)}</div>" for i in r["item_ids"][:8]
        )
        rows.append(
            [
                h.short_ts(r["ts"]),
                h.esc(r["tool"]),
                h.esc(r["query"]),
                h.esc(r["participant"]),
                items or "<span class='muted'>nothing</span>",
                h.esc(r["tokens"]),
            ]
        )
    return rows


def _used(view: AgentView) -> str:
    table = h.table(
        ["when", "tool", "query", "for", "memories delivered", "tokens"],
        _retrieval_rows(view.retrievals, view.labels),
        empty="no retrievals recorded yet",
    )
    return f"<section id='used'><h2>Memories used <span class='muted'>(retrieval events)</span></h2>{table}</section>"


def _reports(agent: str, reports: list[dict[str, Any]]) -> str:
    blocks = []
    for r in reports[:3]:
        chart = (
            f"<img class='chart' alt='review chart {h.esc(r['day'])}' src='{h.url('agents', agent, 'reports', r['day'] + '.png')}'>"
            if r["chart"]
            else ""
        )
        enriched = r["fully_enriched_fraction"]
        blocks.append(
            f"<h3>{h.esc(r['day'])}</h3><p>{h.esc(r['interactions'])} interaction(s) · "
            f"{h.esc(round(100 * enriched) if isinstance(enriched, int | float) else '?')}% fully enriched · "
            f"cost ${h.esc(r['cost_usd'])} · {h.esc(r['flagged_interactions'])} flagged</p>"
            f"<p class='muted'>missing fields: {h.esc(', '.join(r['missing_fields']) or 'none')}</p>{chart}"
        )
    inner = "".join(blocks) or "<p class='muted'>no review reports yet (run `tiermem review`)</p>"
    return f"<section id='reports'><h2>Review reports</h2>{inner}</section>"


def _forget(agent: str, users: list[str], csrf: str) -> str:
    options = "".join(f"<option value='{h.esc(u)}'>{h.esc(u)}</option>" for u in users)
    fields = (
        f"<select name='user' id='forget-user'>{options}</select> "
        "<input type='text' name='confirm' id='forget-confirm' placeholder='type the user again to confirm'> "
    )
    form = h.post_form(
        h.url("agents", agent, "forget"), csrf, "Forget this user everywhere", cls="danger", fields=fields
    )
    return (
        "<section id='forget'><h2>Forget a user</h2><p class='muted'>Erases everything about the user, for every "
        "agent: hidden from every view, context, recall and export at once, removed from the log's files at the "
        f"next seal. This cannot be undone.</p>{form}</section>"
    )


def turn_page(agent: str, view: TurnView, user: str | None = None) -> str:
    t = view.turn
    table = h.table(
        ["when", "tool", "query", "for", "memories delivered", "tokens"],
        _retrieval_rows(view.retrievals, view.labels),
        empty="no memory was retrieved for this turn",
    )
    return (
        f"<p><a href='{h.url('agents', agent)}{_as(user)}#turns'>← {h.esc(agent)}</a></p><h1>Turn</h1>"
        f"<section><p class='muted'>{h.short_ts(t['ts'])} · {h.esc(t['user'])} · session {h.esc(t['session_id'])} "
        f"· level {h.esc(t['level'])} · {h.esc(t['event_id'])}</p>"
        f"<p><b>{h.esc(t['user'])}:</b> {h.esc(t['user_message'])}</p><p><b>{h.esc(agent)}:</b> {h.esc(t['agent_response'])}</p></section>"
        f"<section><h2>Which memories were used</h2><p class='muted'>The retrievals of this session since the "
        f"turn before it: what the agent was given to answer.</p>{table}</section>"
    )


def proposal_page(
    agent: str,
    shown: dict[str, Any],
    csrf: str,
    message: str | None,
    user: str | None = None,
    *,
    decide: bool = True,
) -> str:
    p = shown["proposal"]
    pid = str(p["proposal_id"])
    base = h.url("agents", agent, "proposals", pid)
    changes = shown["if_approved"]["changes"]
    diffs = "".join(
        f"<p>{h.badge(c['decision'])} {h.esc(c['content'])} <span class='muted'>{h.esc(c['fact_id'])}</span></p>"
        + (h.diff_block(c["diff"]) if c.get("diff") else "")
        for c in changes
    )
    turns = h.table(
        ["when", "user", "message", "response"],
        (
            [h.short_ts(s["ts"]), h.esc(s["user"]), h.esc(s["user_message"]), h.esc(s["agent_response"])]
            for s in shown["provenance"]["source_turns"]
        ),
        empty="no source turns recorded",
    )
    pending = shown["status"] == "pending" and decide
    actions = ""
    if pending:
        edit_fields = (
            _user_field(user) + f"<textarea name='content' id='edit-content'>{h.esc(p['content'])}</textarea>"
        )
        actions = (
            "<div class='actions'>"
            + h.post_form(f"{base}/approve", csrf, "Approve", cls="primary", fields=_user_field(user))
            + h.post_form(
                f"{base}/reject",
                csrf,
                "Reject",
                fields=_user_field(user)
                + "<input type='text' name='reason' placeholder='reason (optional)'>",
            )
            + "</div><h3>Edit before saving</h3><p class='muted'>Saves your wording as a fact and rejects the proposal "
            "(kept for the audit trail).</p>"
            + h.post_form(f"{base}/edit", csrf, "Save edited version", fields=edit_fields)
        )
    return (
        f"<p><a href='{h.url('agents', agent)}{_as(user)}#queue'>← {h.esc(agent)}</a></p>{h.flash(message)}"
        f"<h1>Proposal</h1><section><p style='font-size:17px'>{h.esc(p['content'])}</p>"
        f"<p class='muted'>{h.badge(shown['status'])} · origin {h.esc(p['origin'])} · confidence {h.esc(p['confidence'])} "
        f"· topic {h.esc(p.get('topic'))}"
        + (f" · about {h.esc(p['participant'])}" if p.get("participant") else "")
        + f"</p>{actions}</section>"
        f"<section><h2>If approved: {h.esc(shown['if_approved']['action'])}</h2>{diffs or '<p class=muted>no change</p>'}</section>"
        f"<section><h2>Where it came from</h2>{turns}</section>"
    )
