"""`AgentMemory`: one agent's view of the hot store, and every write it makes.

All writes go through the log as events (durable per `settings.fsync`) and
are then applied to the hot store directly with the projector's own,
idempotent handlers, so the agent reads its own writes at once; the projector
applying the same events again later changes nothing.

Reads and writes are made as the memory's `principal` (its agent, scopes and
the user it serves: `tiermem.runtime.visibility`). What the agent writes
while serving a user — key-value facts, ideas, knowledge — is written about
that user (the event's `participant`), so it stays theirs: visible only to
this agent serving them, and erased with them.

`record_turn` is the hot path after every turn: exactly one durable append
of the enriched `interaction` plus its working-memory row, nothing else.
`end_session` appends `session_ended` and then calls the memory's
`on_session_end` hook, which the application layer supplies (gap-fill and
compression, inline or left to a running scheduler); the runtime itself never
imports batch work, so the turn path never waits for it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tiermem.runtime.levels import check_level, transition_event
from tiermem.runtime.store import HotStore, Row, kv_fact_id, open_store
from tiermem.runtime.visibility import KV_ORDER, Principal

from tiermem.errors import EventIdConflictError, LimitExceededError, NotFoundError, ValidationError
from tiermem.eventlog import EventLog
from tiermem.events import CALLER, INTERNAL, SCOPES, validate
from tiermem.first_copy import first_copy, same_turn
from tiermem.ids import format_ts, new_event_id, parse_ts, utcnow
from tiermem.settings import Settings
from tiermem.tokens import count_tokens
from tiermem.topics import detect_topic

FACT_SCOPES = ("agent", *SCOPES)  # "agent" = private to the writing agent (no scope field)

SessionEndHook = Callable[[Settings, str, str], Any]


@dataclass
class AgentMemory:
    """An agent bound to its scopes, with the hot store (through its interface) and the log."""

    settings: Settings
    agent_id: str
    agent_type: str | None = None
    project_id: str | None = None
    task_id: str | None = None
    session_id: str | None = None
    user: str | None = None
    level: str | None = None  # None: the level of the agent's newest item
    base_context: str | None = None
    on_session_end: SessionEndHook | None = field(default=None, repr=False)
    store: HotStore = field(init=False, repr=False)
    _log: EventLog | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.agent_id or not self.agent_id.strip():
            raise ValidationError("agent_id", "empty")
        if self.level is not None:
            check_level(self.level)
        self.store = open_store(self.settings)

    # ------------------------------------------------------------ plumbing
    @property
    def log(self) -> EventLog:
        if self._log is None:
            self._log = EventLog(self.settings)
        return self._log

    @property
    def principal(self) -> Principal:
        """Who this memory reads and writes as: the agent, its scopes, the user it serves."""
        return Principal(self.agent_id, self.user or None, self.agent_type, self.project_id)

    def as_user(self, user: str | None) -> Principal:
        """The principal of a call made for `user` (None: the memory's own user)."""
        return self.principal.as_user(user) if user else self.principal

    @property
    def scope(self) -> Principal:
        return self.principal

    @property
    def conn(self) -> Any:
        """The SQLite backend's connection, for tests and tools that look inside it (not the runtime)."""
        return getattr(self.store, "conn", None)

    def current_level(self) -> str:
        return self.level or self.store.current_level(self.principal)

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        self.store.close()

    def __enter__(self) -> AgentMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def append(
        self, records: list[Mapping[str, Any]], *, apply: bool = True, writer: str = INTERNAL
    ) -> list[dict[str, Any]]:
        """Validate, durably append (one batch), then apply to the hot store; returns the events.

        `writer=CALLER` for what a caller hands in (a turn): only caller event types
        pass, within the configured limits.
        """
        events = []
        for record in records:
            try:
                events.append(validate(record, writer=writer, limits=self.settings.limits))
            except ValidationError as exc:
                self.log.reject(record, exc)
                raise
        self.log.append_validated(events)
        if apply:
            self.store.apply_now(events)
        return events

    # ------------------------------------------------------------ retrievals
    def record_retrieval(
        self,
        tool: str,
        query: str | None,
        item_ids: list[str],
        scores: list[float] | None = None,
        tokens: int = 0,
        reason: str | None = None,
        participant: str | None = None,
    ) -> str:
        """Append a `retrieval` event (what was delivered, why, its cost) and bump recall counts."""
        record: dict[str, Any] = {
            "type": "retrieval",
            "agent_id": self.agent_id,
            "tool": tool,
            "item_ids": list(item_ids),
            "scores": list(scores or []),
            "tokens": int(tokens),
        }
        # The retrieval is the user's data (their query, what they were shown): it is theirs.
        for name, value in (
            ("query", query),
            ("reason", reason),
            ("participant", participant or self.user),
            ("session_id", self.session_id),
        ):
            if value:
                record[name] = value
        return str(self.append([record])[0]["event_id"])

    # ------------------------------------------------------------ identity (L0)
    def identity(self) -> str:
        return self.store.identity(self.agent_id)

    def set_identity(self, content: str, source: str = "agent") -> str:
        limit = self.settings.runtime.identity_max_chars
        if len(content) > limit:
            raise LimitExceededError(
                f"identity (L0) is limited to {limit:,} characters; this one has {len(content):,}. "
                "Merge or remove entries before adding more (memory_write update/remove on L0)."
            )
        event = self.append(
            [{"type": "identity_set", "agent_id": self.agent_id, "content": content, "source": source}]
        )[0]
        return str(event["event_id"])

    # ------------------------------------------------------------ KV facts
    def _about(self, user: str | None, scope: str | None) -> str | None:
        """The user a write is about: `user`, else (in the agent's own scope) the memory's user.

        A write the caller puts in a shared scope on purpose (the Python API, the
        CLI: operators) is about no one; the tools never do that for an agent
        serving a user, they narrow the scope first.
        """
        if (scope or "agent") == "agent":
            return user or self.user or None
        if user:
            raise ValidationError(
                "scope", f"a fact about user {user!r} stays in the agent's own scope, not in {scope}"
            )
        return None

    def _scope_record(self, scope: str | None) -> dict[str, Any]:
        scope = scope or "agent"
        if scope not in FACT_SCOPES:
            raise ValidationError("scope", f"expected one of {', '.join(FACT_SCOPES)}, got {scope!r}")
        record: dict[str, Any] = {}
        if scope != "agent":
            record["scope"] = scope
        if scope in ("agent_type", "override"):
            if not self.agent_type:
                raise ValidationError("scope", f"scope {scope!r} needs the agent's agent_type")
            record["agent_type"] = self.agent_type
        if scope in ("project", "override"):
            if not self.project_id:
                raise ValidationError("scope", f"scope {scope!r} needs the agent's project_id")
            record["project_id"] = self.project_id
        return record

    def store_fact(
        self, key: str, value: str, scope: str | None = None, source: str = "agent", user: str | None = None
    ) -> str:
        """A key-value fact; about `user` (default: the memory's user) unless written without one."""
        if not key.strip():
            raise ValidationError("key", "empty")
        about = self._about(user, scope)
        record = {
            "type": "fact_set",
            "agent_id": self.agent_id,
            "key": key,
            "value": value,
            "source": source,
            **self._scope_record(scope),
        }
        if about:
            record["participant"] = about
        record["fact_id"] = kv_fact_id(
            self.agent_id, scope or "agent", record.get("agent_type"), record.get("project_id"), key, about
        )
        self.append([record])
        return str(record["fact_id"])

    def get_fact(self, key: str) -> Row | None:
        return self.store.kv_lookup(self.principal, key)

    def visible_fact(self, fact_id: str) -> Row | None:
        """One active fact by id, if this memory's principal may read it."""
        return self.store.visible_fact(self.principal, fact_id)

    def remove_fact(self, key: str, scope: str | None = None, reason: str | None = None) -> str:
        """Remove a KV fact: the one in `scope`, else the one a lookup would return."""
        if scope is None:
            row = self.get_fact(key)
            if row is None or row["kind"] != "kv":
                raise NotFoundError(f"no fact {key!r} visible to agent {self.agent_id!r}")
            fact_id, scope = str(row["fact_id"]), str(row["scope"])
            owner = str(row["agent_id"])
        else:
            extra = self._scope_record(scope)
            about = self.user if scope == "agent" else None
            fact_id = kv_fact_id(
                self.agent_id, scope, extra.get("agent_type"), extra.get("project_id"), key, about
            )
            owner = self.agent_id
            if self.store.visible_fact(self.principal, fact_id) is None:
                raise NotFoundError(f"no fact {key!r} in scope {scope!r} of agent {self.agent_id!r}")
        record: dict[str, Any] = {"type": "fact_removed", "agent_id": owner, "key": key, "fact_id": fact_id}
        if scope != "agent":
            record["scope"] = scope
        if reason:
            record["reason"] = reason
        self.append([record])
        return fact_id

    # ------------------------------------------------------------ knowledge (L1)
    def add_knowledge(
        self,
        content: str,
        *,
        category: str = "insight",
        topic: str | None = None,
        tags: list[str] | None = None,
        scope: str | None = None,
        participant: str | None = None,
        fact_id: str | None = None,
        decision: str = "created",
        previous_content: str | None = None,
        similarity: float | None = None,
        is_correction: bool = False,
        note: str | None = None,
        original: str | None = None,
    ) -> str:
        """An agent-written fact: `knowledge_proposed` + `knowledge_decided` (decided_by agent).

        Written about `participant`, else about the user the memory serves (what is
        learned in a user's session is theirs). Without a topic, the one its words
        suggest (`tiermem.topics`). `original`: the full text behind a summarised
        `content`, kept beside it.
        """
        if not content.strip():
            raise ValidationError("content", "empty")
        topic = topic or detect_topic(original or content)
        participant = self._about(participant, scope)
        scope_fields = self._scope_record(scope)
        proposal: dict[str, Any] = {
            "type": "knowledge_proposed",
            "event_id": new_event_id(),
            "agent_id": self.agent_id,
            "content": content,
            "category": category,
            "origin": "agent",
            "confidence": 1.0,
            "is_correction": is_correction,
            **scope_fields,
        }
        for name, value in (("topic", topic), ("participant", participant or None)):
            if value:
                proposal[name] = value
        if tags:
            proposal["evidence"] = [{"text": "tags: " + ", ".join(tags), "event_id": ""}]
        fact = fact_id or "fact:" + str(proposal["event_id"])
        decided: dict[str, Any] = {
            "type": "knowledge_decided",
            "agent_id": self.agent_id,
            "proposal_id": proposal["event_id"],
            "decision": decision,
            "fact_id": fact,
            "content": content,
            "status": "active",
            "category": category,
            "decided_by": "agent",
            **scope_fields,
        }
        optional: tuple[tuple[str, Any], ...] = (
            ("topic", topic),
            ("participant", participant),
            ("previous_content", previous_content),
            ("similarity", similarity),
            ("note", note),
            ("original", original),
        )
        for name, value in optional:
            if value is not None:
                decided[name] = value
        self.append([proposal, decided])
        return fact

    def decide_fact(self, fact_id: str, decision: str, status: str, note: str | None = None) -> None:
        """Change one visible fact's status (e.g. deactivate on removal), keeping its content for audit."""
        row = self.visible_fact(fact_id)
        if row is None:
            raise NotFoundError(f"no active fact {fact_id!r} visible to agent {self.agent_id!r}")
        record: dict[str, Any] = {
            "type": "knowledge_decided",
            "agent_id": row["agent_id"],
            "decision": decision,
            "fact_id": fact_id,
            "content": row["content"],
            "status": status,
            "decided_by": "agent",
        }
        if note:
            record["note"] = note
        self.append([record])

    # ------------------------------------------------------------ memory levels
    def finish(self, level: str, summary: str, source_event_ids: list[str] | None = None) -> str:
        """Finish the current task or project: a transition plus a summary item at the level above."""
        event = transition_event(
            self.agent_id,
            level,
            summary,
            project_id=self.project_id,
            task_id=self.task_id if level == "task" else None,
            session_id=self.session_id,
            source_event_ids=source_event_ids,
        )
        appended = self.append([event])[0]
        self.level = event["to_level"]
        if level == "task":
            self.task_id = None
        return str(appended["event_id"])

    def finish_task(self, summary: str) -> str:
        return self.finish("task", summary)

    def finish_project(self, summary: str) -> str:
        return self.finish("project", summary)


def open_memory(
    settings: Settings,
    agent_id: str,
    *,
    agent_type: str | None = None,
    project_id: str | None = None,
    task_id: str | None = None,
    session_id: str | None = None,
    user: str | None = None,
    level: str | None = None,
    base_context: str | None = None,
    on_session_end: SessionEndHook | None = None,
) -> AgentMemory:
    """Bind a memory to one agent and its scopes (call `project(settings)` first to catch up)."""
    return AgentMemory(
        settings,
        agent_id,
        agent_type=agent_type,
        project_id=project_id,
        task_id=task_id,
        session_id=session_id,
        user=user,
        level=level,
        base_context=base_context,
        on_session_end=on_session_end,
    )


@dataclass(frozen=True)
class RecordedTurn:
    event_id: str
    memory_level: str
    tokens: int  # estimated tokens of the turn's text


def record_turn(
    memory_or_settings: AgentMemory | Settings,
    user_message: str,
    agent_response: str,
    *,
    agent_id: str | None = None,
    **fields: Any,
) -> RecordedTurn:
    """Append one enriched `interaction` (one durable append) and update working memory.

    `fields` are interaction fields (`user`, `memory_level`, `model`, `usage`,
    `tools_used`, `latency_ms`, `selection_reason`, `approval_status`,
    `channel`, `metadata`, `event_id` as idempotency key, ...); the agent's
    scopes, session and level fill in what is not given.
    """
    own = isinstance(memory_or_settings, Settings)
    if isinstance(memory_or_settings, Settings):
        if not agent_id:
            raise ValidationError("agent_id", "missing (needed when record_turn is given settings)")
        memory = open_memory(memory_or_settings, agent_id)
    else:
        memory = memory_or_settings
    try:
        (outcome,) = record_turns([TurnToRecord(memory, user_message, agent_response, fields)])
        if isinstance(outcome, ValidationError):
            raise outcome
        return outcome
    finally:
        if own:
            memory.close()


@dataclass(frozen=True)
class TurnToRecord:
    """One turn of a `record_turns` batch: the agent's memory it belongs to and its fields."""

    memory: AgentMemory
    user_message: str
    agent_response: str
    fields: Mapping[str, Any]


def record_turns(
    turns: list[TurnToRecord],
    on_durable: Callable[[list[RecordedTurn | ValidationError]], None] | None = None,
    apply: Callable[[list[dict[str, Any]], list[tuple[str, int]]], None] | None = None,
) -> list[RecordedTurn | ValidationError]:
    """`record_turn` for many turns, of any agents of one data root, in one durable append.

    Each turn is built and validated on its own, against its own agent's memory:
    one that fails validation is quarantined and answered with its error, the
    others go on. The valid ones are written together, so they share one fsync
    (one per day touched), and reach the hot store in one transaction. A storage
    error concerns the whole write and is raised to the caller of the batch.

    `on_durable(outcomes)` is called once the append has returned (every valid
    turn is in the log, durably) and before the hot store is updated: a server
    can answer its clients then. An error of the hot-store update after that is
    still raised; the log holds the turns and the next catch-up applies them.
    `apply(events, positions)`, when given, updates the hot store instead (a server
    doing it on another thread); it must apply them to this data root's hot store.
    `positions` are the events' places in the log, (segment, 0-based line): once
    they are applied, the projector need not apply them again.

    A turn whose `event_id` the log already holds for a different turn (another
    agent's or user's, or other words) is not stored in the log but quarantined:
    its outcome is an `EventIdConflictError`. The same turn sent again is
    answered as recorded.
    """
    if not turns:
        return []
    first = turns[0].memory
    log_dir = (
        first.settings.log_dir
    )  # (a path built on each access: compared only when not the same settings)
    if any(t.memory.settings is not first.settings and t.memory.settings.log_dir != log_dir for t in turns):
        raise ValidationError("turns", "a batch of turns must belong to one data root")
    outcomes: list[RecordedTurn | ValidationError] = []
    events: list[dict[str, Any]] = []
    slots: list[int] = []  # each event's place in `outcomes`
    # A turn that names no level takes its memory's current one, read from the hot store, which
    # does not change before the batch is applied: one read per memory, not per turn.
    levels: dict[int, str] = {}
    # Validation would stamp each turn's time and id; stamped here, once for the batch (its
    # turns are written together), the record takes the compiled check instead of Python's.
    stamp = format_ts(utcnow())
    at = parse_ts(stamp)
    for turn in turns:
        memory = turn.memory
        record = _turn_record(memory, turn.user_message, turn.agent_response, turn.fields, levels)
        _stamp(record, stamp, at)
        try:
            # The turn and its enrichment come from the caller: the trust boundary applies.
            event = validate(record, writer=CALLER, limits=memory.settings.limits)
        except ValidationError as exc:
            memory.log.reject(record, exc)
            outcomes.append(exc)
            continue
        events.append(event)
        slots.append(len(outcomes))
        outcomes.append(
            RecordedTurn(
                event_id=str(event["event_id"]),
                memory_level=str(event["memory_level"]),
                tokens=count_tokens(turn.user_message) + count_tokens(turn.agent_response),
            )
        )
    positions: list[tuple[str, int]] = []
    if events:
        results = first.log.append_validated(events)
        # A duplicate (its idempotency key met again) is the log's first copy, which the
        # projector applies: applying this one could put a turn the log does not hold in the
        # hot store, in place of the first copy that another process has not applied yet.
        # And it is answered as stored only when it is that turn sent again.
        kept = []
        for ev, res, slot in zip(events, results, slots, strict=True):
            if not res.duplicate:
                kept.append(ev)
                positions.append((res.segment, res.line))
            elif not same_turn(first_copy(first.log, res.stream, res.event_id), ev):
                refused = EventIdConflictError()
                first.log.reject(ev, refused)  # kept with its reason, as every refused record is
                outcomes[slot] = refused
        events = kept
    if on_durable is not None:
        on_durable(outcomes)
    if events and apply is not None:
        apply(events, positions)
    elif events:
        # One hot store per data root: any of the batch's connections applies them all.
        first.store.apply_now(events)
    return outcomes


def _stamp(record: dict[str, Any], stamp: str, at: datetime) -> None:
    """The time and id validation would give a record without them (a given time keeps
    deciding its id's)."""
    if "ts" not in record:
        record["ts"] = stamp
        if "event_id" not in record:
            record["event_id"] = new_event_id(at)


def _turn_record(
    memory: AgentMemory,
    user_message: str,
    agent_response: str,
    fields: Mapping[str, Any],
    levels: dict[int, str],
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": "interaction",
        "agent_id": memory.agent_id,
        "user_message": user_message,
        "agent_response": agent_response,
    }
    defaults = {
        "agent_type": memory.agent_type,
        "project_id": memory.project_id,
        "task_id": memory.task_id,
        "session_id": memory.session_id,
        "user": memory.user,
    }
    record.update({k: v for k, v in defaults.items() if v})
    record.update({k: v for k, v in fields.items() if v is not None})
    if "memory_level" not in record:
        level = levels.get(id(memory))
        if level is None:
            level = levels[id(memory)] = memory.current_level()
        record["memory_level"] = level
    return record


def end_session(
    memory: AgentMemory,
    session_id: str | None = None,
    *,
    reason: str | None = None,
    on_session_end: SessionEndHook | None = None,
) -> str:
    """Append `session_ended`, then run the session-end hook (`on_session_end`, else the memory's)."""
    sid = session_id or memory.session_id
    if not sid:
        raise ValidationError("session_id", "missing: give one or open the memory with a session_id")
    record: dict[str, Any] = {"type": "session_ended", "agent_id": memory.agent_id, "session_id": sid}
    if memory.user:
        record["user"] = memory.user
    if reason:
        record["reason"] = reason
    event = memory.append([record])[0]
    hook = on_session_end or memory.on_session_end
    if hook is not None:
        hook(memory.settings, memory.agent_id, sid)
    return str(event["event_id"])


def visible_scopes(memory: AgentMemory) -> list[str]:
    """The scopes this agent reads, most specific first."""
    have = {"agent", "system"}
    if memory.agent_type:
        have.add("agent_type")
    if memory.project_id:
        have.add("project")
        if memory.agent_type:
            have.add("override")
    return [s for s in KV_ORDER if s in have]
