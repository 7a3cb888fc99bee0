"""The compress job: checkpointed, killable, exactly-once.

For each due agent (see `selection`), the interactions to compress are cut
into batches of `batch_size` starting at the watermark, so the cut is the same
on every run. Batches are scored, sanitised and turned into events; a group of
batches is then committed in three steps:

1. the group's events are written to a *pending* file (atomic rename), so a
   model's answer, once received, is never asked for again;
2. the events are appended (deterministic ids: a repeat is dropped by the log);
3. the agent's watermark moves past the group and the pending file goes.

Killed anywhere, the next run first replays a pending file, then continues
from the watermark: same events, no duplicate, no gap. Relationships are
recomputed at the end from all episodes and facts; unchanged ones have
unchanged ids and are not appended again. One compress runs at a time per
data root (a lock file).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from tiermem.compressor.episodes import batch_events
from tiermem.compressor.relationships import relationship_events
from tiermem.compressor.sanitize import check_complete
from tiermem.compressor.scoring import Scorer, make_scorer
from tiermem.compressor.selection import Watermark, pending_counts, save_watermark, select_due
from tiermem.errors import AlreadyRunningError, TiermemError
from tiermem.ids import parse_ts
from tiermem.log.store import EventLog, write_atomic
from tiermem.output import Progress
from tiermem.settings import Settings

GROUP_BATCHES = 100  # batches per commit: one pending write, one append, one checkpoint


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
    duplicates: int = 0  # derived events computed again and dropped by the log
    replayed_pending: int = 0  # groups finished from a pending file left by a killed run
    requests: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
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


def _pending_dir(settings: Settings) -> Any:
    return settings.checkpoints_dir / "compressor-pending"


def _pending_path(settings: Settings, agent_id: str) -> Any:
    safe = "".join(c if c.isalnum() or c in "-_." else f"%{ord(c):02x}" for c in agent_id)
    return _pending_dir(settings) / f"{safe}.json"


def _commit(
    settings: Settings,
    log: EventLog,
    agent_id: str,
    events: list[dict[str, Any]],
    mark: Watermark,
    info: CompressInfo,
) -> None:
    path = _pending_path(settings, agent_id)
    durable = settings.fsync != "none"
    write_atomic(
        path,
        orjson.dumps(
            {
                "agent_id": agent_id,
                "mark": {"ts": mark.ts.isoformat(), "event_id": mark.event_id},
                "events": events,
            }
        ),
        durable=durable,
    )
    _append(log, events, info)
    save_watermark(settings, agent_id, mark)
    path.unlink(missing_ok=True)


def _append(log: EventLog, events: list[dict[str, Any]], info: CompressInfo) -> None:
    result = log.append_many(events, source="compressor")
    if result.rejected:
        index, error = result.rejected[0]
        raise TiermemError(f"compressor produced an invalid event ({events[index].get('type')}): {error}")
    by_id = {ev["event_id"]: ev for ev in events}
    for r in result.results:
        if r.duplicate:
            info.duplicates += 1
            continue
        ev = by_id[r.event_id]
        if ev["type"] == "episode":
            info.episodes += 1
            info.important += int(bool(ev.get("important")))
        elif ev["type"] == "knowledge_proposed":
            info.proposals += 1
        elif ev["type"] == "relationship_updated":
            info.relationships += 1


def _replay_pending(settings: Settings, log: EventLog, info: CompressInfo) -> None:
    folder = _pending_dir(settings)
    if not folder.exists():
        return
    for path in sorted(folder.glob("*.json")):
        try:
            state = orjson.loads(path.read_bytes())
        except orjson.JSONDecodeError:
            path.unlink()  # a torn pending file was never committed: the group is simply redone
            continue
        _append(log, state["events"], info)
        mark = Watermark(parse_ts(state["mark"]["ts"]), state["mark"]["event_id"])
        save_watermark(settings, state["agent_id"], mark)
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
) -> CompressInfo:
    """Compress every due agent (or one); see the module docstring. Returns what was done."""
    started = time.monotonic()
    scorer = scorer or make_scorer(settings, client=client)
    info = CompressInfo(scorer=scorer.name)
    cfg = settings.compressor
    with _exclusive(settings), EventLog(settings) as log:
        _replay_pending(settings, log, info)
        due = due_agents(settings, agent)
        info.agents_due = len(due)
        with Progress("compress", total=sum(due.values()), enabled=progress) as bar:
            for sel in select_due(settings, agent):
                info.agents += 1
                threshold = cfg.threshold_for(sel.agent_id)
                todo = sel.to_compress
                batches = [todo[i : i + cfg.batch_size] for i in range(0, len(todo), cfg.batch_size)]
                for g in range(0, len(batches), GROUP_BATCHES):
                    group = batches[g : g + GROUP_BATCHES]
                    events: list[dict[str, Any]] = []
                    bulk = getattr(scorer, "score_many", None)
                    if cfg.use_batches_api and bulk is not None:
                        # Message Batches API: the group goes out as one job (cheaper, not faster).
                        results = bulk(sel.agent_id, group)
                    else:
                        results = [None] * len(group)
                    for batch, ready in zip(group, results, strict=True):
                        result = ready or scorer.score_batch(sel.agent_id, batch)
                        check_complete(result, batch)
                        episodes, facts = batch_events(sel.agent_id, batch, result, threshold=threshold)
                        events.extend(episodes)
                        events.extend(facts)
                        info.batches += 1
                        info.interactions_scored += len(batch)
                        info.requests += result.requests
                        info.retries += result.retries
                        info.input_tokens += result.input_tokens
                        info.output_tokens += result.output_tokens
                        info.cache_read_tokens += result.cache_read_tokens
                        bar.update(len(batch))
                    last = group[-1][-1]
                    mark = Watermark(last.ts, last.event_id)
                    _commit(settings, log, sel.agent_id, events, mark, info)
                    info.watermarks[sel.agent_id] = {"ts": last.ts.isoformat(), "event_id": last.event_id}
        _append(log, relationship_events(settings), info)
    info.elapsed_s = round(time.monotonic() - started, 4)
    info.interactions_per_s = round(info.interactions_scored / info.elapsed_s, 1) if info.elapsed_s else 0.0
    return info


def compress_due(settings: Settings, *, progress: bool | None = False) -> CompressInfo:
    """The scheduler's threshold check: compress only when some agent is due (cheap otherwise)."""
    if not due_agents(settings):
        return CompressInfo(scorer="claude" if settings.claude_available else "offline")
    return run_compress(settings, progress=progress)
