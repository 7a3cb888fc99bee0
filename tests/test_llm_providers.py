"""LLM providers: an OpenAI-compatible endpoint through the real openai SDK over httpx2.MockTransport,
the forced offline path, and an unreachable endpoint costing one short retry before the offline path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import orjson
import pytest
from helpers_compressor import seed_interactions
from test_compressor_claude import Script, good_input
from tiermem.compressor.job import run_compress
from tiermem.compressor.offline_scorer import OfflineScorer
from tiermem.compressor.scoring import make_scorer

from tiermem.errors import ConfigError, TransientError
from tiermem.eventlog import EventLog
from tiermem.llm import LlmUnreachable, Reachability
from tiermem.settings import LlmSettings, Settings, resolve_settings

OPENAI = LlmSettings(
    provider="openai", base_url="http://ollama.test/v1", model="llama3.1", retry_delay_seconds=0
)


def completion(arguments: str, *, content: str | None = None) -> httpx2.Response:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if arguments:
        message["tool_calls"] = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "record_memories", "arguments": arguments},
            }
        ]
    return httpx2.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "llama3.1",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 1500, "completion_tokens": 300, "total_tokens": 1800},
        },
    )


class OpenAIEndpoint:
    """A mock OpenAI-compatible server: answers each batch from the labels in its prompt."""

    def __init__(self, steps: list[str] | None = None) -> None:
        self.steps = steps or ["ok"]
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        body = orjson.loads(request.content)
        self.bodies.append(body)
        self.paths.append(request.url.path)
        step = self.steps[min(len(self.bodies) - 1, len(self.steps) - 1)]
        if step == "down":
            raise httpx2.ConnectError("connection refused", request=request)
        if step == "429":
            return httpx2.Response(429, json={"error": {"message": "slow down", "type": "rate_limit"}})
        prompt = {"messages": [{"content": body["messages"][1]["content"]}]}
        arguments = orjson.dumps(good_input(prompt)).decode()
        if step == "text":  # a server that ignores tools and writes the JSON as text
            return completion("", content="```json\n" + arguments + "\n```")
        return completion(arguments)


def openai_settings(settings: Settings, **llm: Any) -> Settings:
    return replace(settings, llm=replace(OPENAI, **llm))


def openai_sdk(handler: Any) -> openai.OpenAI:
    return openai.OpenAI(
        api_key="local",
        base_url="http://ollama.test/v1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def derived_events(data_dir: Path) -> list[dict[str, Any]]:
    out = []
    for path in sorted((data_dir / "log").rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            event = orjson.loads(line)
            if event.get("type") != "interaction":
                out.append(event)
    return out


def shape(events: list[dict[str, Any]]) -> dict[str, set[str]]:
    kinds: dict[str, set[str]] = {}
    for event in events:
        kinds.setdefault(str(event["type"]), set()).update(event)
    return kinds


def test_openai_endpoint_scores_through_the_sdk_with_the_claude_event_shape(
    settings: Settings, event_log: EventLog, tmp_path: Path
) -> None:
    seed_interactions(event_log, "agent-a", 25)
    endpoint = OpenAIEndpoint()
    s = openai_settings(settings)
    info = run_compress(s, client=openai_sdk(endpoint))
    assert info.scorer == "openai" and info.requests == 1 and info.input_tokens == 1500
    body = endpoint.bodies[0]
    assert endpoint.paths[0] == "/v1/chat/completions" and body["model"] == "llama3.1"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "record_memories"}}
    assert body["tools"][0]["function"]["parameters"]["required"] == ["interactions", "episodes", "facts"]
    assert "think like a memory" in body["messages"][0]["content"].lower()
    openai_events = derived_events(s.data_dir)
    episodes = [e for e in openai_events if e["type"] == "episode"]
    assert episodes and {e["scorer"] for e in episodes} == {"openai"}
    assert {"episode", "knowledge_proposed"} <= {e["type"] for e in openai_events}

    # The same turns through the Claude path: the same kinds of events with the same fields.
    claude_settings = resolve_settings(data_dir=tmp_path / "claude", env={})
    with EventLog(claude_settings) as log:
        seed_interactions(log, "agent-a", 25)
    script = Script(["ok"])
    client = anthropic.Anthropic(
        api_key="test", http_client=httpx2.Client(transport=httpx2.MockTransport(script)), max_retries=0
    )
    assert run_compress(claude_settings, client=client).scorer == "claude"
    assert shape(openai_events) == shape(derived_events(claude_settings.data_dir))


def test_an_endpoint_answering_in_text_is_sanitised_the_same_way(
    settings: Settings, event_log: EventLog
) -> None:
    seed_interactions(event_log, "agent-a", 25)
    info = run_compress(openai_settings(settings), client=openai_sdk(OpenAIEndpoint(["text"])))
    assert info.scorer == "openai" and info.batches == 1 and info.retries == 0


def test_rate_limits_are_retried_not_taken_for_an_outage(settings: Settings, event_log: EventLog) -> None:
    seed_interactions(event_log, "agent-a", 25)
    endpoint = OpenAIEndpoint(["429", "ok"])
    s = openai_settings(settings)
    scorer = make_scorer(s, client=openai_sdk(endpoint))
    scorer.online.sleep = lambda _s: None  # type: ignore[attr-defined]
    info = run_compress(s, scorer=scorer)
    assert info.scorer == "openai" and len(endpoint.bodies) == 2 and info.retries == 1


def test_unreachable_openai_endpoint_costs_one_retry_then_the_offline_path_says_so(
    settings: Settings, event_log: EventLog
) -> None:
    seed_interactions(event_log, "agent-a", 50)  # several batches: only the first one tries the endpoint
    endpoint = OpenAIEndpoint(["down"])
    s = openai_settings(settings)
    info = run_compress(s, client=openai_sdk(endpoint))
    assert len(endpoint.bodies) == 2  # the first request and one retry, for the whole run
    assert info.batches >= 3 and info.interactions_scored > 0
    assert info.scorer.startswith("offline (llm unreachable: openai-compatible http://ollama.test/v1")
    assert "ConnectError" in info.scorer or "Connection" in info.scorer
    episodes = [e for e in derived_events(s.data_dir) if e["type"] == "episode"]
    assert episodes and {e["scorer"] for e in episodes} == {"offline"}


def test_unreachable_claude_costs_one_retry_then_the_offline_path(
    settings: Settings, event_log: EventLog
) -> None:
    seed_interactions(event_log, "agent-a", 40)
    calls: list[str] = []

    def down(request: httpx2.Request) -> httpx2.Response:
        calls.append(request.url.path)
        raise httpx2.ConnectError("network is unreachable", request=request)

    s = replace(settings, anthropic_api_key="sk-test", llm=replace(settings.llm, retry_delay_seconds=0))
    client = anthropic.Anthropic(
        api_key="sk-test", http_client=httpx2.Client(transport=httpx2.MockTransport(down)), max_retries=0
    )
    info = run_compress(s, client=client)
    assert calls == ["/v1/messages", "/v1/messages"]
    assert info.scorer.startswith("offline (llm unreachable: anthropic (claude-sonnet-5)")
    assert info.interactions_scored > 0


def test_max_retries_zero_means_a_single_attempt(settings: Settings) -> None:
    s = openai_settings(settings, max_retries=0)
    reach = Reachability(s)
    tried: list[int] = []

    def refuse() -> None:
        tried.append(1)
        raise httpx2.ConnectError("refused")

    with pytest.raises(LlmUnreachable):
        reach.call(refuse)
    with pytest.raises(LlmUnreachable):  # marked for the rest of the run: no new attempt
        reach.call(refuse)
    assert len(tried) == 1 and reach.path_name("openai").startswith("offline (llm unreachable:")


def test_after_an_answer_a_connection_failure_is_transient_not_offline(settings: Settings) -> None:
    reach = Reachability(openai_settings(settings))
    assert reach.call(lambda: 42) == 42

    def refuse() -> None:
        raise httpx2.ConnectError("refused")

    with pytest.raises(TransientError) as caught:
        reach.call(refuse)
    assert not isinstance(caught.value, LlmUnreachable) and reach.unreachable is None
    assert reach.attempts == 3


def test_provider_offline_forces_the_offline_path_even_with_a_key(
    settings: Settings, event_log: EventLog
) -> None:
    s = resolve_settings(
        data_dir=settings.data_dir, env={"ANTHROPIC_API_KEY": "sk-test", "TIERMEM_LLM__PROVIDER": "offline"}
    )
    assert s.anthropic_api_key == "sk-test" and s.llm_provider == "offline"
    assert not s.claude_available and not s.llm_available
    assert isinstance(make_scorer(s), OfflineScorer)
    seed_interactions(event_log, "agent-a", 25)
    assert run_compress(s).scorer == "offline"


def test_auto_takes_claude_with_a_key_and_offline_without(settings: Settings) -> None:
    assert (
        resolve_settings(data_dir=settings.data_dir, env={"ANTHROPIC_API_KEY": "k"}).llm_provider
        == "anthropic"
    )
    assert resolve_settings(data_dir=settings.data_dir, env={}).llm_provider == "offline"


def test_llm_settings_from_toml_and_their_checks(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "tiermem.toml").write_text(
        '[llm]\nprovider = "openai"\nbase_url = "http://localhost:11434/v1"\nmodel = "qwen3"\nmax_retries = 1\n',
        encoding="utf-8",
    )
    s = resolve_settings(data_dir=root, env={})
    assert s.llm_provider == "openai" and s.llm.model == "qwen3" and s.llm.base_url.endswith("/v1")
    assert s.llm.connect_timeout_seconds <= 10
    with pytest.raises(ConfigError, match=r"llm\.provider"):
        resolve_settings(data_dir=root, env={"TIERMEM_LLM__PROVIDER": "gpt"})
    (root / "tiermem.toml").write_text('[llm]\nprovider = "openai"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"needs llm\.model"):
        resolve_settings(data_dir=root, env={})


def test_openai_merger_and_an_unreachable_one(settings: Settings) -> None:
    from tiermem.merging import OpenAIMerger, make_merger

    seen: list[dict[str, Any]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(orjson.loads(request.content))
        args = orjson.dumps({"content": "Alice lives in Bern.", "contradiction": True, "note": "moved"})
        return completion(args.decode())

    s = openai_settings(settings)
    merger, path = make_merger(s, openai_sdk(answer))
    assert isinstance(merger, OpenAIMerger) and path == "openai"
    result = merger("Alice lives in Zurich.", "Alice lives in Bern.")
    assert (result.content, result.contradiction, result.note, result.path) == (
        "Alice lives in Bern.",
        True,
        "moved",
        "openai",
    )
    assert seen[0]["tool_choice"]["function"]["name"] == "merged_memory"

    refused: list[int] = []

    def down(request: httpx2.Request) -> httpx2.Response:
        refused.append(1)
        raise httpx2.ConnectError("refused", request=request)

    merger, _ = make_merger(s, openai_sdk(down))
    for _ in range(5):
        assert merger("Alice lives in Zurich.", "Alice lives in Bern.").path == "offline"
    assert len(refused) == 2  # one retry for the whole run, then every merge is offline at once
    assert isinstance(merger, OpenAIMerger) and merger.path.startswith("offline (llm unreachable:")
