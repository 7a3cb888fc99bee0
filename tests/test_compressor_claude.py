"""The Claude scorer through the real anthropic SDK over httpx2.MockTransport."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import orjson
import pytest
from helpers_compressor import log_lines, seed_interactions
from tiermem.compressor.claude_scorer import ClaudeScorer
from tiermem.compressor.job import run_compress
from tiermem.compressor.sanitize import repair_json, sanitize_batch
from tiermem.compressor.selection import pending_counts

from tiermem.errors import TransientError
from tiermem.eventlog import EventLog
from tiermem.settings import Settings
from tiermem.sqlviews import open_catalog

Handler = Callable[[httpx2.Request], httpx2.Response]


def good_input(body: dict[str, Any]) -> dict[str, Any]:
    """What a well-behaved model answers for the batch in the request (labels read from the prompt)."""
    prompt = body["messages"][0]["content"]
    labels = re.findall(r"^\[(t\d+)\]", prompt, re.M)
    first_text = re.search(r"^\[t1\].*\n  [^:]+: (.*)$", prompt, re.M)
    assert first_text is not None
    half = len(labels) // 2
    return {
        "interactions": [{"id": label, "importance": "8" if i == 0 else 3} for i, label in enumerate(labels)]
        + [{"id": "t99", "importance": 10}],  # an id that does not exist: dropped
        "episodes": [
            {
                "name": "The first part",
                "summary": "We talked.",
                "interaction_ids": labels[:half],
                "key_quotes": [{"id": "t1", "text": first_text.group(1)}, {"id": "t2", "text": "never said"}],
                "importance": 14,  # clamped to 10
            },
            {"name": "The rest", "summary": "More talk.", "interaction_ids": labels[half:], "importance": 2},
        ],
        "facts": [
            {
                "category": "user",
                "content": "Alice loves hiking.",
                "evidence_ids": ["t3"],
                "confidence": "0.9",
            },
            {"category": "user", "content": "Made up.", "evidence_ids": ["t42"]},  # no evidence: dropped
        ],
    }


def message(content: list[dict[str, Any]], status: int = 200) -> httpx2.Response:
    return httpx2.Response(
        status,
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": content,
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": {"input_tokens": 1200, "output_tokens": 400, "cache_read_input_tokens": 900},
        },
    )


def tool_use(inp: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": "toolu_1", "name": "record_memories", "input": inp}]


def error(status: int, kind: str) -> httpx2.Response:
    return httpx2.Response(status, json={"type": "error", "error": {"type": kind, "message": kind}})


class Script:
    """A mock API that answers from a list of steps; the last step repeats."""

    def __init__(self, steps: list[str]) -> None:
        self.steps = steps
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = orjson.loads(request.content)
        self.bodies.append(body)
        step = self.steps[min(len(self.bodies) - 1, len(self.steps) - 1)]
        if step == "429":
            return error(429, "rate_limit_error")
        if step == "529":
            return error(529, "overloaded_error")
        if step == "500":
            return error(500, "api_error")
        if step == "garbage":
            return message([{"type": "text", "text": "I cannot do that."}])
        if step == "truncated":
            text = orjson.dumps(good_input(body)).decode()
            cut = text.index('"facts"')  # stopped mid-answer: the facts never came
            return message([{"type": "text", "text": "```json\n" + text[:cut]}])
        return message(tool_use(good_input(body)))


def scorer(settings: Settings, handler: Handler, **kw: Any) -> ClaudeScorer:
    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(handler)), max_retries=0
    )
    return ClaudeScorer(settings, client=client, sleep=lambda _s: None, **kw)


def _run(settings: Settings, event_log: EventLog, steps: list[str], n: int = 25) -> tuple[Script, Any]:
    seed_interactions(event_log, "agent-a", n)
    script = Script(steps)
    info = run_compress(settings, scorer=scorer(settings, script))
    return script, info


def _episode_rows(settings: Settings) -> list[tuple[Any, ...]]:
    con = open_catalog(settings)
    rows = con.execute("SELECT name, importance, scorer, key_quotes FROM episodes ORDER BY name").fetchall()
    con.close()
    return rows


def test_request_uses_tool_choice_and_prompt_caching(settings: Settings, event_log: EventLog) -> None:
    script, info = _run(settings, event_log, ["ok"])
    body = script.bodies[0]
    assert body["tool_choice"] == {"type": "tool", "name": "record_memories"}
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "think like a memory, not a summarizer" in body["system"][0]["text"].lower()
    assert info.scorer == "claude" and info.requests == 1 and info.cache_read_tokens == 900
    rows = _episode_rows(settings)
    assert [r[0] for r in rows] == ["The first part", "The rest"]
    assert rows[0][1] == 10 and rows[0][2] == "claude"
    quotes = orjson.loads(rows[0][3])
    assert len(quotes) == 1  # the invented quote was dropped, the verbatim one kept with its turn id
    con = open_catalog(settings)
    facts = con.execute("SELECT content, confidence FROM knowledge_events").fetchall()
    con.close()
    assert facts == [("Alice loves hiking.", 0.9)]


@pytest.mark.parametrize("failure", ["429", "529", "500"])
def test_transient_error_then_success_completes_the_batch(
    settings: Settings, event_log: EventLog, failure: str
) -> None:
    _script, info = _run(settings, event_log, [failure, "ok"])
    assert info.requests == 2 and info.retries == 1
    assert len(_episode_rows(settings)) == 2


def test_malformed_answer_is_retried_then_complete(settings: Settings, event_log: EventLog) -> None:
    _script, info = _run(settings, event_log, ["garbage", "ok"])
    assert info.requests == 2 and len(_episode_rows(settings)) == 2


def test_truncated_json_is_repaired_without_a_retry(settings: Settings, event_log: EventLog) -> None:
    _script, info = _run(settings, event_log, ["truncated"])
    assert info.requests == 1 and len(_episode_rows(settings)) == 2


def test_persistent_failure_writes_nothing_and_keeps_the_checkpoint(
    settings: Settings, event_log: EventLog
) -> None:
    seed_interactions(event_log, "agent-a", 25)
    before = log_lines(settings.data_dir)
    script = Script(["529"])
    with pytest.raises(TransientError):
        run_compress(settings, scorer=scorer(settings, script, max_attempts=3))
    assert len(script.bodies) == 3
    assert log_lines(settings.data_dir) == before
    assert pending_counts(settings) == {"agent-a": 25}
    # A clean retry later completes the batch.
    info = run_compress(settings, scorer=scorer(settings, Script(["ok"])))
    assert info.interactions_scored == 15 and info.episodes == 2


def test_sanitizer_coerces_and_completes() -> None:
    from datetime import UTC, datetime

    from tiermem.compressor.scoring import Interaction

    ts = datetime(2025, 1, 1, tzinfo=UTC)
    batch = [Interaction(f"e{i}", "a", ts, "u", "s", "", "global", f"msg {i}", "ok") for i in range(4)]
    raw = {
        "interactions": [{"id": "t1", "importance": "9/10"}, {"id": "2", "importance": -3}, {"id": "zz"}],
        "episodes": [
            {"name": "x", "summary": "y", "interaction_ids": ["t1", "t2", "t2"], "importance": "high"}
        ],
        "facts": [],
    }
    result = sanitize_batch(raw, batch, scorer="claude")
    assert result.scores == {"e0": 9, "e1": 1, "e2": 1, "e3": 1}
    assert result.episodes[0].member_ids == ["e0", "e1", "e2", "e3"]  # orphans joined, nothing lost
    assert result.episodes[0].importance == 9


def test_repair_json_closes_what_is_open() -> None:
    assert repair_json('{"a": [1, 2, {"b": "tex') == {"a": [1, 2, {"b": "tex"}]}
    assert repair_json('Sure! ```json\n{"a": 1, "b": ') == {"a": 1}
    assert repair_json("no json here") is None


def test_message_batches_api_path(settings: Settings, event_log: EventLog) -> None:
    from dataclasses import replace

    seed_interactions(event_log, "agent-a", 40)  # 30 to compress: two batches in one Batches API job
    calls: list[str] = []
    created: list[dict[str, Any]] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        path = request.url.path
        calls.append(f"{request.method} {path}")
        batch = {
            "id": "msgbatch_1",
            "type": "message_batch",
            "processing_status": "ended",
            "request_counts": {"processing": 0, "succeeded": 2, "errored": 0, "canceled": 0, "expired": 0},
            "created_at": "2025-01-01T00:00:00Z",
            "ended_at": "2025-01-01T00:01:00Z",
            "expires_at": "2025-01-02T00:00:00Z",
            "cancel_initiated_at": None,
            "archived_at": None,
            "results_url": "https://api.anthropic.com/v1/messages/batches/msgbatch_1/results",
        }
        if request.method == "POST" and path.endswith("/messages/batches"):
            created.extend(orjson.loads(request.content)["requests"])
            return httpx2.Response(200, json=batch)
        if path.endswith("/results"):
            lines = []
            for req in created:
                msg = message(tool_use(good_input(req["params"]))).json()
                lines.append(
                    orjson.dumps(
                        {"custom_id": req["custom_id"], "result": {"type": "succeeded", "message": msg}}
                    )
                )
            return httpx2.Response(
                200, content=b"\n".join(lines), headers={"content-type": "application/x-jsonl"}
            )
        if path.endswith("/msgbatch_1"):
            return httpx2.Response(200, json=batch)
        return error(404, "not_found_error")

    bulk = replace(settings, compressor=replace(settings.compressor, use_batches_api=True))
    info = run_compress(bulk, scorer=scorer(bulk, handler))
    assert info.interactions_scored == 30 and info.episodes == 4
    assert calls[0] == "POST /v1/messages/batches" and len(created) == 2
    assert not any(c == "POST /v1/messages" for c in calls)  # nothing went through the per-request path
