"""The compress job: checkpointed, killable, exactly-once.

Each run first takes in what was appended to the log since the job's
checkpoint (see `selection`: a position over log lines plus a per-agent set
of pending interactions, so late arrivals with old timestamps are picked up
and compressed history is never read back). For each due agent the
interactions to compress are cut into batches of `batch_size` from its oldest
pending one, so the cut is the same on every run. Batches are scored,
sanitised and turned into events; a group of `GROUP_BATCHES` batches (across
agents: many small agents share one commit) is committed in three steps:

1. the group's events and the ids they cover go to a *pending* file (atomic
   rename), so a model's answer, once received, is never asked for again;
2. the events are appended (deterministic ids: a repeat is dropped by the log);
3. the covered interactions leave `pending` (one SQLite transaction, which
   also marks their agents' relationships due) and the pending file goes.

Killed anywhere, the next run first replays a pending file, then continues:
same events, no duplicate, no gap. Relationships are recomputed at the end for
the agents marked due; unchanged ones have unchanged ids and are not appended
again. One compress runs at a time per data root (a lock file).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from tiermem.compressor.relationships import relationship_events
from tiermem.compressor.scoring import Scorer, make_scorer
from tiermem.compressor.selection import CompressorState, pending_counts, select_due
from tiermem.compressor.work import Chunk, conversation_batches, engine_batches, scored_batches

from tiermem.durable_files import write_atomic
from tiermem.engine import Engine
from tiermem.errors import AlreadyRunningError, TiermemError, ValidationError
from tiermem.eventlog import EventLog
from tiermem.events import MAX_TEXT, validate
from tiermem.ids import format_ts, parse_ts
from tiermem.output import Progress
from tiermem.settings import Settings

GROUP_BATCHES = 100  # batches per commit: one pending write, one append, one checkpoint
# A deterministic scorer's answer costs nothing to recompute, so its groups are
# larger (fewer fsyncs per interaction).
DETERMINISTIC_GROUP_FACTOR = 10


@dataclass
class CompressInfo:
    scorer: str = "offline"
    agents: int = 0  # agents compressed in this run
    agents_due: int = 0
    interactions_scored: int = 0
    batches: int = 0
    episodes: int = 0  # episode events appended (new)
    important: int = 0
    proposals: int = 0  # knowledge_proposed events appended (new)
    relationships: int = 0  # relationship_updated events appended (new)
    notes: int = 0  # derived_note events appended (new)
    duplicates: int = 0  # derived events computed again and dropped by the log
    replayed_pending: int = 0  # groups finished from a pending file left by a killed run
    requests: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    engine: str = "local"
    elapsed_s: float = 0.0
    interactions_per_s: float = 0.0
    watermarks: dict[str, dict[str, str]] = field(default_factory=dict)


@contextmanager
def _exclusive(settings: Settings) -> Iterator[None]:
    settings.locks_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(settings.locks_dir / "compress.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunningError("another `tiermem compress` is running on this data root") from None
        yield
    finally:
        os.close(fd)


def _pending_dir(settings: Settings) -> Path:
    return settings.checkpoints_dir / "compressor-pending"


def _pending_path(settings: Settings) -> Path:
    return _pending_dir(settings) / "group.json"


# Derived events are built by code with known types, so the log's full
# validation of each one is wasted work (it was a third of the job's CPU).
# Instead the first event of each type in a run is validated and must come back
# unchanged (the construction matches the schema), and every event gets the
# checks that depend on content: size and NUL characters, on its serialised form.
_NUL = b"\\u0000"


class _Prepared:
    """Derived events checked once per type against the schema, then appended as already validated."""

    def __init__(self) -> None:
        self.trusted: set[str] = set()  # types whose construction matched their stored form

    def check(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for ev in events:
            etype = ev["type"]
            if etype in self.trusted and None not in ev.values():
                line = orjson.dumps(ev)
                if _NUL not in line and len(line) <= MAX_TEXT:
                    out.append(ev)
                    continue
            try:
                stored = validate(ev)
            except ValidationError as exc:
                raise TiermemError(f"compressor produced an invalid event ({etype}): {exc}") from exc
            if stored == ev and next(iter(stored)) == "event_id":
                self.trusted.add(etype)
            out.append(stored)  # whatever was built, what is appended is the validated form
        return out


def _commit(
    settings: Settings,
    log: EventLog,
    state: CompressorState,
    events: list[dict[str, Any]],
    done: dict[str, list[str]],
    info: CompressInfo,
    prepared: _Prepared,
    *,
    keep_answers: bool,
) -> None:
    """Pending file (atomic) -> append -> drop the compressed ids from pending -> remove the file.

    Without `keep_answers` there is no pending file: a group killed before its
    ids left `pending` is recomputed, and the log drops the events already
    appended (the job keeps the file for every scorer; see `run_compress`).
    """
    path = _pending_path(settings)
    if keep_answers:
        write_atomic(path, orjson.dumps({"events": events, "done": done}), durable=settings.fsync != "none")
    _append(log, prepared.check(events), info)
    state.mark_compressed(done)
    if keep_answers:
        path.unlink(missing_ok=True)


def _append(log: EventLog, events: list[dict[str, Any]], info: CompressInfo) -> None:
    results = log.append_validated(events)
    for ev, r in zip(events, results, strict=True):
        if r.duplicate:
            info.duplicates += 1
            continue
        if ev["type"] == "episode":
            info.episodes += 1
            info.important += int(bool(ev.get("important")))
        elif ev["type"] == "knowledge_proposed":
            info.proposals += 1
        elif ev["type"] == "relationship_updated":
            info.relationships += 1
        elif ev["type"] == "derived_note":
            info.notes += 1


def _replay_pending(
    settings: Settings, log: EventLog, state: CompressorState, info: CompressInfo, prepared: _Prepared
) -> None:
    folder = _pending_dir(settings)
    if not folder.exists():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            saved = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            path.unlink()  # a torn pending file was never committed: the group is simply redone
            continue
        done = saved.get("done")
        if done is None:  # left by the first version: one agent, everything up to a watermark
            agent, mark = saved["agent_id"], saved["mark"]
            upto = (format_ts(parse_ts(mark["ts"])), mark["event_id"])
            refs = state.pending_refs(agent).get(agent, [])
            done = {agent: [r.event_id for r in refs if (r.ts, r.event_id) <= upto]}
        _append(log, prepared.check(saved["events"]), info)
        state.mark_compressed(done)
        path.unlink(missing_ok=True)
        info.replayed_pending += 1


def due_agents(settings: Settings, agent: str | None = None) -> dict[str, int]:
    """Agents over the threshold and how many interactions each would compress."""
    cfg = settings.compressor
    return {
        a: n - cfg.keep_recent
        for a, n in pending_counts(settings, agent).items()
        if n > cfg.min_unprocessed and n > cfg.keep_recent
    }


def run_compress(
    settings: Settings,
    agent: str | None = None,
    *,
    progress: bool | None = None,
    scorer: Scorer | None = None,
    client: Any = None,
    engine: Engine | None = None,
) -> CompressInfo:
    """Compress every due agent (or one); see the module docstring. Returns what was done.

    With an `engine` other than the local one the batches are scored by its
    workers (the given `scorer`, else each task's own from the settings);
    taking in, selection, commits and checkpoints stay here, unchanged.
    """
    started = time.monotonic()
    shipped = scorer  # what a remote worker gets: the caller's scorer, else None (built there)
    scorer = scorer or make_scorer(settings, client=client)
    info = CompressInfo(scorer=scorer.name, engine=engine.name if engine else "local")
    cfg = settings.compressor
    prepared = _Prepared()
    with _exclusive(settings), EventLog(settings) as log, CompressorState(settings) as state:
        # Taking in first: a pending file's interactions were taken in before it was
        # written, so the order does not matter for it, and a first-version file
        # needs the pending set to know what its watermark covers.
        state.take_in(log)
        _replay_pending(settings, log, state, info, prepared)
        selections = list(select_due(state, log, agent))
        info.agents_due = len(selections)
        events: list[dict[str, Any]] = []
        done: dict[str, list[str]] = {}
        in_group = 0
        deterministic = bool(getattr(scorer, "deterministic", False))
        group_size = GROUP_BATCHES * (DETERMINISTIC_GROUP_FACTOR if deterministic else 1)
        # The pending file is kept for every scorer: turns that arrive between a crash and
        # the re-run can join a conversation in the middle of the order and shift the cut,
        # so a group already appended is replayed from its file, never recomputed.
        keep = True
        chunks = []
        for sel in selections:
            threshold = cfg.threshold_for(sel.agent_id)
            batches = conversation_batches(sel.to_compress, cfg.batch_size)
            for g in range(0, len(batches), GROUP_BATCHES):
                chunks.append(
                    Chunk(sel.agent_id, threshold, batches[g : g + GROUP_BATCHES], cfg.derived_notes)
                )
        info.agents = len({c.agent_id for c in chunks})
        with Progress("compress", total=sum(len(s.to_compress) for s in selections), enabled=progress) as bar:
            if engine is None or engine.name == "local":
                stream = scored_batches(scorer, chunks, use_bulk=cfg.use_batches_api)
            else:
                stream = engine_batches(
                    engine,
                    settings,
                    shipped,
                    chunks,
                    use_bulk=cfg.use_batches_api,
                    task_interactions=settings.batch.task_interactions,
                )
            for scored in stream:
                batch = scored.batch
                events.extend(scored.episodes)
                events.extend(scored.facts)
                events.extend(scored.notes)
                done.setdefault(scored.agent_id, []).extend(it.event_id for it in batch)
                info.batches += 1
                info.interactions_scored += len(batch)
                info.requests += scored.requests
                info.retries += scored.retries
                info.input_tokens += scored.input_tokens
                info.output_tokens += scored.output_tokens
                info.cache_read_tokens += scored.cache_read_tokens
                bar.update(len(batch))
                in_group += 1
                last = max(batch, key=lambda it: (it.ts, it.event_id))
                mark = info.watermarks.get(scored.agent_id)
                if mark is None or (mark["ts"], mark["event_id"]) < (last.ts.isoformat(), last.event_id):
                    info.watermarks[scored.agent_id] = {"ts": last.ts.isoformat(), "event_id": last.event_id}
                # Groups span agents: many small agents share one pending write and one append.
                if in_group >= group_size:
                    _commit(settings, log, state, events, done, info, prepared, keep_answers=keep)
                    events, done, in_group = [], {}, 0
            if done:
                _commit(settings, log, state, events, done, info, prepared, keep_answers=keep)
        due_rel = state.relationships_due()
        if due_rel:
            _append(log, prepared.check(relationship_events(settings, due_rel)), info)
            state.relationships_done(due_rel)
    info.scorer = scorer.name  # a model scorer that fell back says so here
    info.elapsed_s = round(time.monotonic() - started, 4)
    info.interactions_per_s = round(info.interactions_scored / info.elapsed_s, 1) if info.elapsed_s else 0.0
    return info


def compress_due(
    settings: Settings, *, progress: bool | None = False, engine: Engine | None = None
) -> CompressInfo:
    """The scheduler's threshold check: compress only when some agent is due (cheap otherwise).

    When nothing is due, what was appended is still taken in (if no compress is
    running), so the next check reads only newer lines, not a growing backlog.
    """
    if not due_agents(settings):
        try:
            with _exclusive(settings), EventLog(settings) as log, CompressorState(settings) as state:
                state.take_in(log, keep_parsed=False)
        except AlreadyRunningError:
            pass  # the running compress takes it in
        return CompressInfo(scorer={"anthropic": "claude"}.get(settings.llm_provider, settings.llm_provider))
    return run_compress(settings, progress=progress, engine=engine)
