"""The server's one `Memory`, driven from one worker thread.

`Memory` and its agent handles hold SQLite connections and per-handle state
(the catch-up flag, an agent's level); rather than make each of them safe for
concurrent use, every call goes through a single-thread executor. The event
loop stays free for parsing, authentication and slow clients, while memory
work is serialised, as it would be for one process using the Python API. A
turn's durable append is the dominant cost, so one thread loses little.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sqlite3
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from tiermem.app.api import AgentMemory, Memory
from tiermem.settings import Settings

T = TypeVar("T")

# Open agent handles kept (each holds a hot-store connection); the least recently used closes first.
MAX_HANDLES = 64


class MemoryService:
    """Owns the `Memory` of the data root and one cached handle per (agent, type, project)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiermem-memory")
        self._memory: Memory | None = None
        self._agents: OrderedDict[tuple[str, str | None, str | None], AgentMemory] = OrderedDict()
        self._hot: sqlite3.Connection | None = None

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
        """Run `fn(*args, **kwargs)` on the memory thread and wait for it."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

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

    def close(self) -> None:
        self._executor.submit(self._close_on_thread).result()
        self._executor.shutdown(wait=True)
