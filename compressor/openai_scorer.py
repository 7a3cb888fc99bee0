"""The scorer over any OpenAI-compatible endpoint (Ollama, vLLM, llama.cpp, hosted).

Same instructions, same output schema and the same sanitiser as the Claude
scorer: the schema goes out as a function tool that the request forces
(`tool_choice`), and the function's JSON arguments are checked against the
batch exactly like Claude's tool input. Servers that ignore tools and answer
in text are accepted too: the sanitiser repairs JSON found in the text. The
retry loop and the unreachable-endpoint rule are the Claude scorer's.
"""

from __future__ import annotations

from typing import Any

import openai
from tiermem.compressor.claude_scorer import (
    MAX_OUTPUT_TOKENS,
    SYSTEM_PROMPT,
    TOOL_NAME,
    TOOL_SCHEMA,
    ClaudeScorer,
    render_batch,
)
from tiermem.compressor.sanitize import MalformedOutput
from tiermem.compressor.scoring import Interaction

from tiermem.errors import TransientError
from tiermem.llm import openai_client
from tiermem.settings import Settings

FUNCTION_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": TOOL_SCHEMA["description"],
        "parameters": TOOL_SCHEMA["input_schema"],
    },
}


def request_params(model: str, agent_id: str, batch: list[Interaction]) -> dict[str, Any]:
    """The chat.completions parameters for one batch."""
    return {
        "model": model,
        "max_tokens": MAX_OUTPUT_TOKENS,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": render_batch(agent_id, batch)},
        ],
        "tools": [FUNCTION_TOOL],
        "tool_choice": {"type": "function", "function": {"name": TOOL_NAME}},
    }


def function_arguments(completion: Any) -> Any:
    """The record_memories arguments (a JSON string) from a completion, or its text."""
    choices = getattr(completion, "choices", None) or []
    if not choices:
        raise MalformedOutput("the answer has no choices")
    message = choices[0].message
    for call in getattr(message, "tool_calls", None) or []:
        function = getattr(call, "function", None)
        if function is not None and function.name == TOOL_NAME:
            return function.arguments
    if getattr(message, "content", None):
        return message.content
    raise MalformedOutput("the answer has neither a function call nor text")


class OpenAIScorer(ClaudeScorer):
    """Scores batches through chat.completions on `llm.base_url` with `llm.model`."""

    name = "openai"
    transient_errors = (openai.RateLimitError, openai.InternalServerError, TransientError)
    rejected_errors = (openai.APIStatusError,)

    def _default_client(self, settings: Settings) -> Any:
        return openai_client(settings)

    def _params(self, agent_id: str, batch: list[Interaction]) -> dict[str, Any]:
        return request_params(self.model, agent_id, batch)

    def _send(self, params: dict[str, Any]) -> tuple[Any, tuple[int, int, int]]:
        completion = self.reach.call(lambda: self.client.chat.completions.create(**params))
        usage = getattr(completion, "usage", None)
        details = getattr(usage, "prompt_tokens_details", None)
        tokens = (
            int(getattr(usage, "prompt_tokens", 0) or 0),
            int(getattr(usage, "completion_tokens", 0) or 0),
            int(getattr(details, "cached_tokens", 0) or 0),
        )
        return completion, tokens

    def _answer(self, message: Any) -> Any:
        return function_arguments(message)
