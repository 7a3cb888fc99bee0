"""Memory levels (seed 000): global | project | task, the seed's fairy | project | task.

`filter_by_level` is the seed's `filterChatHistoryByMode`, line for line:

- global: every global item, nothing else;
- project: walk back from the newest item collecting project items, skipping
  task items, stopping at the first global item (where the project began);
- task: the trailing run of task items, stopping at the first non-task item.

`recent_items` answers "the last N items of that filtered history" straight
from the hot store with index range scans, so its cost does not grow with the
history (tests check it equals `filter_by_level(all_items)[-N:]`).

Transitions: finishing a task or a project appends a `memory_transition`
event whose `to_level` is the level the agent returns to; the projector turns
it into a transition item ("[ACTIONS]: <Task actions filtered for brevity>")
and a summary item, both at that level, so the finished detail drops out of
what the higher level sees.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from tiermem.errors import ValidationError
from tiermem.events import MEMORY_LEVELS

T = TypeVar("T")

# Finishing work at a level returns the agent to the level above it.
RETURN_LEVEL = {"task": "project", "project": "global"}


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


_COLS = "item_id, event_id, ts, kind, level, user, user_message, agent_response, text"


def _row(r: sqlite3.Row | tuple[Any, ...]) -> WorkingItem:
    return WorkingItem(*tuple(r))


def all_items(conn: sqlite3.Connection, agent_id: str) -> list[WorkingItem]:
    rows = conn.execute(f"SELECT {_COLS} FROM wm_items WHERE agent_id=? ORDER BY ts, item_id", (agent_id,))
    return [_row(r) for r in rows]


def recent_items(conn: sqlite3.Connection, agent_id: str, level: str, limit: int) -> list[WorkingItem]:
    """`filter_by_level(all_items(agent), level)[-limit:]`, computed with bounded index scans."""
    check_level(level)
    if limit <= 0:
        return []
    if level == "global":
        rows = conn.execute(
            f"SELECT {_COLS} FROM wm_items WHERE agent_id=? AND level='global'"
            " ORDER BY ts DESC, item_id DESC LIMIT ?",
            (agent_id, limit),
        ).fetchall()
    else:
        # The boundary: the newest global item (project) or newest non-task item (task).
        stop_levels = ("global",) if level == "project" else ("global", "project")
        boundary: tuple[str, str] | None = None
        for stop in stop_levels:
            b = conn.execute(
                "SELECT ts, item_id FROM wm_items WHERE agent_id=? AND level=? ORDER BY ts DESC, item_id DESC LIMIT 1",
                (agent_id, stop),
            ).fetchone()
            if b is not None and (boundary is None or (b[0], b[1]) > boundary):
                boundary = (b[0], b[1])
        if boundary is None:
            rows = conn.execute(
                f"SELECT {_COLS} FROM wm_items WHERE agent_id=? AND level=? ORDER BY ts DESC, item_id DESC LIMIT ?",
                (agent_id, level, limit),
            ).fetchall()
        else:
            rows = conn.execute(
                f"SELECT {_COLS} FROM wm_items WHERE agent_id=? AND level=? AND (ts > ? OR (ts = ? AND item_id > ?))"
                " ORDER BY ts DESC, item_id DESC LIMIT ?",
                (agent_id, level, boundary[0], boundary[0], boundary[1], limit),
            ).fetchall()
    return [_row(r) for r in reversed(rows)]


def current_level(conn: sqlite3.Connection, agent_id: str) -> str:
    """The level of the agent's newest item (its current mode); global when it has none."""
    row = conn.execute(
        "SELECT level FROM wm_items WHERE agent_id=? ORDER BY ts DESC, item_id DESC LIMIT 1", (agent_id,)
    ).fetchone()
    return str(row[0]) if row is not None else "global"


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
        "to_level": RETURN_LEVEL[finished_level],
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
