"""The demo's story, in process: sessions through the runtime, and today's turn on the Claude path.

The Claude path uses the real `anthropic` SDK over `httpx2.MockTransport`; the
batch jobs stay offline here (the settings carry no key), so only the final
turn talks to the mock.
"""

from __future__ import annotations

import io
import json
from typing import Any

import anthropic
import httpx2
from tiermem.runtime.projector import project

from tiermem.app.demo_story import STORY, StoryInfo, new_turn, play_sessions
from tiermem.eventlog import EventLog
from tiermem.settings import Settings


def test_story_sessions_then_a_claude_answer_today(settings: Settings) -> None:
    out = io.StringIO()

    def say(text: str) -> None:
        out.write(text + "\n")

    info = StoryInfo()
    play_sessions(settings, info, say)
    assert info.turns_recorded == sum(len(s.turns) for s in STORY)
    assert [s["session_end_path"] for s in info.sessions] == ["inline"] * len(STORY)
    with EventLog(settings) as log:
        turns = [ev for _, _, ev in log.read("interactions")]
    assert len(turns) == info.turns_recorded
    # Every turn went through the runtime with its enrichment.
    assert all(t.get("model") and t.get("usage", {}).get("input_tokens") for t in turns)
    project(settings)

    requests: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        requests.append(json.loads(request.content))
        return httpx2.Response(
            200,
            json={
                "id": f"msg_{len(requests)}",
                "type": "message",
                "role": "assistant",
                "model": "claude-test-1",
                "content": [{"type": "text", "text": "Yes: the $59 refund for ticket #4471 went through."}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 900, "output_tokens": 14},
            },
        )

    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )
    new_turn(settings, info, say, claude_client=client)
    assert len(info.replies) == 2 and all(r.get("text") for r in info.replies)
    assert "ticket #4471 went through" in out.getvalue()
    # The model got the assembled context and the memory tools.
    assert {t["name"] for t in requests[0]["tools"]} >= {"recall_memory", "memory_fact_recall"}
    assert "support-bot" in json.dumps(requests[0]["system"])
    # Today's contexts and recalls are in the summary.
    assert len(info.contexts) == 2 and len(info.recalls) == 2
