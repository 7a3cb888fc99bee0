"""Memory levels: global | project | task (docs/runtime.md, "Memory levels").

`filter_by_level` keeps, per level:

- global: every global item, nothing else;
- project: walk back from the newest item collecting project items, skipping
  task items, stopping at the first global item (where the project began);
- task: the trailing run of task items, stopping at the first non-task item.

`recent_items` answers "the last N items of that filtered history" straight
from the hot store with index range scans, so its cost does not grow with the
history (tests check it equals `filter_by_level(all_items)[-N:]`). The
history is the one the principal may read (`tiermem.runtime.visibility`): the
agent's items without an owner plus those of the user it serves, so one
user's turns never appear in another's recent interactions; each owner class
is its own index range (agent, owner, level, ts).

Transitions: finishing a task or a project appends a `memory_transition`
event whose `to_level` is the level the agent returns to (a task: its
project's level, or global for a solo task without a project; a project:
global); the projector turns
it into a transition item ("[ACTIONS]: <Task actions filtered for brevity>")
and a summary item, both at that level, so the finished detail drops out of
what the higher level sees.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tiermem.runtime.visibility import SEP, Principal, member_pattern

from tiermem.errors import ValidationError
from tiermem.events import MEMORY_LEVELS

T = TypeVar("T")

# Finishing work at a level returns the agent to the level above it; a task outside any
# project (a solo task) has no project level to return to, so it returns to global.
RETURN_LEVEL = {"task": "project", "project": "global"}


def return_level(finished_level: str, project_id: str | None) -> str:
    """The level an agent returns to when it finishes work at `finished_level`."""
    if finished_level == "task" and not project_id:
        return "global"
    return RETURN_LEVEL[finished_level]


def check_level(level: str) -> str:
    if level not in MEMORY_LEVELS:
        raise ValidationError("level", f"expected one of {', '.join(MEMORY_LEVELS)}, got {level!r}")
    return level


def _level_of(item: Any) -> str:
    if isinstance(item, dict):
        return str(item.get("memory_level") or item.get("level"))
    return str(getattr(item, "level", None) or getattr(item, "memory_level", None))


def filter_by_level(items: Sequence[T], level: str, level_of: Callable[[T], str] = _level_of) -> list[T]:
    """The seed's filter over a whole history (oldest first); returns items oldest first."""
    check_level(level)
    if level == "global":
        return [item for item in items if level_of(item) == "global"]
    out: list[T] = []
    if level == "project":
        for item in reversed(items):
            item_level = level_of(item)
            if item_level == "project":
                out.append(item)
            elif item_level == "task":
                continue  # orchestrators do not need task detail
            elif item_level == "global":
                break  # the boundary where the project began
    else:
        for item in reversed(items):
            if level_of(item) == "task":
                out.append(item)
            else:
                break
    out.reverse()
    return out


@dataclass(frozen=True)
class WorkingItem:
    item_id: str
    event_id: str
    ts: str
    kind: str  # interaction | transition | summary
    level: str
    user: str | None
    user_message: str | None
    agent_response: str | None
    text: str | None

    def render(self) -> str:
        if self.kind == "interaction":
            who = self.user or "user"
            return f"[{self.ts[:16]}] {who}: {self.user_message or ''}\nyou: {self.agent_response or ''}"
        return f"[{self.ts[:16]}] {self.text or ''}"


_COLS = 'item_id, event_id, ts, kind, level, "user", user_message, agent_response, text'


def _row(r: sqlite3.Row | tuple[Any, ...]) -> WorkingItem:
    return WorkingItem(*tuple(r))


def _owner_classes(p: Principal) -> list[tuple[str, list[Any]]]:
    """The principal's visible items as disjoint index ranges: no owner, its user, shared rows."""
    classes: list[tuple[str, list[Any]]] = [("owner IS NULL", [])]
    if p.user is not None:
        classes.append(("owner = ?", [p.user]))
        # Several-owner keys start with SEP, so they form one narrow range of the index.
        classes.append(
            (
                "owner >= ? AND owner < ? AND instr(owner, ?) > 0",
                [SEP, chr(ord(SEP) + 1), member_pattern(p.user)],
            )
        )
    return classes


def _newest(
    conn: sqlite3.Connection, p: Principal, level: str, limit: int, after: tuple[str, str] | None = None
) -> list[sqlite3.Row]:
    """The newest `limit` visible items at `level` (newer than `after`), newest first."""
    rows: list[sqlite3.Row] = []
    bound = ""
    bound_params: list[Any] = []
    if after is not None:
        bound = " AND (ts > ? OR (ts = ? AND item_id > ?))"
        bound_params = [after[0], after[0], after[1]]
    for cond, params in _owner_classes(p):
        rows += conn.execute(
            f"SELECT {_COLS} FROM wm_items WHERE agent_id=? AND {cond} AND level=?{bound}"
            " ORDER BY ts DESC, item_id DESC LIMIT ?",
            (p.agent_id, *params, level, *bound_params, limit),
        ).fetchall()
    rows.sort(key=lambda r: (r[2], r[0]), reverse=True)
    return rows[:limit]


def all_items(conn: sqlite3.Connection, p: Principal) -> list[WorkingItem]:
    """Every item the principal may read, oldest first (the history the level filter walks)."""
    clauses = " OR ".join(f"({cond})" for cond, _ in _owner_classes(p))
    params = [v for _, ps in _owner_classes(p) for v in ps]
    rows = conn.execute(
        f"SELECT {_COLS} FROM wm_items WHERE agent_id=? AND ({clauses}) ORDER BY ts, item_id",
        (p.agent_id, *params),
    )
    return [_row(r) for r in rows]


def recent_items(conn: sqlite3.Connection, p: Principal, level: str, limit: int) -> list[WorkingItem]:
    """`filter_by_level(all_items(p), level)[-limit:]`, computed with bounded index scans."""
    check_level(level)
    if limit <= 0:
        return []
    if level == "global":
        rows = _newest(conn, p, "global", limit)
    else:
        # The boundary: the newest global item (project) or newest non-task item (task).
        stop_levels = ("global",) if level == "project" else ("global", "project")
        boundary: tuple[str, str] | None = None
        for stop in stop_levels:
            found = _newest(conn, p, stop, 1)
            if found and (boundary is None or (found[0][2], found[0][0]) > boundary):
                boundary = (found[0][2], found[0][0])
        rows = _newest(conn, p, level, limit, boundary)
    return [_row(r) for r in reversed(rows)]


def current_level(conn: sqlite3.Connection, p: Principal) -> str:
    """The level of the newest item the principal may read (its current mode); global when none."""
    newest: tuple[str, str, str] | None = None
    for level in MEMORY_LEVELS:
        found = _newest(conn, p, level, 1)
        if found and (newest is None or (found[0][2], found[0][0]) > newest[:2]):
            newest = (found[0][2], found[0][0], level)
    return newest[2] if newest is not None else "global"


def transition_event(
    agent_id: str,
    finished_level: str,
    summary: str,
    *,
    project_id: str | None = None,
    task_id: str | None = None,
    session_id: str | None = None,
    source_event_ids: list[str] | None = None,
) -> dict[str, Any]:
    """The `memory_transition` event for finishing work at `finished_level` (task or project)."""
    if finished_level not in RETURN_LEVEL:
        raise ValidationError("level", f"only a task or a project can be finished, not {finished_level!r}")
    if not summary.strip():
        raise ValidationError("summary", "a transition needs a summary of the finished work")
    event: dict[str, Any] = {
        "type": "memory_transition",
        "agent_id": agent_id,
        "from_level": finished_level,
        "to_level": return_level(finished_level, project_id),
        "summary": summary,
    }
    for name, value in (
        ("project_id", project_id),
        ("task_id", task_id),
        ("session_id", session_id),
        ("source_event_ids", source_event_ids),
    ):
        if value:
            event[name] = value
    return event
