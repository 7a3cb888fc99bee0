"""The Claude turn loop, end to end with the real anthropic SDK over httpx2.MockTransport."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest
from helpers_runtime import append, episode
from tiermem.runtime.memory import end_session, open_memory
from tiermem.runtime.projector import project
from tiermem.runtime.turnloop import run_turn

from tiermem.errors import ConfigError
from tiermem.eventlog import EventLog
from tiermem.settings import Settings


def _message(content: list[dict[str, Any]], stop: str, n: int) -> dict[str, Any]:
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": "claude-test-1",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 100 + n, "output_tokens": 20, "cache_read_input_tokens": 80},
    }


def test_turn_with_a_recall_memory_round_trip(settings: Settings) -> None:
    append(
        settings,
        episode(
            "npc",
            "The night at the Nexus",
            "Mira could not sleep and I promised to stay",
            participants=["mira"],
            key_quotes=[{"text": "I don't go anywhere. I'll be here.", "event_id": "x1"}],
            emotional_context="trust solidified",
        ),
    )
    project(settings)
    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        requests.append(body)
        if len(requests) == 1:
            return httpx2.Response(
                200,
                json=_message(
                    [
                        {"type": "text", "text": "Let me think back."},
                        {
                            "type": "tool_use",
                            "id": "tu_1",
                            "name": "recall_memory",
                            "input": {"query": "night Nexus", "participant": "mira"},
                        },
                    ],
                    "tool_use",
                    1,
                ),
            )
        return httpx2.Response(
            200, json=_message([{"type": "text", "text": "I remember that night, Mira."}], "end_turn", 2)
        )

    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )
    with open_memory(settings, "npc", user="mira", session_id="s1") as m:
        m.set_identity("I am Kael, a guarded analyst of the Nexus.")
        result = run_turn(m, "Do you remember the night at the Nexus?", client=client, model="claude-test-1")
        assert result.text == "I remember that night, Mira."
        assert result.tools_used == ["recall_memory"]
        assert result.usage == {
            "input_tokens": 203,
            "output_tokens": 40,
            "cache_read_tokens": 160,
            "tool_calls": 1,
        }
        # First request: memory tools offered, system prompt from the context, retrieval in the user message.
        first = requests[0]
        assert {t["name"] for t in first["tools"]} >= {"recall_memory", "memory_fact_store"}
        assert "I am Kael" in first["system"][0]["text"] and first["system"][0]["cache_control"]
        assert first["messages"][0]["content"].startswith("<memory-context>")
        # Second request carries the tool result with the episode's quote.
        second = requests[1]
        tool_result = second["messages"][-1]["content"][0]
        assert tool_result["type"] == "tool_result" and tool_result["tool_use_id"] == "tu_1"
        assert "I'll be here." in tool_result["content"]
        assert second["messages"][1]["content"][1]["type"] == "tool_use"
        end_session(m)
    with EventLog(settings) as log:
        turns = [e for _, _, e in log.read("interactions")]
        tools = [e["tool"] for _, _, e in log.read("retrievals")]
        sessions = [e for _, _, e in log.read("sessions")]
    assert len(turns) == 1
    turn = turns[0]
    assert turn["model"] == "claude-test-1" and turn["tools_used"] == ["recall_memory"]
    assert turn["usage"]["cache_read_tokens"] == 160 and turn["latency_ms"] >= 0
    assert turn["user"] == "mira" and turn["session_id"] == "s1"
    assert turn["response_length"] == len("I remember that night, Mira.")
    assert "recall_memory" in tools and "context" in tools
    assert sessions[0]["session_id"] == "s1"


def test_tool_errors_go_back_to_the_model(settings: Settings) -> None:
    calls = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        calls.append(json.loads(request.content))
        if len(calls) == 1:
            return httpx2.Response(
                200,
                json=_message(
                    [{"type": "tool_use", "id": "t", "name": "memory_fact_store", "input": {"key": "k"}}],
                    "tool_use",
                    1,
                ),
            )
        return httpx2.Response(200, json=_message([{"type": "text", "text": "sorry"}], "end_turn", 2))

    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )
    with open_memory(settings, "a") as m:
        result = run_turn(m, "store something", client=client)
    assert result.tool_results[0]["is_error"] is True
    assert calls[1]["messages"][-1]["content"][0]["is_error"] is True


def test_without_a_key_the_turn_loop_says_what_is_missing(settings: Settings) -> None:
    with open_memory(settings, "a") as m, pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        run_turn(m, "hi")


def test_session_end_hook_is_called(settings: Settings) -> None:
    seen = []
    with open_memory(settings, "a", session_id="s9") as m:
        end_session(m, on_session_end=lambda s, agent, sid: seen.append((agent, sid)))
    assert seen == [("a", "s9")]
