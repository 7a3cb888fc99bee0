"""Scoring the batches of a run, in order: each chunk (one agent, up to
`GROUP_BATCHES` batches) is scored, checked complete and turned into events.

A chunk may go through the Message Batches API as one job. Worker processes
were tried for the offline scorer and dropped: on 2 shared cores the pickling
and start-up cost more than they saved, and `forkserver`/`spawn` workers
re-import the caller's main module (a library user's script without a
`__main__` guard would break), while `fork` workers would inherit the job's
lock file descriptor. Parallel scoring is the engine's: with `--engine ray`
the chunks go out in tasks of about `batch.task_interactions` interactions
(`engine_batches`) to workers that were started once, and come back in order,
so the job commits exactly what the local engine would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tiermem.compressor.episodes import batch_events
from tiermem.compressor.notes import batch_notes
from tiermem.compressor.sanitize import check_complete
from tiermem.compressor.scoring import Interaction, Scorer, make_scorer

from tiermem.engine import Engine
from tiermem.settings import Settings


def conversation_order(todo: list[Interaction]) -> list[Interaction]:
    """An agent's turns to compress, one conversation after another, each in time order.

    An agent talks with many people at once, so in time order their sessions
    interleave and a batch cut from it holds one or two turns of each: no
    episode could be more than a turn. Ordered by (session, participant) first,
    a batch holds whole stretches of one conversation, which the scorer groups
    into episodes. The key depends on the turn alone, not on what else is
    pending, so the turns left after a committed prefix are cut exactly as the
    whole run would have cut them.
    """
    return sorted(todo, key=lambda it: (it.session_id, it.user, it.ts, it.event_id))


def conversation_batches(todo: list[Interaction], size: int) -> list[list[Interaction]]:
    """`todo` in conversation order, cut into batches of at most `size` that keep a
    conversation whole where they can: one that does not fit in the room left
    starts the next batch when the current one is at least half full; a longer
    one fills whole batches. The packing restarts at every batch boundary, so
    the batches after a committed prefix are the ones the whole run would cut.
    """
    streams: list[list[Interaction]] = []
    for it in conversation_order(todo):
        if streams and (streams[-1][0].session_id, streams[-1][0].user) == (it.session_id, it.user):
            streams[-1].append(it)
        else:
            streams.append([it])
    batches: list[list[Interaction]] = []
    current: list[Interaction] = []
    for stream in streams:
        if current and len(current) + len(stream) > size and 2 * len(current) >= size:
            batches.append(current)
            current = []
        for it in stream:
            current.append(it)
            if len(current) == size:
                batches.append(current)
                current = []
    if current:
        batches.append(current)
    return batches


@dataclass
class ScoredBatch:
    agent_id: str
    batch: list[Interaction]
    episodes: list[dict[str, Any]]
    facts: list[dict[str, Any]]
    notes: list[dict[str, Any]]
    requests: int = 0
    retries: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0


@dataclass(frozen=True)
class Chunk:
    agent_id: str
    threshold: int
    batches: list[list[Interaction]]
    notes: bool = True  # derive notes from the turns (CompressorSettings.derived_notes)


def score_chunk(scorer: Scorer, chunk: Chunk, use_bulk: bool) -> list[ScoredBatch]:
    """Score, sanitise-check and turn into events every batch of one agent's chunk."""
    bulk = getattr(scorer, "score_many", None)
    if use_bulk and bulk is not None:
        # Message Batches API: the chunk goes out as one job (cheaper, not faster).
        ready = bulk(chunk.agent_id, chunk.batches)
    else:
        ready = [None] * len(chunk.batches)
    out = []
    for batch, pre in zip(chunk.batches, ready, strict=True):
        result = pre or scorer.score_batch(chunk.agent_id, batch)
        check_complete(result, batch)
        episodes, facts = batch_events(chunk.agent_id, batch, result, threshold=chunk.threshold)
        out.append(
            ScoredBatch(
                chunk.agent_id,
                batch,
                episodes,
                facts,
                batch_notes(chunk.agent_id, batch) if chunk.notes else [],
                result.requests,
                result.retries,
                result.input_tokens,
                result.output_tokens,
                result.cache_read_tokens,
            )
        )
    return out


def scored_batches(scorer: Scorer, chunks: list[Chunk], *, use_bulk: bool) -> Iterator[ScoredBatch]:
    """Every batch of `chunks`, scored, in order."""
    for chunk in chunks:
        yield from score_chunk(scorer, chunk, use_bulk)


def score_chunks(
    settings: Settings, scorer: Scorer | None, use_bulk: bool, chunks: list[Chunk]
) -> list[ScoredBatch]:
    """One engine task: score `chunks` with `scorer`, or with the settings' own scorer built here."""
    scorer = scorer or make_scorer(settings)
    return [scored for chunk in chunks for scored in score_chunk(scorer, chunk, use_bulk)]


def task_groups(chunks: list[Chunk], size: int) -> Iterator[list[Chunk]]:
    """Consecutive chunks of about `size` interactions each: one task each, in order."""
    group: list[Chunk] = []
    count = 0
    for chunk in chunks:
        group.append(chunk)
        count += sum(len(b) for b in chunk.batches)
        if count >= size:
            yield group
            group, count = [], 0
    if group:
        yield group


def engine_batches(
    engine: Engine,
    settings: Settings,
    scorer: Scorer | None,
    chunks: list[Chunk],
    *,
    use_bulk: bool,
    task_interactions: int,
) -> Iterator[ScoredBatch]:
    """Every batch of `chunks`, scored by `engine`'s workers, in the chunks' order."""
    for scored in engine.map(
        score_chunks, task_groups(chunks, task_interactions), settings, scorer, use_bulk
    ):
        yield from scored
