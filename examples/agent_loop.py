"""An agent loop with memory: Claude (the `anthropic` SDK) plus tiermem's context and memory tools.

    ANTHROPIC_API_KEY=... python examples/agent_loop.py "Remember that I always take seat 14A."
    python examples/agent_loop.py          # no key: a scripted stand-in for Claude, same SDK, same loop

Each turn: build the agent's context for this user and message (system prompt
plus the per-turn `<memory-context>` retrieval), offer the memory tools, run
every tool the model asks for with `agent.call_tool`, and finally record the
turn with its enrichment (model, token usage, tools used, latency). This is
the loop `AgentMemory.chat()` runs for you; it is spelled out here so you can
put memory into a loop of your own.

`run_turn(agent, user, message, client)` takes any `anthropic.Anthropic`
client, so tests (and you) can drive it over a mock HTTP transport.
Without ANTHROPIC_API_KEY the script plays a fixed script against a stand-in
Messages API (`scripted_client`): on each turn the stand-in asks for the tool
the script names (`memory_recall` for a message not in the script), then
answers with what the tool returned. The SDK, the HTTP requests and the
memory are real; only the model's choices are scripted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx2

from tiermem import AgentMemory, Memory
from tiermem.errors import TiermemError

MAX_TOOL_ROUNDS = 6

# The offline script: (user message, the tool the stand-in asks for, its arguments).
SCRIPT = [
    (
        "Please remember that I always take seat 14A.",
        "memory_fact_store",
        {"key": "preferred_seat", "value": "14A", "scope": "agent"},
    ),
    ("Which seat do I like?", "memory_fact_recall", {"key": "preferred_seat"}),
    ("What do you know about me so far?", "memory_recall", {"query": "seat"}),
]


def run_turn(agent: AgentMemory, user: str, message: str, client: Any, model: str) -> str:
    """One turn of the loop: context -> model <-> memory tools -> recorded turn; returns the reply."""
    started = time.perf_counter()
    ctx = agent.context(user=user, query=message, record=True)  # record: "which memories were used?"
    system = [{"type": "text", "text": ctx.as_system_prompt(), "cache_control": {"type": "ephemeral"}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": ctx.user_message(message)}]
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_tokens": 0, "tool_calls": 0}
    tools_used: list[str] = []
    for _ in range(MAX_TOOL_ROUNDS):
        response = client.messages.create(
            model=model, max_tokens=1024, system=system, tools=agent.tools(), messages=messages
        )
        usage["input_tokens"] += response.usage.input_tokens
        usage["output_tokens"] += response.usage.output_tokens
        usage["cache_read_tokens"] += response.usage.cache_read_input_tokens or 0
        calls = [b for b in response.content if b.type == "tool_use"]
        if response.stop_reason != "tool_use" or not calls:
            break
        messages.append({"role": "assistant", "content": [_as_param(b) for b in response.content]})
        results = []
        for call in calls:
            usage["tool_calls"] += 1
            tools_used += [call.name] if call.name not in tools_used else []
            try:
                output, is_error = agent.call_tool(call.name, call.input, user=user), False
            except TiermemError as exc:  # the model sees the error and can correct itself
                output, is_error = {"error": str(exc)}, True
            print(f"  [tool] {call.name}({json.dumps(call.input)}) -> {json.dumps(output)[:200]}")
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": call.id,
                    "content": json.dumps(output),
                    "is_error": is_error,
                }
            )
        messages.append({"role": "user", "content": results})
    reply = "\n".join(b.text for b in response.content if b.type == "text").strip()
    agent.record_turn(
        user,
        message,
        reply,
        model=response.model,
        usage=usage,
        tools_used=tools_used,
        latency_ms=round((time.perf_counter() - started) * 1000, 1),
        metadata={"memory_items": list(ctx.item_ids)},
    )
    return reply


def _as_param(block: Any) -> dict[str, Any]:
    """A response content block as a request content block (only the fields a request takes)."""
    data: dict[str, Any] = block.model_dump(exclude_none=True)
    return {k: v for k, v in data.items() if k in ("type", "text", "id", "name", "input")}


def _message(n: int, content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": f"msg_scripted_{n}",
        "type": "message",
        "role": "assistant",
        "model": "scripted-stand-in",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }


def scripted_client() -> anthropic.Anthropic:
    """A real SDK client whose HTTP transport plays SCRIPT instead of calling Claude."""
    calls = {"n": 0}

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        calls["n"] += 1
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and last and last[0].get("type") == "tool_result":
            said = f"(scripted) my memory tool answered: {last[0]['content']}"
            return httpx2.Response(
                200, json=_message(calls["n"], [{"type": "text", "text": said}], "end_turn")
            )
        # the user's words come after the <memory-context> block, when there is one
        question = last.rsplit("</memory-context>\n\n", 1)[-1]
        scripted = {text: (tool, args) for text, tool, args in SCRIPT}
        tool, args = scripted.get(question, ("memory_recall", {"query": question}))
        use = {"type": "tool_use", "id": f"toolu_{calls['n']}", "name": tool, "input": args}
        return httpx2.Response(200, json=_message(calls["n"], [use], "tool_use"))

    return anthropic.Anthropic(
        api_key="offline", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )


def main(argv: list[str] | None = None, client: Any | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "messages", nargs="*", help="the user's messages, one turn each (default: the script)"
    )
    parser.add_argument("--data-dir", help="tiermem data root (default: a fresh temporary one)")
    parser.add_argument("--agent", default="travel-bot")
    parser.add_argument("--user", default="alice")
    parser.add_argument("--model", help="Claude model (default: the settings' anthropic_model)")
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="tiermem-agent-loop-"))

    with Memory.open(data_dir) as mem:
        if client is None:
            key = mem.settings.anthropic_api_key or os.environ.get("ANTHROPIC_API_KEY")
            client = anthropic.Anthropic(api_key=key) if key else scripted_client()
            print("talking to Claude" if key else "no ANTHROPIC_API_KEY: a scripted stand-in plays the model")
        model = args.model or mem.settings.anthropic_model
        with mem.agent(args.agent, session_id=f"loop-{int(time.time())}") as agent:
            for message in args.messages or [s[0] for s in SCRIPT]:
                print(f"\n{args.user}> {message}")
                print(f"{args.agent}> {run_turn(agent, args.user, message, client, model)}")
            ctx = agent.context(user=args.user)
            recent = ctx.section("recent")
            print(
                f"\nnext prompt: {ctx.total_tokens} tokens; recent turns held: {len(recent.item_ids) if recent else 0}"
            )
        turns = mem.sql(
            "SELECT count(*) AS n, list(DISTINCT t) AS tools FROM interactions, unnest(tools_used) AS u(t)"
        )
        row = turns.to_pylist()[0]
        print(
            f"logged tool uses: {row['n']} ({', '.join(sorted(row['tools'] or []))}); data root: {data_dir}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
