"""The public API: `Memory` (one data root) and `AgentMemory` (one agent's memory in it).

    from tiermem import Memory

    with Memory.open("data") as mem:
        agent = mem.agent("support-bot", project_id="acme-billing")
        agent.record_turn("alice", "Is my refund done?", "Yes, approved on Friday.", model="claude-sonnet-5")
        print(agent.context(user="alice", query="refund").as_system_prompt())

Every `tiermem` command is a thin wrapper of one call here: the CLI parses its
arguments, calls `Memory`, and renders the result. This module is the one
place that knows which component function does each job, so the components'
signatures can change behind it without touching the CLI or user code.

It lives in the application layer because it drives every component, and the
base package (`tiermem`) may not import components; `tiermem/__init__.py`
re-exports it lazily, so `import tiermem.ids` stays cheap and no import cycle
arises. Component modules are imported inside the calls for the same reason:
`tiermem --help` does not load DuckDB, Arrow or the Anthropic SDK.

Freshness: the runtime reads the hot store, which the projector derives from
the log. By default (`runtime.catch_up = "background"`) a read never waits for
what other processes appended: a projector thread applies it behind the reads.
What this `Memory` wrote itself is read at once: an agent's own writes are
applied to the hot store as they are made, and after a call of this `Memory`
that writes the log (ingest, append, compress, evolve, proposal decisions,
fact edits, forget) the next read catches up first. `mem.refresh()` catches up
with everything now (a script that reads a store others wrote; tests). With
`catch_up = "inline"` (the one-shot CLI commands) the first read, and every read
after a write, catches up with the whole log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tiermem.app.results import (
    Context,
    ExportInfo,
    Fact,
    FactWrite,
    Recall,
    RecalledEpisode,
    RecalledTurn,
    Transition,
)
from tiermem.errors import ConfigError
from tiermem.settings import FsyncPolicy, Settings, resolve_settings

if TYPE_CHECKING:
    import pyarrow as pa

    from tiermem.app.forget import ForgetInfo
    from tiermem.compressor.job import CompressInfo
    from tiermem.eventlog import AppendResult
    from tiermem.evolver.job import EvolveInfo
    from tiermem.ingest.pipeline import IngestInfo
    from tiermem.log.seal import SealInfo
    from tiermem.log.sql import QueryResult
    from tiermem.reviewer.job import ReviewInfo
    from tiermem.runtime.background import BackgroundProjector
    from tiermem.runtime.memory import AgentMemory as RuntimeMemory
    from tiermem.runtime.memory import RecordedTurn
    from tiermem.runtime.projector import ProjectionInfo, RebuildInfo
    from tiermem.runtime.turnloop import TurnResult

__all__ = ["AgentMemory", "Facts", "Memory"]

# Settings sections that `Memory.open(**overrides)` accepts as a mapping of their fields.
SECTIONS = ("compressor", "runtime", "evolver", "scheduler")


def _settings_with(settings: Settings, sections: Mapping[str, Mapping[str, Any]]) -> Settings:
    changed: dict[str, Any] = {}
    for name, values in sections.items():
        current = getattr(settings, name)
        known = {f.name for f in dataclasses.fields(current)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{name}: unknown setting(s) {unknown}; known: {sorted(known)}")
        changed[name] = dataclasses.replace(current, **values)
    return dataclasses.replace(settings, **changed)


class Memory:
    """One data root: the log, the hot store, the batch jobs and the analyst views.

    Use as a context manager (or call `close()`): it closes the connections of
    every agent handle it opened.
    """

    def __init__(self, settings: Settings, *, label: str | None = None) -> None:
        self._settings = settings
        # Who holds a job lock while a batch call runs (shown to whoever is refused).
        self._label = label
        self._agents: list[AgentMemory] = []
        # True while a read must catch up first: inline, until the first catch-up (the store may
        # lag the log); in both modes, after this Memory wrote the log (it reads its own writes).
        self._behind = settings.runtime.catch_up == "inline"
        self._projector: BackgroundProjector | None = None
        if settings.runtime.catch_up not in ("inline", "background"):
            raise ConfigError(
                f"runtime.catch_up = {settings.runtime.catch_up!r}: expected inline or background"
            )
        if settings.runtime.catch_up == "background":
            from tiermem.runtime.background import BackgroundProjector

            self._projector = BackgroundProjector(settings)

    @classmethod
    def open(
        cls,
        data_dir: str | Path | None = None,
        *,
        config_file: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Memory:
        """Resolve settings once (TOML file, `TIERMEM_*` variables, then `overrides`) and open the root.

        `overrides` are `Settings` fields (`fsync="group"`, `anthropic_model="..."`; None
        means "not given"), or for a section a mapping of its fields
        (`runtime={"total_budget_tokens": 2000}`). `env` replaces `os.environ`:
        `env={}` ignores the caller's environment (no `ANTHROPIC_API_KEY`: offline).
        """
        known = {f.name for f in dataclasses.fields(Settings)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s) {unknown}; known: {sorted(known)}")
        sections = {k: overrides.pop(k) for k in SECTIONS if isinstance(overrides.get(k), Mapping)}
        settings = resolve_settings(data_dir=data_dir, config_file=config_file, env=env, **overrides)
        return cls(_settings_with(settings, sections))

    @property
    def settings(self) -> Settings:
        return self._settings

    @property
    def data_dir(self) -> Path:
        return self._settings.data_dir

    def close(self) -> None:
        for agent in list(self._agents):
            agent.close()
        if self._projector is not None:
            self._projector.stop()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Memory(data_dir={str(self.data_dir)!r}, agents_open={len(self._agents)})"

    # ------------------------------------------------------------ agents
    def agent(
        self,
        agent_id: str,
        agent_type: str | None = None,
        project_id: str | None = None,
        *,
        user: str | None = None,
        session_id: str | None = None,
        task_id: str | None = None,
        level: str | None = None,
        base_context: str | None = None,
    ) -> AgentMemory:
        """A handle on one agent's memory, bound to its scopes (type, project) and optionally a
        default participant (`user`) and session."""
        if self._behind:
            self.refresh()  # no poke: the handle's first read asks the projector thread
        handle = AgentMemory(
            self,
            dict(
                agent_id=agent_id,
                agent_type=agent_type,
                project_id=project_id,
                user=user,
                session_id=session_id,
                task_id=task_id,
                level=level,
                base_context=base_context,
            ),
        )
        self._agents.append(handle)
        return handle

    def refresh(self) -> ProjectionInfo:
        """Apply every log event not yet in the hot store (e.g. written by a scheduler)."""
        from tiermem.runtime.projector import project

        info = project(self._settings)
        self._behind = False
        return info

    @property
    def projector(self) -> BackgroundProjector | None:
        """The projector thread when `runtime.catch_up = "background"` (None: reads catch up inline).

        Started by the first read; `mem.projector.wait()` blocks until a round begun after the
        call has finished (a round is skipped while another process's projector holds the lock:
        `mem.refresh()` is the call that always catches up)."""
        return self._projector

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Around every read of an agent handle: catch up first only when this Memory must."""
        if self._behind:
            # This Memory wrote the log (or, inline, has not caught up yet): its reads see it.
            self.refresh()
        if self._projector is None:
            yield
            return
        with self._projector.reading():
            # Served from the hot store as it is; the thread applies what others wrote once
            # the read has returned (it would share the interpreter with the read otherwise).
            self._projector.poke()
            yield

    def _wrote_log(self) -> None:
        self._behind = True

    def _forget_handle(self, handle: AgentMemory) -> None:
        if handle in self._agents:
            self._agents.remove(handle)

    @contextmanager
    def _job(self, lock: str) -> Iterator[None]:
        """Hold the job's lock, so a call never overlaps the scheduler's run of the same job."""
        from tiermem.locks import job_lock

        with job_lock(self._settings, lock, what=self._label or f"Memory.{lock}"):
            yield

    # ------------------------------------------------------------ the log
    def ingest(
        self,
        source: str | Path | IO[bytes],
        *,
        fsync: FsyncPolicy | None = None,
        workers: int | None = None,
        progress: bool | None = False,
    ) -> IngestInfo:
        """Bulk-load a JSONL file of turns (a path, "-" for stdin, or a binary stream); idempotent."""
        from tiermem.ingest.pipeline import ingest_file

        info = ingest_file(
            self._settings,
            source,
            progress=progress,
            fsync=fsync,
            workers=workers,
        )
        self._wrote_log()
        return info

    def append(self, record: Mapping[str, Any]) -> AppendResult:
        """Validate and durably append one caller record (an `interaction` by default)."""
        from tiermem.ingest.pipeline import ingest_record

        result = ingest_record(self._settings, record)
        self._wrote_log()
        return result

    def seal(self, before: str | None = None) -> SealInfo:
        """Seal closed days (before today UTC, or `before`) to verified Parquet; apply erasures."""
        from tiermem.log.seal import seal

        with self._job("seal"):
            return seal(self._settings, before=before)

    def query(self, sql: str, *, timeout: float | None = None) -> QueryResult:
        """One read-only SQL statement over the analyst views: columns, Python rows, timing.

        Runs in the sandbox (one SELECT, the log's files only, a memory limit) and is
        interrupted after `timeout` seconds (default `sql.timeout_seconds`).
        """
        from tiermem.log.sql import run_query

        return run_query(self._settings, sql, timeout=timeout)

    def sql(self, sql: str, *, timeout: float | None = None) -> pa.Table:
        """One read-only SQL statement over the analyst views, as an Arrow table (`pl.from_arrow`)."""
        import pyarrow as pa

        result = self.query(sql, timeout=timeout)
        columns = list(zip(*result.rows, strict=True)) if result.rows else [()] * len(result.columns)
        return pa.table(
            {name: pa.array(list(col)) for name, col in zip(result.columns, columns, strict=True)}
        )

    # ------------------------------------------------------------ batch jobs
    def compress(
        self, agent: str | None = None, *, progress: bool | None = False, engine: str | None = None
    ) -> CompressInfo:
        """Derive importance-scored episodes, knowledge proposals and relationships for due agents.

        `engine`: "local" or "ray" (default: the `batch.engine` setting).
        """
        from tiermem.app.engines import open_engine
        from tiermem.compressor.job import run_compress

        with self._job("compress"), open_engine(self._settings, engine) as eng:
            info = run_compress(self._settings, agent=agent, progress=progress, engine=eng)
        self._wrote_log()
        return info

    def evolve(
        self, agent: str | None = None, *, progress: bool | None = False, engine: str | None = None
    ) -> EvolveInfo:
        """Decide pending knowledge proposals (dedup, merge, correct), then promote and archive."""
        from tiermem.app.engines import open_engine
        from tiermem.evolver.job import run_evolve

        with self._job("evolve"), open_engine(self._settings, engine) as eng:
            info = run_evolve(self._settings, agent=agent, progress=progress, engine=eng)
        self._wrote_log()
        return info

    def review(
        self, day: str | None = None, agent: str | None = None, *, engine: str | None = None
    ) -> ReviewInfo:
        """Quality reports per day and agent (Markdown, JSON, charts under reports/review)."""
        from tiermem.app.engines import open_engine
        from tiermem.reviewer.job import run_review

        with self._job("review"), open_engine(self._settings, engine) as eng:
            return run_review(self._settings, day=day, agent=agent, engine=eng)

    def rebuild(self) -> RebuildInfo:
        """Delete the hot store and derive it again from the log; open agents reconnect."""
        from tiermem.runtime.projector import rebuild

        for handle in self._agents:
            handle._disconnect()
        info = rebuild(self._settings)
        self._behind = False
        return info

    # ------------------------------------------------------------ the review queue
    def proposals(self, status: str = "pending", agent: str | None = None) -> list[dict[str, Any]]:
        """Knowledge proposals by status (pending: waiting for a person)."""
        from tiermem.evolver import queue

        return queue.list_proposals(self._settings, agent=agent, status=status)

    def proposal(self, proposal_id: str) -> dict[str, Any]:
        """One proposal with its source turns and what approving it would change."""
        from tiermem.evolver import queue

        return queue.show_proposal(self._settings, proposal_id)

    def approve(self, proposal_id: str, *, by: str = "user") -> dict[str, Any]:
        from tiermem.evolver import queue

        result = queue.approve(self._settings, proposal_id, by=by)
        self._wrote_log()
        return result

    def reject(self, proposal_id: str, *, by: str = "user", reason: str | None = None) -> dict[str, Any]:
        from tiermem.evolver import queue

        result = queue.reject(self._settings, proposal_id, by=by, reason=reason)
        self._wrote_log()
        return result

    # ------------------------------------------------------------ the user owns the data
    def export(
        self,
        *,
        agent: str | None = None,
        user: str | None = None,
        format: str = "json",
        out: str | Path | None = None,
        save: bool = False,
    ) -> ExportInfo:
        """Everything held about an agent or a user, with sources (JSON or Markdown).

        `save=True` keeps it under `<data>/exports/` (where `forget` scrubs it too).
        """
        from tiermem.evolver.export import export, saved_export_path

        path = Path(out) if out else None
        if save and path is None:
            kind, target = ("agent", agent) if agent else ("user", user)
            path = saved_export_path(self._settings, kind, target or "", format)
        data, text = export(self._settings, agent=agent, user=user, fmt=format, out=path)
        return ExportInfo(
            target_kind=str(data["target_kind"]),
            target=str(data["target"]),
            format=format,
            counts=dict(data["counts"]),
            data=data,
            text=text,
            out=str(path) if path else None,
        )

    def edit_fact(
        self, agent_id: str, fact_id: str, content: str, *, by: str = "user", reason: str | None = None
    ) -> dict[str, Any]:
        """An operator's edit of one fact by id, recorded with who, why, before and after."""
        from tiermem.evolver.revise import edit_fact

        out = edit_fact(self._settings, agent_id, fact_id, content, by=by, reason=reason)
        self._wrote_log()
        return out

    def remove_fact(
        self, agent_id: str, fact_id: str, *, by: str = "user", reason: str | None = None
    ) -> dict[str, Any]:
        """An operator's removal of one fact by id, recorded with who, why and what it said."""
        from tiermem.evolver.revise import remove_fact

        out = remove_fact(self._settings, agent_id, fact_id, by=by, reason=reason)
        self._wrote_log()
        return out

    def forget(
        self,
        *,
        agent: str | None = None,
        user: str | None = None,
        event: str | None = None,
        reason: str | None = None,
        now: bool = False,
    ) -> ForgetInfo:
        """Erase an agent, a user or one event: from every view now, from every file at the
        next seal (`now=True`: sealed Parquet is rewritten at once too)."""
        from tiermem.app.forget import forget

        info = forget(self._settings, agent=agent, user=user, event=event, reason=reason, now=now)
        self._wrote_log()
        return info


class Facts:
    """An agent's key-value facts, resolved through its scopes (most specific scope first)."""

    def __init__(self, agent: AgentMemory) -> None:
        self._agent = agent

    def get(self, key: str) -> Fact | None:
        """The fact a lookup of `key` returns for this agent (None when none is visible)."""
        with self._agent._read() as memory:
            row = memory.get_fact(key)
        return None if row is None else Fact.from_row(row)

    def __getitem__(self, key: str) -> str:
        fact = self.get(key)
        if fact is None:
            raise KeyError(key)
        return fact.content

    def set(self, key: str, value: str, scope: str | None = None, *, source: str = "user") -> FactWrite:
        """Store `key = value` in `scope` (agent, system, agent_type, project or override)."""
        fact_id = self._agent._runtime().store_fact(key, value, scope, source=source)
        return FactWrite(fact_id=fact_id, key=key, scope=scope or "agent", value=value)

    def list(self, limit: int = 100) -> list[Fact]:
        """Every active fact this agent sees (key-value and learned), most relevant first."""
        with self._agent._read() as memory:
            return [Fact.from_row(r) for r in memory.store.list_facts(memory.principal, limit=limit)]

    def remove(self, key: str, scope: str | None = None, *, reason: str | None = None) -> FactWrite:
        """Remove the key-value fact in `scope`, else the one a lookup of `key` returns."""
        fact_id = self._agent._runtime().remove_fact(key, scope, reason=reason)
        return FactWrite(fact_id=fact_id, key=key, scope=scope or "agent", removed=True)


class AgentMemory:
    """One agent's memory: record turns, build its context, recall, facts, tools, levels.

    Returned by `Memory.agent()`; a context manager. Writes go to the log first
    (durably) and are visible to this handle's next read at once.
    """

    def __init__(self, memory: Memory, binding: dict[str, Any]) -> None:
        self._memory = memory
        self._binding = binding
        self._rt: RuntimeMemory | None = None
        self.facts = Facts(self)
        self._runtime()  # open now: a bad agent id or level fails here, not at first use

    # ------------------------------------------------------------ plumbing
    def _runtime(self) -> RuntimeMemory:
        """The runtime's memory object for this agent (opened on first use, reopened after a rebuild)."""
        if self._rt is None:
            from tiermem.app.sessions import handle_session_end
            from tiermem.runtime.memory import open_memory

            binding = dict(self._binding)
            self._rt = open_memory(
                self._memory.settings,
                binding.pop("agent_id"),
                on_session_end=handle_session_end,
                **binding,
            )
        return self._rt

    @contextmanager
    def _read(self) -> Iterator[RuntimeMemory]:
        """The runtime memory for one read (see `Memory._reading`)."""
        with self._memory._reading():
            yield self._runtime()

    def _disconnect(self) -> None:
        if self._rt is not None:
            # keep the state a turn can change (level after a transition, the finished task)
            self._binding.update(level=self._rt.level, task_id=self._rt.task_id)
            self._rt.close()
            self._rt = None

    @property
    def agent_id(self) -> str:
        return str(self._binding["agent_id"])

    @property
    def agent_type(self) -> str | None:
        return self._binding.get("agent_type")

    @property
    def project_id(self) -> str | None:
        return self._binding.get("project_id")

    @property
    def runtime(self) -> RuntimeMemory:
        """The underlying `tiermem.runtime.memory.AgentMemory`, for the runtime's own functions."""
        return self._runtime()

    def close(self) -> None:
        self._disconnect()
        self._memory._forget_handle(self)

    def __enter__(self) -> AgentMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        scope = ", ".join(f"{k}={v!r}" for k, v in self._binding.items() if v)
        return f"AgentMemory({scope})"

    # ------------------------------------------------------------ the hot path
    def record_turn(self, user: str | None, message: str, response: str, **enrichment: Any) -> RecordedTurn:
        """One durable append of the enriched turn plus its working-memory row; nothing else.

        `enrichment`: interaction fields such as `model`, `usage`, `tools_used`,
        `latency_ms`, `selection_reason`, `approval_status`, `channel`,
        `memory_level`, `task_id`, `metadata`, `event_id` (an idempotency key).
        """
        from tiermem.runtime.memory import record_turn

        if user is not None:
            enrichment["user"] = user
        return record_turn(self._runtime(), message, response, **enrichment)

    def context(
        self,
        user: str | None = None,
        query: str | None = None,
        level: str | None = None,
        *,
        budget: int | None = None,
        record: bool = False,
    ) -> Context:
        """The prompt's sections for a turn, in order and within the token budgets.

        With `query` (the user's message), the per-turn retrieval is added as the
        `memory_context` section; `record=True` logs what it delivered.
        """
        from tiermem.runtime.context import assemble_context

        with self._read() as memory:
            ctx = assemble_context(memory, user=user, level=level, query=query, budget=budget, record=record)
        return Context.from_assembled(ctx)

    def recall(
        self,
        query: str,
        participant: str | None = None,
        *,
        user: str | None = None,
        limit: int = 3,
        reason: str = "Memory recall",
    ) -> Recall:
        """Search the agent's episodic memory; what was found is recorded as a `retrieval`.

        Read as `user` (default: the participant, else the handle's user): without
        one, only episodes tied to no user are found.
        """
        import orjson

        from tiermem.tokens import count_tokens

        with self._read() as memory:
            principal = memory.as_user(user or participant)
            found = memory.store.search_episodes(principal, query, participant, limit)
            episodes = tuple(RecalledEpisode.from_row(e) for e in found)
            # Turns recorded since the last compression: no episode answers for them yet.
            turns = tuple(
                RecalledTurn.from_row(t)
                for t in memory.store.search_turns(principal, query, participant, limit)
            )
            recall = Recall(query, participant, episodes, turns=turns)
            if not recall:
                return recall
            tokens = count_tokens(orjson.dumps(recall.to_json()).decode())
            event_id = memory.record_retrieval(
                "recall",
                query,
                [e.episode_id for e in episodes] + [t.event_id for t in turns],
                [float(e.score) for e in episodes] + [t.score for t in turns],
                tokens,
                reason=reason,
                participant=principal.user,
            )
            return dataclasses.replace(recall, tokens=tokens, retrieval_event_id=event_id)

    # ------------------------------------------------------------ identity (L0)
    @property
    def identity(self) -> str:
        with self._read() as memory:
            return memory.identity()

    def set_identity(self, content: str, *, source: str = "user") -> str:
        """Replace the L0 identity (at most `runtime.identity_max_chars`); returns the event id."""
        return self._runtime().set_identity(content, source=source)

    # ------------------------------------------------------------ tools
    def tools(self) -> list[dict[str, Any]]:
        """The memory tools in Anthropic tool-use format (pass as `tools=` to `messages.create`)."""
        from tiermem.runtime.tools import tool_specs

        return tool_specs()

    def call_tool(self, name: str, args: Mapping[str, Any] | None, user: str | None = None) -> dict[str, Any]:
        """Run one memory tool for this agent, as the model asked (`user`: the participant)."""
        from tiermem.runtime.tools import call_tool

        with self._read() as memory:
            if user is None:
                return call_tool(memory, name, args)
            default, memory.user = memory.user, user
            try:
                return call_tool(memory, name, args)
            finally:
                memory.user = default

    def chat(self, message: str, *, client: Any | None = None, model: str | None = None) -> TurnResult:
        """One Claude turn with the memory tools, recorded with its enrichment (`tiermem chat`)."""
        from tiermem.runtime.turnloop import run_turn

        with self._read() as memory:
            return run_turn(memory, message, client=client, model=model)

    # ------------------------------------------------------------ memory levels and sessions
    def finish_task(self, summary: str) -> Transition:
        """The task is done: its detail leaves the prompt, `summary` stays at the project level."""
        event_id = self._runtime().finish_task(summary)
        return Transition(event_id, "task", self._runtime().current_level())

    def finish_project(self, summary: str) -> Transition:
        """The project is done: its detail leaves the prompt, `summary` stays at the global level."""
        event_id = self._runtime().finish_project(summary)
        return Transition(event_id, "project", self._runtime().current_level())

    def end_session(self, *, reason: str | None = None) -> str:
        """Append `session_ended`, then gap-fill and compress (inline, or by a running scheduler)."""
        from tiermem.runtime.memory import end_session

        return end_session(self._runtime(), reason=reason)
