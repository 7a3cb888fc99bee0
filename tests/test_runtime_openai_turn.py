"""`chat` over an OpenAI-compatible endpoint: the real openai SDK over httpx2.MockTransport."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx2
import openai
import pytest
from helpers_runtime import append, episode
from tiermem.runtime.memory import open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.turnloop import run_turn

from tiermem.errors import TransientError
from tiermem.eventlog import EventLog
from tiermem.settings import LlmSettings, Settings

LOCAL = LlmSettings(provider="openai", base_url="http://vllm.test/v1", model="qwen3", retry_delay_seconds=0)


def _completion(message: dict[str, Any], finish: str, n: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "qwen3",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 100 + n, "completion_tokens": 20, "total_tokens": 120 + n},
    }


def _client(handler: Any) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="local",
        base_url="http://vllm.test/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def test_chat_turn_with_a_memory_function_call_round_trip(settings: Settings) -> None:
    settings = replace(settings, llm=LOCAL)
    append(
        settings,
        episode(
            "npc",
            "The night at the Nexus",
            "Mira could not sleep and I promised to stay",
            participants=["mira"],
            key_quotes=[{"text": "I don't go anywhere. I'll be here.", "event_id": "x1"}],
        ),
    )
    project(settings)
    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(json.loads(request.content))
        if len(requests) == 1:
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "recall_memory", "arguments": '{"query": "night Nexus"}'},
            }
            return httpx2.Response(
                200, json=_completion({"content": None, "tool_calls": [call]}, "tool_calls", 1)
            )
        return httpx2.Response(200, json=_completion({"content": "I remember that night, Mira."}, "stop", 2))

    with open_memory(settings, "npc", user="mira", session_id="s1") as m:
        m.set_identity("I am Kael, a guarded analyst of the Nexus.")
        result = run_turn(m, "Do you remember the night at the Nexus?", client=_client(handler))
    assert result.path == "openai" and result.text == "I remember that night, Mira."
    assert result.tools_used == ["recall_memory"] and result.model == "qwen3"
    assert result.usage == {"input_tokens": 203, "output_tokens": 40, "cache_read_tokens": 0, "tool_calls": 1}
    first, second = requests
    assert first["model"] == "qwen3"
    names = {t["function"]["name"] for t in first["tools"]}
    assert {"recall_memory", "memory_fact_store"} <= names
    assert first["messages"][0]["role"] == "system" and "I am Kael" in first["messages"][0]["content"]
    assert first["messages"][1]["content"].startswith("<memory-context>")
    assert second["messages"][2]["tool_calls"][0]["id"] == "call_1"
    tool_message = second["messages"][3]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "call_1"
    assert "I'll be here." in tool_message["content"]
    with EventLog(settings) as log:
        turns = [e for _, _, e in log.read("interactions")]
    assert len(turns) == 1 and turns[0]["model"] == "qwen3" and turns[0]["tools_used"] == ["recall_memory"]


def test_invalid_arguments_go_back_to_the_model_as_an_error(settings: Settings) -> None:
    settings = replace(settings, llm=LOCAL)
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        if len(bodies) == 1:
            call = {
                "id": "c",
                "type": "function",
                "function": {"name": "recall_memory", "arguments": "{oops"},
            }
            return httpx2.Response(
                200, json=_completion({"content": None, "tool_calls": [call]}, "tool_calls", 1)
            )
        return httpx2.Response(200, json=_completion({"content": "sorry"}, "stop", 2))

    with open_memory(settings, "a") as m:
        result = run_turn(m, "what do you remember?", client=_client(handler))
    assert result.tool_results[0]["is_error"] is True and result.text == "sorry"
    assert "error" in json.loads(bodies[1]["messages"][-1]["content"])


def test_an_unreachable_server_fails_the_chat_after_one_retry(settings: Settings) -> None:
    settings = replace(settings, llm=LOCAL)
    attempts: list[int] = []

    def down(request: httpx2.Request) -> httpx2.Response:
        attempts.append(1)
        raise httpx2.ConnectError("connection refused", request=request)

    with open_memory(settings, "a") as m, pytest.raises(TransientError, match="llm unreachable"):
        run_turn(m, "hi", client=_client(down))
    assert len(attempts) == 2
