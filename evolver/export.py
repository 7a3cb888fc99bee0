"""`tiermem export`: everything the system holds about an agent or a user, with sources.

"Everything" is exactly what `forget` would erase for the same target: the
events that name it (turns, proposals, decisions, relationships, retrievals,
identity, KV writes) and everything derived from them (episodes, summaries),
plus the current state of each fact they touch. Erased events are never
exported. JSON for machines, Markdown for people.

An export for a user holds that user's data only: facts are included when
they are about them or derived from their turns (the fact's owners), never
another user's. Exports saved under the data root (`<data>/exports/`,
`tiermem export --save`) are copies the system keeps, so `forget` reaches
them: `scrub_exports` regenerates each one that mentions erased content, or
removes it when it was an export of the forgotten target itself.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
from tiermem.evolver.state import load_state

from tiermem.erased import ErasureTargets, compute_erased, erased_filter
from tiermem.errors import ValidationError
from tiermem.eventlog import EventLog
from tiermem.events import STREAMS
from tiermem.ids import format_ts, utcnow
from tiermem.settings import Settings

SECTIONS = {
    "interaction": "interactions",
    "episode": "episodes",
    "knowledge_proposed": "proposals",
    "knowledge_decided": "decisions",
    "fact_set": "kv_writes",
    "fact_removed": "kv_writes",
    "identity_set": "identity",
    "relationship_updated": "relationships",
    "retrieval": "retrievals",
    "memory_transition": "transitions",
    "session_ended": "sessions",
}


def export_data(settings: Settings, *, agent: str | None = None, user: str | None = None) -> dict[str, Any]:
    if bool(agent) == bool(user):
        raise ValidationError("target", "give exactly one of --agent, --user")
    targets = ErasureTargets(agents={agent} if agent else set(), users={user} if user else set())
    ids, _files = compute_erased(settings, targets)
    hidden = erased_filter(settings)
    sections: dict[str, list[dict[str, Any]]] = defaultdict(list)
    log = EventLog(settings)
    try:
        for stream in STREAMS:
            if stream == "erasures":
                continue
            for _seg, _line, ev in log.read(stream):
                if ev.get("event_id") in ids and not hidden(ev):
                    sections[SECTIONS.get(ev.get("type", ""), "other")].append(ev)
    finally:
        log.close()
    decision_ids = {ev["event_id"] for ev in sections.get("decisions", [])}
    state = load_state(settings)
    facts = [
        {
            "fact_id": f.fact_id,
            "agent_id": f.agent_id,
            "status": f.status,
            "scope": f.scope,
            "category": f.category,
            "topic": f.topic,
            "key": f.key,
            "participant": f.participant,
            "content": f.content,
            "original": f.original,
            "source": f.source,
            "created_at": f.created_at,
            "updated_at": f.updated_at,
            "recall_count": state.recall_counts.get(f.fact_id, 0),
            "note": f.note,
            "source_event_ids": list(f.source_event_ids),
        }
        for f in state.facts.values()
        if f.status != "pending"
        and (
            f.event_id in decision_ids
            or (agent and f.agent_id == agent)
            or (user and (f.participant == user or user in f.owners))
        )
        and not (user and f.participant not in (None, user))
        and not (user and f.owners and user not in f.owners)
    ]
    return {
        "target_kind": "agent" if agent else "user",
        "target": agent or user,
        "exported_at": format_ts(utcnow()),
        "counts": {name: len(rows) for name, rows in sorted(sections.items())} | {"facts": len(facts)},
        "facts": sorted(facts, key=lambda f: (f["status"] != "active", f["created_at"])),
        **{name: rows for name, rows in sorted(sections.items())},
    }


def to_markdown(data: dict[str, Any]) -> str:
    lines = [
        f"# What tiermem holds about {data['target_kind']} `{data['target']}`",
        "",
        f"Exported {data['exported_at']}. Counts: "
        + ", ".join(f"{k} {v}" for k, v in data["counts"].items()),
        "",
        "## Facts",
        "",
    ]
    for f in data["facts"]:
        lines.append(
            f"- **{f['status']}** `{f['fact_id']}` ({f['scope']}, {f['category'] or '-'}): {f['content']}"
        )
        lines.append(f"  - source: {f['source']}; sources: {', '.join(f['source_event_ids']) or '-'}")
        if f.get("note"):
            lines.append(f"  - note: {f['note']}")
    for name in (
        "interactions",
        "episodes",
        "proposals",
        "decisions",
        "kv_writes",
        "identity",
        "relationships",
        "retrievals",
        "transitions",
        "sessions",
        "other",
    ):
        rows = data.get(name) or []
        if not rows:
            continue
        lines += ["", f"## {name.replace('_', ' ').title()} ({len(rows)})", ""]
        for ev in rows:
            lines.append(f"- `{ev['event_id']}` {ev.get('ts', '')} {_describe(ev)}")
    return "\n".join(lines) + "\n"


def _describe(ev: dict[str, Any]) -> str:
    t = ev.get("type")
    if t == "interaction":
        return f"user {ev.get('user') or '-'}: {ev.get('user_message', '')!r} → agent: {ev.get('agent_response', '')!r}"
    if t == "episode":
        return f"episode {ev.get('name')!r}: {ev.get('summary', '')}"
    if t in ("knowledge_proposed", "knowledge_decided"):
        extra = f" [{ev.get('decision')}]" if t == "knowledge_decided" else ""
        return (
            f"{ev.get('content', '')}{extra} (sources: {', '.join(ev.get('source_event_ids') or []) or '-'})"
        )
    if t == "fact_set":
        return f"{ev.get('key')} = {ev.get('value')}"
    if t == "relationship_updated":
        return f"{ev.get('participant')}: {ev.get('summary')}"
    if t == "retrieval":
        return f"{ev.get('tool')} {ev.get('query') or ''!r} → {', '.join(ev.get('item_ids') or [])}"
    return orjson.dumps({k: v for k, v in ev.items() if k not in ("event_id", "ts")}).decode()


def saved_export_path(settings: Settings, kind: str, target: str, fmt: str) -> Path:
    """Where `--save` puts an export: `<data>/exports/<kind>-<target>-<UTC time>.<fmt>`."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", target) or "_"
    stamp = format_ts(utcnow()).replace(":", "").replace("-", "").replace(".", "")
    return settings.exports_dir / f"{kind}-{safe}-{stamp}.{fmt}"


def export(
    settings: Settings,
    *,
    agent: str | None = None,
    user: str | None = None,
    fmt: str = "json",
    out: Path | None = None,
    save: bool = False,
) -> tuple[dict[str, Any], str]:
    """(the data, its rendering in `fmt`); written to `out` (or, with `save`, under `<data>/exports/`)."""
    if fmt not in ("json", "md"):
        raise ValidationError("format", f"expected json or md, got {fmt!r}")
    data = export_data(settings, agent=agent, user=user)
    if save and out is None:
        out = saved_export_path(settings, str(data["target_kind"]), str(data["target"]), fmt)
    text = (
        orjson.dumps(data, default=str, option=orjson.OPT_INDENT_2).decode() + "\n"
        if fmt == "json"
        else to_markdown(data)
    )
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    return data, text


_MD_TITLE = re.compile(r"^# What tiermem holds about (agent|user) `(.*)`$", re.M)


def _export_target(path: Path, data: bytes) -> tuple[str, str] | None:
    """(kind, target) of a saved export, read back from its own content."""
    if path.suffix == ".json":
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if isinstance(doc, dict) and doc.get("target_kind") in ("agent", "user") and doc.get("target"):
            return str(doc["target_kind"]), str(doc["target"])
        return None
    m = _MD_TITLE.search(data.decode("utf-8", errors="replace"))
    return (m.group(1), m.group(2)) if m else None


def scrub_exports(
    settings: Settings, erased_ids: set[str], forgotten: set[tuple[str, str]]
) -> tuple[int, int]:
    """Regenerate or remove every saved export holding erased content; (regenerated, removed).

    Called after the erasure is in the log, so a regenerated export already
    leaves the erased events out. An export of a forgotten target is removed.
    """
    root = settings.exports_dir
    if not root.exists():
        return 0, 0
    needles = [i.encode() for i in erased_ids if i] + [t.encode() for _k, t in forgotten if t]
    regenerated = removed = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if not any(n in data for n in needles):
            continue
        target = _export_target(path, data)
        if target is None or target in forgotten or path.suffix not in (".json", ".md"):
            path.unlink()
            removed += 1
            continue
        kind, name = target
        export(
            settings,
            agent=name if kind == "agent" else None,
            user=name if kind == "user" else None,
            fmt=path.suffix[1:],
            out=path,
        )
        regenerated += 1
    return regenerated, removed
