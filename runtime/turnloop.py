"""One Claude agent turn with memory: assemble, call, run tools, record.

`run_turn` builds the system prompt from the assembled context (cached with
`cache_control`, so repeated turns read it from Anthropic's prompt cache),
injects the per-turn retrieval into the user message, offers the memory
tools, executes every `tool_use` with `call_tool` until the model ends its
turn, and then records the turn with the enrichment taken from the responses
(model, usage including cache-read tokens, tools used, latency), so no turn
is logged without its enrichment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from tiermem.runtime.context import AssembledContext, assemble_context
from tiermem.runtime.memory import AgentMemory, record_turn
from tiermem.runtime.tools import call_tool, tool_specs

from tiermem.errors import ConfigError, TerminalError, TiermemError, TransientError

DEFAULT_MAX_TOKENS = 1024
MAX_TOOL_ROUNDS = 8


@dataclass
class TurnResult:
    text: str
    model: str
    usage: dict[str, int]
    tools_used: list[str]
    latency_ms: float
    event_id: str
    stop_reason: str | None
    context: AssembledContext
    tool_results: list[dict[str, Any]] = field(default_factory=list)
    path: str = "claude"


@dataclass
class TurnTally:
    """What a turn's model calls and tool calls add up to, whichever provider answers."""

    usage: dict[str, int] = field(
        default_factory=lambda: {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_tokens": 0,
            "tool_calls": 0,
        }
    )
    tools_used: list[str] = field(default_factory=list)
    tool_results: list[dict[str, Any]] = field(default_factory=list)

    def add_usage(self, input_tokens: int | None, output_tokens: int | None, cache_read: int | None) -> None:
        self.usage["input_tokens"] += int(input_tokens or 0)
        self.usage["output_tokens"] += int(output_tokens or 0)
        self.usage["cache_read_tokens"] += int(cache_read or 0)

    def run_tool(
        self, memory: AgentMemory, name: str, args: dict[str, Any], *, refused: str | None = None
    ) -> tuple[Any, bool]:
        """Execute one tool call the model asked for; an error is the tool's output, so the
        model sees it and can correct itself. `refused`: why the call cannot run at all."""
        self.usage["tool_calls"] += 1
        if name not in self.tools_used:
            self.tools_used.append(name)
        try:
            if refused is not None:
                raise TerminalError(refused)
            output: Any = call_tool(memory, name, args)
            is_error = False
        except TiermemError as exc:
            output = {"error": str(exc)}
            is_error = True
        self.tool_results.append({"tool": name, "input": args, "output": output, "is_error": is_error})
        return output, is_error


def make_client(memory: AgentMemory) -> Any:
    """An `anthropic.Anthropic` client from settings, or a clear error when no key is set."""
    if not memory.settings.claude_available:
        raise ConfigError(
            "no model to talk to: set ANTHROPIC_API_KEY (or anthropic_api_key in tiermem.toml) for Claude, "
            "or llm.provider = 'openai' with llm.base_url and llm.model; every other command works offline"
        )
    from tiermem.llm import anthropic_client

    # A short connect timeout and `llm.max_retries` SDK retries: no network fails in seconds.
    return anthropic_client(memory.settings).with_options(max_retries=memory.settings.llm.max_retries)


def _create(client: Any, **kwargs: Any) -> Any:
    import anthropic

    try:
        return client.messages.create(**kwargs)
    except (anthropic.APIConnectionError, anthropic.RateLimitError, anthropic.InternalServerError) as exc:
        raise TransientError(f"Claude request failed, worth retrying: {exc}") from exc
    except anthropic.APIStatusError as exc:
        raise TerminalError(f"Claude rejected the request ({exc.status_code}): {exc}") from exc


def _block_dict(block: Any) -> dict[str, Any]:
    if hasattr(block, "model_dump"):
        data: dict[str, Any] = block.model_dump(exclude_none=True)
        return {k: v for k, v in data.items() if k in ("type", "text", "id", "name", "input")}
    return dict(block)


def run_turn(
    memory: AgentMemory,
    user_message: str,
    client: Any | None = None,
    *,
    model: str | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    max_tool_rounds: int = MAX_TOOL_ROUNDS,
    budget: int | None = None,
    selection_reason: str | None = None,
) -> TurnResult:
    """Run one agent turn against Claude (or the OpenAI-compatible endpoint) with the memory tools."""
    if memory.settings.llm.provider == "openai":
        from tiermem.runtime.openai_turn import run_turn_openai

        return run_turn_openai(
            memory,
            user_message,
            client,
            model=model,
            max_tokens=max_tokens,
            max_tool_rounds=max_tool_rounds,
            budget=budget,
            selection_reason=selection_reason,
        )
    client = client or make_client(memory)
    model = model or memory.settings.anthropic_model
    started = time.perf_counter()
    ctx = assemble_context(memory, query=user_message, budget=budget, record=True)
    system = [{"type": "text", "text": ctx.system_prompt, "cache_control": {"type": "ephemeral"}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": ctx.user_message(user_message)}]
    tally = TurnTally()
    texts: list[str] = []
    response: Any = None
    for _ in range(max_tool_rounds + 1):
        response = _create(
            client, model=model, max_tokens=max_tokens, system=system, tools=tool_specs(), messages=messages
        )
        u = response.usage
        tally.add_usage(u.input_tokens, u.output_tokens, getattr(u, "cache_read_input_tokens", 0))
        texts = [b.text for b in response.content if getattr(b, "type", None) == "text"]
        calls = [b for b in response.content if getattr(b, "type", None) == "tool_use"]
        if response.stop_reason != "tool_use" or not calls:
            break
        messages.append({"role": "assistant", "content": [_block_dict(b) for b in response.content]})
        results = []
        for call in calls:
            output, is_error = tally.run_tool(memory, call.name, dict(call.input or {}))
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": orjson.dumps(output).decode(),
                    "is_error": is_error,
                }
            )
        messages.append({"role": "user", "content": results})
    text = "\n".join(texts).strip()
    return record_finished_turn(
        memory,
        ctx,
        user_message,
        text,
        str(getattr(response, "model", None) or model),
        tally,
        started=started,
        selection_reason=selection_reason,
        stop_reason=getattr(response, "stop_reason", None),
    )


def record_finished_turn(
    memory: AgentMemory,
    ctx: AssembledContext,
    user_message: str,
    text: str,
    used_model: str,
    tally: TurnTally,
    *,
    started: float,
    selection_reason: str | None,
    stop_reason: str | None,
    path: str = "claude",
) -> TurnResult:
    """Log the finished turn with its enrichment (which memories it was given, its cost) and
    describe it: the last step of a turn whichever provider answered."""
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    mc = ctx.section("memory_context")
    recorded = record_turn(
        memory,
        user_message,
        text,
        model=used_model,
        usage=tally.usage,
        tools_used=tally.tools_used,
        latency_ms=latency_ms,
        selection_reason=selection_reason,
        approval_status="auto_approved",
        metadata={"memory_items": mc.item_ids if mc else [], "context_tokens": ctx.total_tokens},
    )
    return TurnResult(
        text=text,
        model=used_model,
        usage=tally.usage,
        tools_used=tally.tools_used,
        latency_ms=latency_ms,
        event_id=recorded.event_id,
        stop_reason=stop_reason,
        context=ctx,
        tool_results=tally.tool_results,
        path=path,
    )
