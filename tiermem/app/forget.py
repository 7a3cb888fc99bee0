"""`tiermem forget`: the user owns the data (docs/evolver.md, "Erasure and export").

One call appends one `erasure` event naming the target (agent, user or event)
and listing the ids of every event that held content about it — the events
that name it directly and, transitively, everything derived from them
(episodes quoting a turn, proposals, decisions, summaries, retrievals). The
erasure holds ids only, never the content.

Effects, in order:
1. the erasure is in the log: every view (`knowledge`, `proposals`, the
   reviewer's queries) and the evolver's fold exclude those ids at once;
2. JSONL segments holding the content are rewritten at once (the line
   becomes a tombstone), so not even a raw read of today's files finds it,
   and `_rejects/` and `_quarantine/` are scrubbed of it;
3. the runtime projector is run, which deletes every row derived from it from
   the hot store (each row knows the users it was derived from), then merges
   the search indexes, vacuums the database and truncates its WAL;
4. reviewer reports and saved exports (`<data>/exports/`) mentioning it are
   regenerated, or removed when they were about the target itself;
5. sealed Parquet files are rewritten at the next `tiermem seal` — or at
   once with `now=True` (`--now`); so are the object-store tables when
   `cold_url` is set (the rows deleted, the replaced files vacuumed away).

`ForgetInfo.removed` says what was removed where (rows per hot-store table,
files per place); nothing in it quotes the content.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
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
    exports_regenerated: int = 0
    exports_removed: int = 0
    cold_files_pending: int = 0  # files still holding the content until the next `seal` (0 with --now)
    removed: dict[str, Any] = field(default_factory=dict)
    now: bool = False
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
    now: bool = False,
) -> ForgetInfo:
    kind, target = _target(agent, user, event)
    targets = ErasureTargets()
    {"agent": targets.agents, "user": targets.users, "event": targets.event_ids}[kind].add(target)
    erased, affected = compute_erased(settings, targets)
    if kind == "event" and target not in {i for ids in affected.values() for i in ids}:
        already = target in compute_erased(settings, load_targets(settings))[0]
        if not already:
            raise NotFoundError(f"no event {target!r} in the log")
    hot_before = _hot_counts(settings)  # the store brought up to date first: the difference is the erasure
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
        files = _rewrite_files(settings, log, everything=now)
    finally:
        log.close()
    info = ForgetInfo(
        target_kind=kind,
        target=target,
        erasure_event_id=result.event_id,
        erased_events=len(erased),
        erased_event_ids=sorted(erased),
        now=now,
    )
    info.projected, info.projection = _project(settings)
    hot_after = _hot_counts(settings)
    from tiermem.evolver.export import scrub_exports
    from tiermem.reviewer.job import scrub_reports

    info.reports_regenerated, info.reports_removed = scrub_reports(settings, erased, {target})
    info.exports_regenerated, info.exports_removed = scrub_exports(settings, erased, {(kind, target)})
    pending = [f for f in affected if f not in set(files["rewritten"])]
    info.cold_files_pending = 0 if now else len(pending)
    if now:
        info.note = "content is gone from every view and every file under the data root"
    info.removed = {
        "hot_store_rows": {
            t: n - hot_after.get(t, 0) for t, n in hot_before.items() if n > hot_after.get(t, 0)
        },
        "log_files_rewritten": [_rel(settings, f) for f in files["rewritten"]],
        "log_files_pending_seal": [] if now else sorted(_rel(settings, f) for f in pending),
        "side_records_scrubbed": files["side_records"],
        "object_store": (
            {"deleted_rows": files["table_rows"], "files_removed": files["table_files"]}
            if now
            else {"pending_seal": True}
        )
        if settings.cold_url
        else {},
        "reports": {"regenerated": info.reports_regenerated, "removed": info.reports_removed},
        "exports": {"regenerated": info.exports_regenerated, "removed": info.exports_removed},
    }
    return info


def _rel(settings: Settings, path: str) -> str:
    try:
        return str(Path(path).relative_to(settings.data_dir))
    except ValueError:
        return path


def _rewrite_files(settings: Settings, log: EventLog, *, everything: bool) -> dict[str, Any]:
    """Tombstone the erased events in JSONL segments and scrub rejects and quarantine now (with
    `everything`, sealed Parquet too); returns what was rewritten."""
    from tiermem.log.erasure import apply_erasures

    report = apply_erasures(settings, log, parquet=everything)
    return {
        "rewritten": list(report.rewritten),
        "side_records": report.scrubbed_records,
        "table_rows": report.table_deleted_rows,
        "table_files": report.table_files_removed,
    }


def _hot_counts(settings: Settings) -> dict[str, int]:
    """Rows per hot-store table, after bringing the store up to date with the log."""
    from tiermem.runtime.projector import project
    from tiermem.runtime.store import open_store

    store = open_store(settings)
    try:
        project(settings, store)
        return store.counts()
    finally:
        store.close()


def _project(settings: Settings) -> tuple[bool, dict[str, Any] | None]:
    """Bring the hot store up to date so the erasure reaches it now."""
    from tiermem.runtime.projector import project

    return True, asdict(project(settings))
