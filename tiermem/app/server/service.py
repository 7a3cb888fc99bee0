"""The server's one `Memory`, driven from one worker thread, and the batching of turns.

`Memory` and its agent handles hold SQLite connections and per-handle state
(the catch-up flag, an agent's level); rather than make each of them safe for
concurrent use, every call goes through a single-thread executor. The event
loop stays free for parsing, authentication and slow clients, while memory
work is serialised, as it would be for one process using the Python API.

Turns are the exception to one call per request: a turn's cost is its durable
append, and one fsync can carry every turn that arrived meanwhile. So posted
turns (each already authorised by its own request) wait in a queue on the
event loop; whenever the memory thread is free, everything queued goes to it
as one batch, recorded by `record_turns` in one write and one fsync, and each
request is answered with its own turn's outcome once that write is durable.
The hot store is then updated on a thread of its own, with its own store, so
that its commits and WAL checkpoints stay off the turns' path; every other
memory call waits for the updates queued before it, so a read that follows
an answer sees the turn.
Under light load a batch is one turn and nothing waits for a timer; under
heavy load the batches grow by themselves, by as many turns as arrived while
the previous one was being written.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sqlite3
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from tiermem.app.api import AgentMemory, Memory
from tiermem.errors import ValidationError
from tiermem.runtime.applied import AppliedLines, StoreIdentity, open_identified_store
from tiermem.runtime.memory import RecordedTurn, TurnToRecord, record_turns
from tiermem.runtime.store import HotStore
from tiermem.settings import Settings

T = TypeVar("T")
log = logging.getLogger("tiermem.serve")

# Open agent handles kept (each holds a hot-store connection); the least recently used closes first.
MAX_HANDLES = 64
# Turns per batch: bounds one write's size and the wait of the batch behind it.
MAX_BATCH = 512


@dataclass(eq=False)
class PendingTurn:
    """A posted, authorised turn waiting for its batch; `done` gets its outcome."""

    agent_id: str
    user: str | None
    message: str
    response: str
    fields: dict[str, Any]
    done: asyncio.Future[RecordedTurn] = field(repr=False)


def _wait(update: Future[None] | None) -> None:
    if update is not None:
        update.result()  # `_update` raises nothing


def _settle(batch: list[PendingTurn], outcomes: list[RecordedTurn | ValidationError]) -> None:
    """On the event loop: each waiting request gets its own turn's outcome."""
    for turn, outcome in zip(batch, outcomes, strict=True):
        if turn.done.done():  # its client went away; the turn is recorded all the same
            continue
        if isinstance(outcome, ValidationError):
            turn.done.set_exception(outcome)
        else:
            turn.done.set_result(outcome)


class MemoryService:
    """Owns the `Memory` of the data root and one cached handle per (agent, type, project)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiermem-memory")
        self._memory: Memory | None = None
        self._agents: OrderedDict[tuple[str, str | None, str | None], AgentMemory] = OrderedDict()
        self._hot: sqlite3.Connection | None = None
        # The hot store's update of each batch runs on its own thread with its own store, off
        # the turns' path (its commits and WAL checkpoints stall for tens of milliseconds at
        # times); every other memory call waits for the updates queued before it.
        self._updater = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiermem-update")
        self._update_store: HotStore | None = None  # used on the update thread only
        self._update_identity: StoreIdentity | None = None  # the file it writes (None: unknown)
        self._reopen = 0 if settings.hot_url else 3  # times to reopen it while that is unknown
        self._updated: Future[None] | None = None  # the newest queued update (they run in order)
        self._level_barrier: Future[None] | None = None  # the newest one with agent-level turns
        # The turn queue lives on the event loop (no lock): filled by requests, emptied by one drain task.
        self._turns: list[PendingTurn] = []
        self._draining = False
        self._drain_task: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference
        self.turn_batches = 0  # batches written (with `turns_recorded`: the mean batch size)
        self.turns_recorded = 0

    # Everything below `_on_thread` runs on the worker thread only.
    def _mem(self) -> Memory:
        if self._memory is None:
            self._memory = Memory(self.settings, label="tiermem serve")
        return self._memory

    def agent(
        self, agent_id: str, agent_type: str | None = None, project_id: str | None = None
    ) -> AgentMemory:
        key = (agent_id, agent_type, project_id)
        handle = self._agents.get(key)
        if handle is None:
            handle = self._mem().agent(agent_id, agent_type=agent_type, project_id=project_id)
            self._agents[key] = handle
            while len(self._agents) > MAX_HANDLES:
                _, oldest = self._agents.popitem(last=False)
                oldest.close()
        else:
            self._agents.move_to_end(key)
        return handle

    def hot(self) -> sqlite3.Connection:
        """A read connection on the hot store, for views across agents (the panel's agent list)."""
        if self._hot is None:
            if self.settings.hot_url:
                # The panel's SQL is the dialect both backends share; the Postgres connection
                # offers the same execute/row surface.
                from tiermem.runtime.pg_store import PostgresHotStore

                self._hot = cast(sqlite3.Connection, PostgresHotStore.open(self.settings).conn)
            else:
                from tiermem.runtime.hotstore import open_hot_store

                self._hot = open_hot_store(self.settings)
        return self._hot

    @property
    def memory(self) -> Memory:
        return self._mem()

    def refresh(self) -> None:
        """Pick up events other processes appended (a scheduler, a CLI command), before a read.

        With `runtime.catch_up = "background"` the read does not wait: the
        projector thread is asked to catch up and the read goes on.
        """
        memory = self._mem()
        if memory.projector is not None:
            memory.projector.poke()
        else:
            memory.refresh()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run `fn(*args, **kwargs)` on the memory thread, once the hot store holds every turn
        answered so far, and wait for it."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(self._updated_then, fn, *args, **kwargs)
        )

    def _updated_then(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        _wait(self._updated)
        return fn(*args, **kwargs)

    async def warm(self) -> None:
        """Open now what the first batch of turns would open (the update thread's store and the
        modules it imports: most of a second), so that the first requests do not wait for it,
        and a server can keep it out of the collector's passes."""
        loop = asyncio.get_running_loop()
        # The hot store's file first (the projector thread may not have created it yet): the
        # update thread's store must know which file it opened for its marks to count.
        await loop.run_in_executor(self._executor, self.hot)
        await loop.run_in_executor(self._updater, self._update_store_open)

    def _update_store_open(self) -> HotStore:  # on the update thread
        if self._update_store is not None and self._update_identity is None and self._reopen > 0:
            # Which file it opened was not known (created or replaced meanwhile): without it,
            # no mark is noted and the projector applies every turn again. Ask again, a few times.
            self._reopen -= 1
            self._close_update_store()
        if self._update_store is None:
            self._update_store, self._update_identity = open_identified_store(self.settings)
        return self._update_store

    # ------------------------------------------------------------ the hot store's updates
    def _queue_update(self, events: list[dict[str, Any]], positions: list[tuple[str, int]]) -> None:
        """On the memory thread: apply a durable batch to the hot store, in order, on the update thread."""
        projector = self._mem().projector
        # Noted only while the thread runs to meet the marks (they are bounded all the same).
        applied = projector.applied if projector is not None and projector.running else None
        update = self._updater.submit(self._update, events, positions, applied)
        self._updated = update
        if any(ev.get("user") is None for ev in events):
            # Visible to the agent-level handles: the next batch's current level must see it.
            self._level_barrier = update

    def _update(
        self,
        events: list[dict[str, Any]],
        positions: list[tuple[str, int]],
        applied: AppliedLines | None,
    ) -> None:
        """On the update thread. A failure is logged, not raised: the turns are in the log and
        were answered; the next catch-up from the log applies them.

        Once the update committed, the projector thread is told where those turns are in
        the log (`applied`), so that it does not apply them again behind the server.
        """
        try:
            self._update_store_open().apply_now(events)
        except Exception as exc:
            log.error("turns recorded, but the hot store's update failed: %s", exc, exc_info=exc)
            return
        if applied is not None:
            applied.note(self._update_identity, positions, (str(ev["event_id"]) for ev in events))

    # ------------------------------------------------------------ turns, batched
    async def record_turn(
        self, agent_id: str, user: str | None, message: str, response: str, fields: dict[str, Any]
    ) -> RecordedTurn:
        """Record one turn with whatever else is queued; returns once it is durable (or raises its error)."""
        return await self.submit_turn(agent_id, user, message, response, fields)

    def submit_turn(
        self, agent_id: str, user: str | None, message: str, response: str, fields: dict[str, Any]
    ) -> asyncio.Future[RecordedTurn]:
        """On the event loop: queue one turn for the next batch; the future gets its outcome once
        it is durable (or its error)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[RecordedTurn] = loop.create_future()
        self._turns.append(PendingTurn(agent_id, user, message, response, fields, done))
        if not self._draining:
            self._draining = True
            self._drain_task = loop.create_task(self._drain_turns())
        return done

    async def _drain_turns(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._turns:
                batch = self._next_batch()
                self.turn_batches += 1
                self.turns_recorded += len(batch)

                def durable(
                    outcomes: list[RecordedTurn | ValidationError], batch: list[PendingTurn] = batch
                ) -> None:
                    loop.call_soon_threadsafe(_settle, batch, outcomes)

                try:
                    # Not `run`: a batch does not wait for the hot store's updates of the last ones.
                    await loop.run_in_executor(self._executor, self._record_batch, batch, durable)
                except Exception as exc:  # a storage error: no turn of this write is acknowledged
                    for turn in batch:
                        if not turn.done.done():
                            turn.done.set_exception(exc)
        finally:
            self._draining = False

    def _next_batch(self) -> list[PendingTurn]:
        """The oldest queued turns, at most MAX_BATCH of them and of at most MAX_HANDLES agents,
        so that no handle a batch uses is closed by the handle cache while the batch runs."""
        agents: set[str] = set()
        taken = 0
        for turn in self._turns[:MAX_BATCH]:
            if turn.agent_id not in agents and len(agents) == MAX_HANDLES:
                break
            agents.add(turn.agent_id)
            taken += 1
        batch, self._turns = self._turns[:taken], self._turns[taken:]
        return batch

    def _record_batch(
        self, batch: list[PendingTurn], on_durable: Callable[[list[RecordedTurn | ValidationError]], None]
    ) -> list[RecordedTurn | ValidationError]:
        """On the memory thread: one `record_turns` for the whole batch; each request is answered
        once the append is durable, and the hot store is updated on the update thread. A read
        that follows an answer still sees the turn: it waits for that update (`run`)."""
        if self._level_barrier is not None and any("memory_level" not in t.fields for t in batch):
            _wait(self._level_barrier)  # a turn without a level takes the newest visible one
        turns = []
        for turn in batch:
            fields = turn.fields if turn.user is None else {**turn.fields, "user": turn.user}
            turns.append(TurnToRecord(self.agent(turn.agent_id).runtime, turn.message, turn.response, fields))
        return record_turns(turns, on_durable, apply=self._queue_update)

    def _close_on_thread(self) -> None:
        for handle in self._agents.values():
            with contextlib.suppress(Exception):
                handle.close()
        self._agents.clear()
        if self._hot is not None:
            self._hot.close()
            self._hot = None
        if self._memory is not None:
            self._memory.close()
            self._memory = None

    def _close_update_store(self) -> None:
        if self._update_store is not None:
            self._update_store.close()
            self._update_store = None

    def close(self) -> None:
        self._executor.submit(self._close_on_thread).result()
        self._executor.shutdown(wait=True)
        # After the memory thread: no update is queued any more; those queued run first.
        self._updater.submit(self._close_update_store).result()
        self._updater.shutdown(wait=True)
