"""HTML building blocks of the memory panel: escaping, the page frame, tables, badges, forms.

Every value from memory goes through `esc` (memory is data: stored text must
not become markup). Pages are plain HTML with one stylesheet; the only script
is none at all: forms post, the server redirects.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from urllib.parse import quote

STYLE = """
:root { --ink:#1d2433; --muted:#5b6475; --line:#dfe3ea; --bg:#f6f7f9; --card:#fff; --accent:#2f5bd3;
        --ok:#1f7a4d; --warn:#a05a00; --bad:#b42318; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:var(--ink);
       background:var(--bg); }
header { background:#1d2433; color:#fff; padding:10px 24px; display:flex; gap:24px; align-items:center; }
header a { color:#fff; text-decoration:none; }
header .brand { font-weight:700; letter-spacing:.02em; }
header form { margin-left:auto; }
main { max-width:1180px; margin:0 auto; padding:20px 24px 60px; }
nav.sections { display:flex; flex-wrap:wrap; gap:8px; margin:8px 0 20px; }
nav.sections a { background:var(--card); border:1px solid var(--line); border-radius:16px; padding:3px 12px;
                 color:var(--accent); text-decoration:none; font-size:14px; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:14px 18px;
          margin-bottom:18px; }
h1 { font-size:24px; margin:4px 0 4px; } h2 { font-size:18px; margin:0 0 10px; }
h3 { font-size:15px; margin:14px 0 6px; color:var(--muted); text-transform:uppercase; letter-spacing:.04em; }
table { border-collapse:collapse; width:100%; font-size:14px; }
th, td { text-align:left; padding:6px 8px; border-bottom:1px solid var(--line); vertical-align:top; }
th { color:var(--muted); font-weight:600; font-size:13px; }
.muted { color:var(--muted); font-size:13px; }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600;
         background:#eef1f6; color:var(--muted); }
.badge.active, .badge.approved { background:#e3f4ea; color:var(--ok); }
.badge.pending { background:#fff1dc; color:var(--warn); }
.badge.inactive, .badge.archived, .badge.rejected { background:#f2f2f2; color:#777; }
.imp { display:inline-block; min-width:26px; text-align:center; border-radius:6px; color:#fff; font-weight:700; }
.quote { border-left:3px solid var(--line); padding-left:10px; color:var(--muted); margin:4px 0; }
pre.diff { background:#fbfbfc; border:1px solid var(--line); padding:8px; border-radius:6px; white-space:pre-wrap; }
pre.diff span { display:block; }
pre.diff .add { color:var(--ok); background:#e9f7ef; display:block; }
pre.diff .del { color:var(--bad); background:#fdecea; display:block; }
.actions { display:flex; gap:10px; flex-wrap:wrap; align-items:flex-start; margin-top:10px; }
.actions form { display:flex; gap:6px; align-items:flex-start; }
button { border:1px solid var(--line); background:#fff; border-radius:6px; padding:6px 14px; cursor:pointer;
         font:inherit; }
button.primary { background:var(--accent); color:#fff; border-color:var(--accent); }
button.danger { background:var(--bad); color:#fff; border-color:var(--bad); }
input[type=text], input[type=password], textarea { font:inherit; padding:6px 8px; border:1px solid #c8ced9;
         border-radius:6px; }
textarea { width:420px; height:70px; }
.flash { background:#e3f4ea; border:1px solid #b9e2c9; padding:10px 14px; border-radius:8px; margin-bottom:16px; }
.flash.error { background:#fdecea; border-color:#f5c2bd; }
.grid2 { display:grid; grid-template-columns:1fr 1fr; gap:18px; }
img.chart { max-width:100%; border:1px solid var(--line); border-radius:6px; }
"""


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def url(*parts: str) -> str:
    return "/" + "/".join(quote(p, safe="") for p in parts)


def page(title: str, body: str, *, who: str | None = None, csrf: str | None = None) -> str:
    logout = (
        f'<form method="post" action="/logout">{hidden_csrf(csrf)}<span class="muted" style="color:#cfd6e4">'
        f"{esc(who)}</span> <button>Sign out</button></form>"
        if who and csrf
        else ""
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)} · tiermem</title><style>{STYLE}</style></head><body>"
        f"<header><a class='brand' href='/'>tiermem · memory panel</a><a href='/docs'>API docs</a>{logout}</header>"
        f"<main>{body}</main></body></html>"
    )


def hidden_csrf(token: str | None) -> str:
    return f'<input type="hidden" name="csrf" value="{esc(token)}">' if token else ""


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, empty: str = "nothing yet") -> str:
    """A table of already-escaped cells."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f"<p class='muted'>{esc(empty)}</p>"
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def badge(text: object) -> str:
    return f"<span class='badge {esc(text)}'>{esc(text)}</span>"


def importance(value: object) -> str:
    try:
        n = int(str(value))
    except ValueError:
        return esc(value)
    hue = max(0, min(120, 120 - 12 * n))  # green (low) to red (high)
    return f"<span class='imp' style='background:hsl({hue},55%,42%)'>{n}</span>"


def diff_block(diff_text: str) -> str:
    lines = []
    for line in diff_text.splitlines():
        cls = "add" if line.startswith("+") and not line.startswith("+++") else ""
        cls = "del" if line.startswith("-") and not line.startswith("---") else cls
        lines.append(f"<span class='{cls or 'ctx'}'>{esc(line)}</span>")
    return "<pre class='diff'>" + "".join(lines) + "</pre>"


def flash(message: str | None, *, error: bool = False) -> str:
    if not message:
        return ""
    return f"<div class='flash{' error' if error else ''}' role='status'>{esc(message)}</div>"


def post_form(action: str, csrf: str, label: str, *, cls: str = "", fields: str = "") -> str:
    button = f"<button class='{cls}' type='submit'>{esc(label)}</button>"
    return f"<form method='post' action='{esc(action)}'>{hidden_csrf(csrf)}{fields}{button}</form>"


def short_ts(ts: object) -> str:
    text = str(ts or "")
    return esc(text[:16].replace("T", " "))


def clip(text: object, limit: int = 220) -> str:
    value = str(text or "")
    return esc(value if len(value) <= limit else value[: limit - 1] + "…")
