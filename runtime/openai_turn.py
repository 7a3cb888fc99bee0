"""One agent turn with memory over an OpenAI-compatible endpoint (`llm.provider = "openai"`).

The same turn as the Claude one: the assembled context is the system
message, the per-turn retrieval goes into the user message, the memory tools
are offered as function tools (their JSON schemas unchanged), every function
call is executed with `call_tool` and answered with a `tool` message until the
model stops calling, and the turn is recorded with its enrichment (model,
usage, tools used, latency). A server that cannot be reached costs one short
retry (`tiermem.llm.Reachability`) and then a one-line error: a chat has no
offline path to fall back to.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from tiermem.runtime.context import assemble_context
from tiermem.runtime.memory import AgentMemory
from tiermem.runtime.tools import tool_specs
from tiermem.runtime.turnloop import (
    DEFAULT_MAX_TOKENS,
    MAX_TOOL_ROUNDS,
    TurnResult,
    TurnTally,
    record_finished_turn,
)

from tiermem.errors import TerminalError, TransientError
from tiermem.llm import Reachability, model_name, openai_client


def function_tools() -> list[dict[str, Any]]:
    """The memory tools as OpenAI function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": spec["name"],
                "description": spec["description"],
                "parameters": spec["input_schema"],
            },
        }
        for spec in tool_specs()
    ]


def _create(client: Any, reach: Reachability, **kwargs: Any) -> Any:
    import openai

    try:
        return reach.call(lambda: client.chat.completions.create(**kwargs))
    except (openai.RateLimitError, openai.InternalServerError) as exc:
        raise TransientError(f"the model server is busy, worth retrying: {exc}") from exc
    except openai.APIStatusError as exc:
        raise TerminalError(f"the model server rejected the request ({exc.status_code}): {exc}") from exc


def _arguments(raw: str | None) -> dict[str, Any]:
    """A function call's arguments; a model that writes invalid JSON gets an error it can correct."""
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return {"__invalid__": raw}
    return value if isinstance(value, dict) else {"__invalid__": raw}


def run_turn_openai(
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
    """Run one agent turn against the OpenAI-compatible endpoint with the memory tools, then record it."""
    settings = memory.settings
    client = client or openai_client(settings)
    reach = Reachability(settings)
    model = model or model_name(settings)
    started = time.perf_counter()
    ctx = assemble_context(memory, query=user_message, budget=budget, record=True)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": ctx.system_prompt},
        {"role": "user", "content": ctx.user_message(user_message)},
    ]
    tally = TurnTally()
    completion: Any = None
    text = ""
    finish: str | None = None
    tools = function_tools()
    for _ in range(max_tool_rounds + 1):
        completion = _create(
            client, reach, model=model, max_tokens=max_tokens, messages=messages, tools=tools
        )
        u = completion.usage
        if u is not None:
            details = getattr(u, "prompt_tokens_details", None)
            tally.add_usage(u.prompt_tokens, u.completion_tokens, getattr(details, "cached_tokens", 0))
        choice = completion.choices[0]
        finish = choice.finish_reason
        message = choice.message
        text = message.content or ""
        calls = [c for c in message.tool_calls or [] if getattr(c, "type", "function") == "function"]
        if not calls:
            break
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in calls
                ],
            }
        )
        for call in calls:
            name = call.function.name
            args = _arguments(call.function.arguments)
            refused = f"the arguments of {name} are not a JSON object" if "__invalid__" in args else None
            output, _ = tally.run_tool(memory, name, args, refused=refused)
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": orjson.dumps(output).decode()}
            )
    return record_finished_turn(
        memory,
        ctx,
        user_message,
        text.strip(),
        str(getattr(completion, "model", None) or model),
        tally,
        started=started,
        selection_reason=selection_reason,
        stop_reason=finish,
        path="openai",
    )
