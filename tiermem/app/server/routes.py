"""The `/v1` HTTP API: each route authorises, then makes one `Memory` call on the memory thread.

The JSON of context and recall is exactly what `tiermem context --json` and
`tiermem recall --json` print; the batch results are the CLI's `--json` too.
Every route that reads or writes memory about people passes the caller's
`user` through to the facade, so the visibility model of the runtime applies
to HTTP reads as it does to Python and MCP.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from tiermem.app.server.keys import KeyStore, Principal, authorize
from tiermem.app.server.service import MemoryService
from tiermem.errors import NotFoundError, ValidationError

# Field limits (the body as a whole is limited by the server's --max-body-bytes).
ID_MAX = 200
TEXT_MAX = 100_000
SHORT_MAX = 2_000

AgentId = Annotated[str, Path(min_length=1, max_length=ID_MAX, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]*$")]
Ident = Annotated[str, Field(min_length=1, max_length=ID_MAX)]
Level = Literal["global", "project", "task"]
Scope = Literal["agent", "system", "agent_type", "project", "override"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TurnIn(Strict):
    user: Ident
    user_message: Annotated[str, Field(max_length=TEXT_MAX)]
    agent_response: Annotated[str, Field(max_length=TEXT_MAX)]
    session_id: Ident | None = None
    project_id: Ident | None = None
    task_id: Ident | None = None
    memory_level: Level | None = None
    event_id: Ident | None = Field(None, description="idempotency key: a repeated id is not appended twice")
    model: Ident | None = None
    usage: dict[str, int] | None = None
    tools_used: Annotated[list[Ident], Field(max_length=100)] | None = None
    latency_ms: Annotated[float, Field(ge=0)] | None = None
    selection_reason: Annotated[str, Field(max_length=SHORT_MAX)] | None = None
    approval_status: Ident | None = None
    channel: Ident | None = None
    metadata: dict[str, Any] | None = None
    # Media shared with the turn: checked in full (fields, limits) by the log's validation.
    attachments: Annotated[list[dict[str, Any]], Field(max_length=16)] | None = None


class TurnOut(BaseModel):
    event_id: str
    memory_level: str


class ToolCall(Strict):
    user: Ident | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)


class FactIn(Strict):
    value: Annotated[str, Field(max_length=TEXT_MAX)]
    scope: Scope | None = None


class IdentityIn(Strict):
    content: Annotated[str, Field(max_length=TEXT_MAX)]


class RejectIn(Strict):
    reason: Annotated[str, Field(max_length=SHORT_MAX)] | None = None


class EditIn(Strict):
    content: Annotated[str, Field(min_length=1, max_length=TEXT_MAX)]
    key: Ident | None = None


class SqlIn(Strict):
    query: Annotated[str, Field(min_length=1, max_length=TEXT_MAX)]


class ForgetIn(Strict):
    agent: Ident | None = None
    user: Ident | None = None
    event: Ident | None = None
    reason: Annotated[str, Field(max_length=SHORT_MAX)] | None = None


# The dependencies are coroutines: FastAPI runs a plain function in a worker thread, a hop per
# request that costs more than the work (a header, one indexed lookup of the key's hash).
async def bearer(request: Request) -> Principal | None:
    """The principal of the request's bearer key (None: no key or a dead one)."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    store: KeyStore = request.app.state.keys
    return store.verify(token.strip())


Caller = Annotated[Principal | None, Depends(bearer)]
# The agent's type and project, for facts in the agent_type and project scopes.
AgentType = Annotated[str | None, Query(max_length=ID_MAX, description="the agent's type (agent_type scope)")]
ProjectId = Annotated[str | None, Query(max_length=ID_MAX, description="the agent's project (project scope)")]


async def service(request: Request) -> MemoryService:
    svc: MemoryService = request.app.state.service
    return svc


Svc = Annotated[MemoryService, Depends(service)]


def _read(svc: MemoryService, agent_id: str, agent_type: str | None, project_id: str | None) -> Any:
    svc.refresh()
    return svc.agent(agent_id, agent_type, project_id)


def proposal_agent(svc: MemoryService, proposal_id: str) -> dict[str, Any]:
    svc.refresh()
    return svc.memory.proposal(proposal_id)


def edit_proposal(
    svc: MemoryService, agent_id: str, proposal_id: str, content: str, key: str | None, by: str
) -> dict[str, Any]:
    """Replace a pending proposal by a person's wording: reject it, store the edited text as a fact.

    The rejection keeps the proposal for the audit trail; the fact is written
    by the person (source `user`), under the proposal's key or topic.
    """
    shown = svc.memory.proposal(proposal_id)
    p = shown["proposal"]
    fact_key = key or p.get("key") or p.get("topic") or f"note-{proposal_id[-8:]}"
    # The edited words stay as private as the proposal: a proposal about a user becomes a fact
    # about that user, never an agent-level one every user would see.
    owners = sorted(set(p.get("owners") or ()) | ({p["participant"]} if p.get("participant") else set()))
    if len(owners) > 1:
        raise ValidationError(
            "proposal_id", f"it is about several users ({', '.join(owners)}): approve or reject it instead"
        )
    rejected = svc.memory.reject(proposal_id, by=by, reason="replaced by an edited version")
    if owners:
        runtime = svc.agent(agent_id).runtime
        fact_id = runtime.store_fact(fact_key, content, "agent", source="user", user=owners[0])
        written = {"fact_id": fact_id, "key": fact_key, "scope": "agent", "value": content, "user": owners[0]}
    else:
        written = svc.agent(agent_id).facts.set(fact_key, content, source="user").to_json()
    return {"proposal_id": proposal_id, "rejected": rejected, "fact": written}


router = APIRouter(prefix="/v1")


@router.post("/agents/{agent_id}/turns", status_code=201, response_model=TurnOut, tags=["turns"])
async def post_turn(agent_id: AgentId, turn: TurnIn, caller: Caller, svc: Svc) -> TurnOut:
    """Record one turn: returns after the durable append of the `interaction` event."""
    user = authorize(caller, agent_id=agent_id, user=turn.user)
    fields = turn.model_dump(exclude_none=True, exclude={"user", "user_message", "agent_response"})

    # Batched with the turns posted meanwhile: answered once this turn's write is durable.
    recorded = await svc.record_turn(agent_id, user, turn.user_message, turn.agent_response, fields)
    return TurnOut(event_id=recorded.event_id, memory_level=recorded.memory_level)


@router.get("/agents/{agent_id}/context", tags=["reads"])
async def get_context(
    agent_id: AgentId,
    caller: Caller,
    svc: Svc,
    user: Annotated[str | None, Query(max_length=ID_MAX)] = None,
    query: Annotated[str | None, Query(max_length=SHORT_MAX)] = None,
    level: Level | None = None,
    budget: Annotated[int | None, Query(ge=1, le=1_000_000)] = None,
    agent_type: Annotated[str | None, Query(max_length=ID_MAX)] = None,
    project_id: Annotated[str | None, Query(max_length=ID_MAX)] = None,
) -> dict[str, Any]:
    """The prompt context for a turn: the JSON of `tiermem context --json`."""
    user = authorize(caller, agent_id=agent_id, user=user)

    def build() -> dict[str, Any]:
        agent = _read(svc, agent_id, agent_type, project_id)
        result: dict[str, Any] = agent.context(user=user, query=query, level=level, budget=budget).to_json()
        return result

    return await svc.run(build)


@router.get("/agents/{agent_id}/recall", tags=["reads"])
async def get_recall(
    agent_id: AgentId,
    caller: Caller,
    svc: Svc,
    query: Annotated[str, Query(min_length=1, max_length=SHORT_MAX)],
    participant: Annotated[str | None, Query(max_length=ID_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=50)] = 3,
) -> dict[str, Any]:
    """Search the agent's episodes: the JSON of `tiermem recall --json`."""
    participant = authorize(caller, agent_id=agent_id, user=participant)

    def search() -> dict[str, Any]:
        agent = _read(svc, agent_id, None, None)
        result: dict[str, Any] = agent.recall(query, participant, limit=limit, reason="HTTP recall").to_json()
        return result

    return await svc.run(search)


@router.get("/agents/{agent_id}/tools", tags=["tools"])
async def list_tools(agent_id: AgentId, caller: Caller, svc: Svc) -> list[dict[str, Any]]:
    """The memory tools in Anthropic tool-use format."""
    authorize(caller, agent_id=agent_id)
    return await svc.run(lambda: svc.agent(agent_id).tools())


@router.post("/agents/{agent_id}/tools/{name}", tags=["tools"])
async def post_tool(
    agent_id: AgentId,
    name: Annotated[str, Path(max_length=ID_MAX)],
    call: ToolCall,
    caller: Caller,
    svc: Svc,
) -> dict[str, Any]:
    """Run one memory tool for this agent and user (tool arguments never include the agent id)."""
    user = authorize(caller, agent_id=agent_id, user=call.user)

    def run() -> dict[str, Any]:
        agent = _read(svc, agent_id, None, None)
        result: dict[str, Any] = agent.call_tool(name, call.arguments, user=user)
        return result

    return await svc.run(run)


# ---------------------------------------------------------------- facts


@router.get("/agents/{agent_id}/facts", tags=["facts"])
async def list_facts(
    agent_id: AgentId,
    caller: Caller,
    svc: Svc,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    agent_type: AgentType = None,
    project_id: ProjectId = None,
) -> dict[str, Any]:
    """Every active fact the agent sees (the JSON of `tiermem facts list --json`)."""
    authorize(caller, agent_id=agent_id)

    def run() -> dict[str, Any]:
        facts = _read(svc, agent_id, agent_type, project_id).facts.list(limit=limit)
        return {"facts": [f.to_json() for f in facts]}

    return await svc.run(run)


@router.get("/agents/{agent_id}/facts/{key}", tags=["facts"])
async def get_fact(
    agent_id: AgentId,
    key: Annotated[str, Path(max_length=ID_MAX)],
    caller: Caller,
    svc: Svc,
    agent_type: AgentType = None,
    project_id: ProjectId = None,
) -> dict[str, Any]:
    """The fact a lookup of `key` returns (the most specific scope wins)."""
    authorize(caller, agent_id=agent_id)

    def run() -> dict[str, Any]:
        fact = _read(svc, agent_id, agent_type, project_id).facts.get(key)
        if fact is None:
            raise NotFoundError(f"no fact {key!r} visible to agent {agent_id!r}")
        return {"fact_id": fact.fact_id, "key": fact.key, "value": fact.value, "scope": fact.scope}

    return await svc.run(run)


@router.put("/agents/{agent_id}/facts/{key}", tags=["facts"])
async def put_fact(
    agent_id: AgentId,
    key: Annotated[str, Path(max_length=ID_MAX)],
    body: FactIn,
    caller: Caller,
    svc: Svc,
    agent_type: AgentType = None,
    project_id: ProjectId = None,
) -> dict[str, Any]:
    """Store `key = value` in a scope (agent keys: agent or project scope only)."""
    authorize(caller, agent_id=agent_id, whole_agent=True, scope=body.scope or "agent")

    def run() -> dict[str, Any]:
        result: dict[str, Any] = (
            svc.agent(agent_id, agent_type, project_id).facts.set(key, body.value, body.scope).to_json()
        )
        return result

    return await svc.run(run)


@router.delete("/agents/{agent_id}/facts/{key}", tags=["facts"])
async def delete_fact(
    agent_id: AgentId,
    key: Annotated[str, Path(max_length=ID_MAX)],
    caller: Caller,
    svc: Svc,
    scope: Scope | None = None,
    agent_type: AgentType = None,
    project_id: ProjectId = None,
) -> dict[str, Any]:
    authorize(caller, agent_id=agent_id, whole_agent=True, scope=scope or "agent")

    def run() -> dict[str, Any]:
        agent = _read(svc, agent_id, agent_type, project_id)
        result: dict[str, Any] = agent.facts.remove(key, scope, reason="removed over HTTP").to_json()
        return result

    return await svc.run(run)


# ---------------------------------------------------------------- identity


@router.get("/agents/{agent_id}/identity", tags=["identity"])
async def get_identity(agent_id: AgentId, caller: Caller, svc: Svc) -> dict[str, Any]:
    authorize(caller, agent_id=agent_id)

    def run() -> dict[str, Any]:
        content = _read(svc, agent_id, None, None).identity
        limit = svc.settings.runtime.identity_max_chars
        return {"agent_id": agent_id, "content": content, "chars": len(content), "limit": limit}

    return await svc.run(run)


@router.put("/agents/{agent_id}/identity", tags=["identity"])
async def put_identity(agent_id: AgentId, body: IdentityIn, caller: Caller, svc: Svc) -> dict[str, Any]:
    authorize(caller, agent_id=agent_id, whole_agent=True)

    def run() -> dict[str, Any]:
        event_id = svc.agent(agent_id).set_identity(body.content)
        return {"agent_id": agent_id, "event_id": event_id, "chars": len(body.content)}

    return await svc.run(run)


# ---------------------------------------------------------------- the review queue


async def _own_proposal(svc: MemoryService, caller: Principal | None, agent_id: str, proposal_id: str) -> Any:
    """The proposal, after checking that it belongs to the agent in the path."""
    authorize(caller, agent_id=agent_id, whole_agent=True)
    shown = await svc.run(proposal_agent, svc, proposal_id)
    if shown["proposal"].get("agent_id") != agent_id:
        raise NotFoundError(f"no proposal {proposal_id!r} for agent {agent_id!r}")
    return shown


@router.get("/agents/{agent_id}/proposals", tags=["proposals"])
async def list_proposals(
    agent_id: AgentId,
    caller: Caller,
    svc: Svc,
    status: Annotated[str, Query(max_length=40)] = "pending",
) -> list[dict[str, Any]]:
    """Knowledge proposals by status (the JSON of `tiermem proposals list --json`)."""
    authorize(caller, agent_id=agent_id, whole_agent=True)
    return await svc.run(lambda: svc.memory.proposals(status=status, agent=agent_id))


@router.get("/agents/{agent_id}/proposals/{proposal_id}", tags=["proposals"])
async def show_proposal(
    agent_id: AgentId, proposal_id: Annotated[str, Path(max_length=ID_MAX)], caller: Caller, svc: Svc
) -> dict[str, Any]:
    """One proposal with its source turns and what approving it would change (with a diff)."""
    result: dict[str, Any] = await _own_proposal(svc, caller, agent_id, proposal_id)
    return result


@router.post("/agents/{agent_id}/proposals/{proposal_id}/approve", tags=["proposals"])
async def approve_proposal(
    agent_id: AgentId, proposal_id: Annotated[str, Path(max_length=ID_MAX)], caller: Caller, svc: Svc
) -> dict[str, Any]:
    await _own_proposal(svc, caller, agent_id, proposal_id)
    by = "operator" if caller and caller.is_operator else f"key:{caller.key_id if caller else ''}"
    return await svc.run(lambda: svc.memory.approve(proposal_id, by=by))


@router.post("/agents/{agent_id}/proposals/{proposal_id}/reject", tags=["proposals"])
async def reject_proposal(
    agent_id: AgentId,
    proposal_id: Annotated[str, Path(max_length=ID_MAX)],
    body: RejectIn,
    caller: Caller,
    svc: Svc,
) -> dict[str, Any]:
    await _own_proposal(svc, caller, agent_id, proposal_id)
    by = "operator" if caller and caller.is_operator else f"key:{caller.key_id if caller else ''}"
    return await svc.run(lambda: svc.memory.reject(proposal_id, by=by, reason=body.reason))


@router.post("/agents/{agent_id}/proposals/{proposal_id}/edit", tags=["proposals"])
async def edit(
    agent_id: AgentId,
    proposal_id: Annotated[str, Path(max_length=ID_MAX)],
    body: EditIn,
    caller: Caller,
    svc: Svc,
) -> dict[str, Any]:
    """Replace a pending proposal by edited wording: it is rejected and the text stored as a fact."""
    await _own_proposal(svc, caller, agent_id, proposal_id)
    by = "operator" if caller and caller.is_operator else f"key:{caller.key_id if caller else ''}"
    return await svc.run(edit_proposal, svc, agent_id, proposal_id, body.content, body.key, by)


# ---------------------------------------------------------------- export, SQL, forget


@router.get("/agents/{agent_id}/export", tags=["export"])
async def export_agent(
    agent_id: AgentId, caller: Caller, svc: Svc, format: Literal["json", "md"] = "json"
) -> Response:
    """Everything held about the agent, with sources (the output of `tiermem export --agent`)."""
    authorize(caller, agent_id=agent_id, whole_agent=True)
    info = await svc.run(lambda: svc.memory.export(agent=agent_id, format=format))
    return _export_response(info.text, format)


@router.get("/export", tags=["export"])
async def export_user(
    caller: Caller,
    svc: Svc,
    user: Annotated[str, Query(min_length=1, max_length=ID_MAX)],
    format: Literal["json", "md"] = "json",
) -> Response:
    """Everything held about a user across agents (operator only)."""
    authorize(caller, operator_only=True)
    info = await svc.run(lambda: svc.memory.export(user=user, format=format))
    return _export_response(info.text, format)


def _export_response(text: str, format: str) -> Response:
    media = "application/json" if format == "json" else "text/markdown; charset=utf-8"
    return Response(text, media_type=media)


@router.post("/sql", tags=["operator"])
async def post_sql(body: SqlIn, caller: Caller, svc: Svc) -> list[dict[str, Any]]:
    """One read-only SQL statement over the analyst views (the JSON of `tiermem sql --json`)."""
    authorize(caller, operator_only=True)
    import orjson

    def run() -> list[dict[str, Any]]:
        records = svc.memory.query(body.query).records()
        # the values the CLI prints: dates and decimals as strings
        rows: list[dict[str, Any]] = orjson.loads(orjson.dumps(records, default=str))
        return rows

    return await svc.run(run)


@router.post("/forget", tags=["operator"])
async def post_forget(body: ForgetIn, caller: Caller, svc: Svc) -> dict[str, Any]:
    """Erase an agent, a user or one event (the JSON of `tiermem forget --json`)."""
    authorize(caller, operator_only=True)

    def run() -> dict[str, Any]:
        info = svc.memory.forget(agent=body.agent, user=body.user, event=body.event, reason=body.reason)
        return dataclasses.asdict(info)

    return await svc.run(run)
