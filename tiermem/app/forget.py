"""`tiermem forget`: the user owns the data (seed 002, "User control").

One call appends one `erasure` event naming the target (agent, user or event)
and listing the ids of every event that held content about it — the events
that name it directly and, transitively, everything derived from them
(episodes quoting a turn, proposals, decisions, summaries). The erasure holds
ids only, never the content.

Effects, in order:
1. the erasure is in the log: every view (`knowledge`, `proposals`, the
   reviewer's queries) and the evolver's fold exclude those ids at once;
2. the runtime projector is run, which deletes them from the hot store;
3. reviewer reports mentioning them are regenerated (or removed);
4. at the next `tiermem seal` the log rewrites every file still holding them
   (`tiermem.log.erasure.apply_erasures`), so no file under the data root
   contains the content any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tiermem.erased import ErasureTargets, compute_erased, load_targets
from tiermem.errors import NotFoundError, ValidationError
from tiermem.eventlog import EventLog
from tiermem.ids import new_event_id
from tiermem.settings import Settings


@dataclass
class ForgetInfo:
    target_kind: str
    target: str
    erasure_event_id: str
    erased_events: int
    erased_event_ids: list[str] = field(default_factory=list)
    projected: bool = False
    projection: dict[str, Any] | None = None
    reports_regenerated: int = 0
    reports_removed: int = 0
    cold_files_pending: int = 0  # files still holding the content until the next `seal`
    note: str = (
        "content is hidden from every view now and removed from the cold files at the next `tiermem seal`"
    )


def _target(agent: str | None, user: str | None, event: str | None) -> tuple[str, str]:
    given = [(k, v) for k, v in (("agent", agent), ("user", user), ("event", event)) if v]
    if len(given) != 1:
        raise ValidationError("target", "give exactly one of --agent, --user, --event")
    return given[0]


def forget(
    settings: Settings,
    *,
    agent: str | None = None,
    user: str | None = None,
    event: str | None = None,
    requested_by: str = "user",
    reason: str | None = None,
) -> ForgetInfo:
    kind, target = _target(agent, user, event)
    targets = ErasureTargets()
    {"agent": targets.agents, "user": targets.users, "event": targets.event_ids}[kind].add(target)
    erased, affected = compute_erased(settings, targets)
    if kind == "event" and target not in {i for ids in affected.values() for i in ids}:
        already = target in compute_erased(settings, load_targets(settings))[0]
        if not already:
            raise NotFoundError(f"no event {target!r} in the log")
    record = {
        "type": "erasure",
        "event_id": new_event_id(),
        "target_kind": kind,
        "target": target,
        "requested_by": requested_by,
        "reason": reason,
        "erased_event_ids": sorted(erased),
    }
    if kind == "agent":
        record["agent_id"] = target
    log = EventLog(settings)
    try:
        result = log.append({k: v for k, v in record.items() if v is not None})
    finally:
        log.close()
    info = ForgetInfo(
        target_kind=kind,
        target=target,
        erasure_event_id=result.event_id,
        erased_events=len(erased),
        erased_event_ids=sorted(erased),
        cold_files_pending=len(affected),
    )
    info.projected, info.projection = _project(settings)
    from tiermem.reviewer.job import scrub_reports

    info.reports_regenerated, info.reports_removed = scrub_reports(settings, erased, {target})
    return info


def _project(settings: Settings) -> tuple[bool, dict[str, Any] | None]:
    """Bring the hot store up to date so the erasure reaches it now (if the runtime is installed)."""
    from tiermem.runtime.projector import project

    result = project(settings)
    try:
        from dataclasses import asdict

        return True, asdict(result)
    except TypeError:
        return True, None
