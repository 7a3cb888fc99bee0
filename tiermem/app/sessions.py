"""Session-end processing: gap-fill, and compression when the agent is over its limit.

Session end is a post-session hook (docs/operations.md). `tiermem.runtime.end_session` appends
a `session_ended` event (stream `sessions`) and calls `handle_session_end`,
which takes one of two paths:

- "scheduler": a scheduler holds this data root (tiermem.app.scheduler), so the
  event is left to its `sessions` job, which picks up every `session_ended`
  event since its checkpoint within `sessions_check_seconds`. The caller
  returns at once.
- "inline": no scheduler runs, so nobody else would ever do it: this process
  does the same work now, through the same checkpointed consumer, under the
  same `sessions` job lock. Sessions that ended earlier without a scheduler
  and were not processed yet are picked up too.

Processing one session = `tiermem.evolver.gapfill.process_session_end` (the
corrections and preferences the agent did not save, and a session summary),
then the compressor for that agent, which compresses only when the agent has
more unprocessed interactions than `compressor.min_unprocessed`. Both are
idempotent (derived events have deterministic ids), so a session processed
twice — a scheduler starting during an inline run, a kill before the
checkpoint moved — changes nothing the second time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tiermem.app.jobs import summarize
from tiermem.errors import AlreadyRunningError, TransientError
from tiermem.eventlog import Checkpoints, EventLog
from tiermem.locks import job_lock
from tiermem.settings import Settings

SESSIONS_CONSUMER = "sessions"
# How long an inline caller waits for another process that is processing sessions right now.
INLINE_LOCK_WAIT_SECONDS = 30.0

GapFill = Callable[[Settings, str, str], Any]
CompressAgent = Callable[[Settings, str], Any]


def _default_gap_fill(settings: Settings, agent_id: str, session_id: str) -> Any:
    from tiermem.evolver.gapfill import process_session_end  # local: batch code off the turn path

    return process_session_end(settings, agent_id, session_id)


def _default_compress_agent(settings: Settings, agent_id: str) -> Any:
    # run_compress selects only agents over their limit (by default more than 15),
    # so calling it for one agent is the threshold check for that agent.
    from tiermem.compressor.job import run_compress  # local: batch code off the turn path

    return run_compress(settings, agent=agent_id)


@dataclass
class SessionOutcome:
    """What processing one ended session did."""

    agent_id: str
    session_id: str
    gap_fill: Any = None
    compression: Any = None
    compression_skipped: str | None = None  # why compression did not run here
    error: str | None = None


@dataclass
class SessionsJobInfo:
    """The `sessions` job: every session_ended event since the checkpoint."""

    sessions: int = 0
    processed: list[SessionOutcome] = field(default_factory=list)
    errors: int = 0
    retry_later: str | None = None  # a transient failure stopped the run; the checkpoint stayed before it
    seconds: float = 0.0
    path: str = "offline"

    def done(self, agent_id: str, session_id: str) -> bool:
        return any(o.agent_id == agent_id and o.session_id == session_id for o in self.processed)


@dataclass
class SessionEndInfo:
    """What `handle_session_end` did, and which path it took ("scheduler" or "inline")."""

    agent_id: str
    session_id: str
    path: str
    outcome: SessionOutcome | None = None
    other_sessions: int = 0  # earlier unprocessed sessions handled by the same inline run
    seconds: float = 0.0
    note: str = ""


def process_session(
    settings: Settings,
    agent_id: str,
    session_id: str,
    *,
    gap_fill: GapFill | None = None,
    compress_agent: CompressAgent | None = None,
) -> SessionOutcome:
    """Gap-fill one session, then compress its agent if due. TransientError propagates (retry later)."""
    outcome = SessionOutcome(agent_id, session_id)
    try:
        outcome.gap_fill = summarize((gap_fill or _default_gap_fill)(settings, agent_id, session_id))
    except TransientError:
        raise
    except Exception as exc:  # one bad session must not block every later one
        outcome.error = f"gap-fill: {type(exc).__name__}: {exc}"
    try:
        with job_lock(settings, "compress", what=f"session end {agent_id}/{session_id}"):
            outcome.compression = summarize((compress_agent or _default_compress_agent)(settings, agent_id))
    except AlreadyRunningError:
        # The compress run holding the lock selects every due agent, this one included.
        outcome.compression_skipped = "a compress run is in progress elsewhere and covers this agent"
    except TransientError:
        raise
    except Exception as exc:
        outcome.error = (
            outcome.error + "; " if outcome.error else ""
        ) + f"compress: {type(exc).__name__}: {exc}"
    return outcome


def process_pending_sessions(
    settings: Settings,
    *,
    gap_fill: GapFill | None = None,
    compress_agent: CompressAgent | None = None,
) -> SessionsJobInfo:
    """Process every `session_ended` event after the `sessions` checkpoint (the scheduler's job).

    The checkpoint moves after each session, so a kill loses at most the
    session in progress, which the next run redoes (idempotently). A
    TransientError (Claude overloaded, a busy lock) stops the run before that
    session without moving past it.
    """
    start = time.monotonic()
    info = SessionsJobInfo(path={"anthropic": "claude"}.get(settings.llm_provider, settings.llm_provider))
    checkpoints = Checkpoints(settings)
    position: dict[str, int] = dict(checkpoints.load(SESSIONS_CONSUMER))
    with EventLog(settings) as log:
        for segment, line, event in log.read("sessions", since=position):
            if event.get("type") == "session_ended" and event.get("agent_id") and event.get("session_id"):
                info.sessions += 1
                try:
                    outcome = process_session(
                        settings,
                        str(event["agent_id"]),
                        str(event["session_id"]),
                        gap_fill=gap_fill,
                        compress_agent=compress_agent,
                    )
                except TransientError as exc:
                    info.retry_later = f"{type(exc).__name__}: {exc}"
                    break
                info.processed.append(outcome)
                info.errors += outcome.error is not None
            checkpoints.advance(SESSIONS_CONSUMER, position, segment, line)
            checkpoints.save(SESSIONS_CONSUMER, position)
    info.seconds = round(time.monotonic() - start, 3)
    return info


def handle_session_end(
    settings: Settings,
    agent_id: str,
    session_id: str,
    *,
    gap_fill: GapFill | None = None,
    compress_agent: CompressAgent | None = None,
) -> SessionEndInfo:
    """Post-session hook: leave the work to the scheduler if one runs, else do it inline now.

    Call after the `session_ended` event is in the log (`end_session` does both).
    """
    from tiermem.app.scheduler import scheduler_running  # local: the scheduler imports APScheduler

    start = time.monotonic()
    if scheduler_running(settings):
        return SessionEndInfo(
            agent_id,
            session_id,
            "scheduler",
            note="a scheduler holds this data root; its sessions job processes the event "
            f"within {settings.scheduler.sessions_check_seconds}s",
        )
    info = SessionEndInfo(agent_id, session_id, "inline")
    try:
        with job_lock(
            settings, "sessions", wait_seconds=INLINE_LOCK_WAIT_SECONDS, what=f"session end {agent_id}"
        ):
            job = process_pending_sessions(settings, gap_fill=gap_fill, compress_agent=compress_agent)
            mine = [o for o in job.processed if o.agent_id == agent_id and o.session_id == session_id]
            if mine:
                info.outcome = mine[-1]
            elif job.retry_later is None:
                # No event for it after the checkpoint (the caller did not append one, or another
                # process already handled it): process it directly; doing it twice changes nothing.
                info.outcome = process_session(
                    settings, agent_id, session_id, gap_fill=gap_fill, compress_agent=compress_agent
                )
            else:
                info.note = f"deferred: {job.retry_later}; the next sessions run retries it"
            info.other_sessions = len(job.processed) - len(mine)
    except AlreadyRunningError as exc:
        info.note = f"deferred: {exc}"
    info.seconds = round(time.monotonic() - start, 3)
    return info
