"""The Claude scorer: one request per batch of 15, structured output through a tool.

- The fixed part (instructions and the tool schema) is identical for every
  batch and marked `cache_control: ephemeral`, so after the first request it
  is read from the prompt cache.
- `tool_choice` forces the `record_memories` tool: the answer is JSON that
  the sanitiser (`tiermem.compressor.sanitize`) checks against the batch.
- Transient failures (429, 529 overloaded, other 5xx) are retried with
  exponential backoff (honouring `retry-after`); a malformed answer is
  retried as a whole. After `max_attempts` the batch raises `TransientError`
  and nothing of it is written.
- Connection failures and timeouts follow `tiermem.llm.Reachability`: one
  short retry, and an endpoint that never answered raises `LlmUnreachable`,
  on which the job scores with the offline scorer and says so.
- `OpenAIScorer` (in `openai_scorer`) reuses this loop over chat completions.
- `score_many` can send many batches through the Message Batches API
  (`client.messages.batches`) at half the price when latency does not matter.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import anthropic
from tiermem.compressor.sanitize import MalformedOutput, labels_for, sanitize_batch
from tiermem.compressor.scoring import BatchResult, Interaction

from tiermem.dates import human_day
from tiermem.errors import TerminalError, TransientError
from tiermem.llm import LlmUnreachable, Reachability, anthropic_client, model_name
from tiermem.settings import Settings

TOOL_NAME = "record_memories"
MAX_OUTPUT_TOKENS = 4096

SYSTEM_PROMPT = """You are the long-term memory of an AI agent. You receive a batch of the agent's past \
interactions, each labelled t1, t2, ... with its date, participant and the words exchanged.

Think like a memory, not a summarizer.

Score each interaction for importance. A 10 is a moment this agent would never forget. A 1 is routine \
small talk. Names, first meetings, dates and plans, stated preferences, corrections, promises, \
emotional moments and questions that got a real answer matter; greetings and filler do not. \
A few quiet words at the right moment can matter more than a long exchange.

Group related interactions into episodes and give each a name that captures how this agent would \
remember it. For each episode write a short summary that keeps absolute dates (write "7 May 2023", \
never only "yesterday"), the participants, the emotional context, and key quotes copied VERBATIM \
from the interactions (exact substrings, with the label of the interaction they come from). Every \
interaction belongs to exactly one episode.

Extract facts worth keeping, each in one category: "user" (about the person the agent talks to), \
"domain" (knowledge about the world or the work), "personal" (the agent's own context). Give the \
labels of the interactions that are the evidence. Mark corrections of something said earlier.

Answer only by calling the record_memories tool."""

TOOL_SCHEMA: dict[str, Any] = {
    "name": TOOL_NAME,
    "description": "Record importance scores, episodes and facts for one batch of interactions.",
    "input_schema": {
        "type": "object",
        "properties": {
            "interactions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "description": "label, e.g. t3"},
                        "importance": {"type": "integer", "minimum": 1, "maximum": 10},
                    },
                    "required": ["id", "importance"],
                },
            },
            "episodes": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "summary": {"type": "string"},
                        "interaction_ids": {"type": "array", "items": {"type": "string"}},
                        "key_quotes": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {"id": {"type": "string"}, "text": {"type": "string"}},
                                "required": ["id", "text"],
                            },
                        },
                        "emotional_context": {"type": "string"},
                        "importance": {"type": "integer", "minimum": 1, "maximum": 10},
                    },
                    "required": ["name", "summary", "interaction_ids", "key_quotes", "importance"],
                },
            },
            "facts": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "category": {"type": "string", "enum": ["user", "domain", "personal"]},
                        "content": {"type": "string"},
                        "topic": {"type": "string"},
                        "participant": {"type": "string"},
                        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                        "importance": {"type": "integer", "minimum": 1, "maximum": 10},
                        "is_correction": {"type": "boolean"},
                        "evidence_ids": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["category", "content", "evidence_ids"],
                },
            },
        },
        "required": ["interactions", "episodes", "facts"],
    },
    "cache_control": {"type": "ephemeral"},
}

TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    anthropic.RateLimitError,
    anthropic.InternalServerError,  # includes 529 OverloadedError, 503, 504
    TransientError,  # a connection failure after the endpoint had answered (Reachability)
)


def render_batch(agent_id: str, batch: list[Interaction]) -> str:
    lines = [f"Agent: {agent_id}. Interactions, oldest first:"]
    for label, it in labels_for(batch).items():
        head = f"[{label}] {human_day(it.ts)} {it.ts:%H:%M} UTC, participant: {it.user or 'unknown'}"
        lines.append(head)
        for speaker, text in it.lines():
            lines.append(f"  {speaker}: {text}")
    return "\n".join(lines)


def request_params(model: str, agent_id: str, batch: list[Interaction]) -> dict[str, Any]:
    """The Messages API parameters for one batch (also the body of a Batches API request)."""
    return {
        "model": model,
        "max_tokens": MAX_OUTPUT_TOKENS,
        "system": [{"type": "text", "text": SYSTEM_PROMPT, "cache_control": {"type": "ephemeral"}}],
        "tools": [TOOL_SCHEMA],
        "tool_choice": {"type": "tool", "name": TOOL_NAME},
        "messages": [{"role": "user", "content": render_batch(agent_id, batch)}],
    }


def tool_input(message: Any) -> Any:
    """The record_memories input from a Message; a JSON text block is accepted and repaired."""
    texts = []
    for block in getattr(message, "content", None) or []:
        kind = getattr(block, "type", None)
        if kind == "tool_use" and getattr(block, "name", "") == TOOL_NAME:
            return block.input
        if kind == "text":
            texts.append(block.text)
    if texts:
        return "\n".join(texts)
    raise MalformedOutput("the answer has neither a tool call nor text")


def _retry_after(exc: BaseException) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class ClaudeScorer:
    """Scores batches with Claude; see the module docstring for the failure policy."""

    name = "claude"
    transient_errors: tuple[type[BaseException], ...] = TRANSIENT_ERRORS
    rejected_errors: tuple[type[BaseException], ...] = (anthropic.APIStatusError,)

    def __init__(
        self,
        settings: Settings,
        *,
        client: Any = None,
        reach: Reachability | None = None,
        max_attempts: int = 5,
        base_delay: float = 1.0,
        max_delay: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        # The SDK's own retries are off: this loop retries, so it can also retry malformed answers.
        self.client: Any = client or self._default_client(settings)
        self.model = model_name(settings)
        self.reach = reach or Reachability(settings, sleep=sleep)
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.max_delay = max_delay
        self.sleep = sleep

    def _default_client(self, settings: Settings) -> Any:
        return anthropic_client(settings)

    def _params(self, agent_id: str, batch: list[Interaction]) -> dict[str, Any]:
        return request_params(self.model, agent_id, batch)

    def _send(self, params: dict[str, Any]) -> tuple[Any, tuple[int, int, int]]:
        """One request: the raw tool input and (input, output, cache-read) tokens."""
        message = self.reach.call(lambda: self.client.messages.create(**params))
        usage = getattr(message, "usage", None)
        tokens = (
            int(getattr(usage, "input_tokens", 0) or 0),
            int(getattr(usage, "output_tokens", 0) or 0),
            int(getattr(usage, "cache_read_input_tokens", 0) or 0),
        )
        return message, tokens

    def _answer(self, message: Any) -> Any:
        return tool_input(message)

    def _delay(self, attempt: int, exc: BaseException | None) -> float:
        hinted = _retry_after(exc) if exc is not None else None
        delay = self.base_delay * (2**attempt)
        return min(self.max_delay, max(delay, hinted or 0.0))

    def score_batch(self, agent_id: str, batch: list[Interaction]) -> BatchResult:
        params = self._params(agent_id, batch)
        requests = retries = input_tokens = output_tokens = cache_read = 0
        last: BaseException | None = None
        for attempt in range(self.max_attempts):
            if attempt:
                retries += 1
                self.sleep(self._delay(attempt - 1, last))
            requests += 1
            try:
                message, (tin, tout, tcache) = self._send(params)
            except LlmUnreachable:
                raise
            except self.transient_errors as exc:
                last = exc
                continue
            except self.rejected_errors as exc:
                raise TerminalError(f"the model rejected the compression request: {exc}") from exc
            input_tokens += tin
            output_tokens += tout
            cache_read += tcache
            try:
                result = sanitize_batch(self._answer(message), batch, scorer=self.name)
            except MalformedOutput as exc:
                last = exc
                continue
            result.requests, result.retries = requests, retries
            result.input_tokens, result.output_tokens = input_tokens, output_tokens
            result.cache_read_tokens = cache_read
            return result
        raise TransientError(
            f"compression batch for {agent_id} failed after {self.max_attempts} attempts: {last}"
        )

    def score_many(
        self, agent_id: str, batches: list[list[Interaction]], *, poll_seconds: float = 10.0
    ) -> list[BatchResult]:
        """Score many batches through the Message Batches API; failed items fall back to score_batch."""
        requests = [
            {"custom_id": f"b{i}", "params": request_params(self.model, agent_id, b)}
            for i, b in enumerate(batches)
        ]
        job = self.reach.call(lambda: self.client.messages.batches.create(requests=requests))
        while getattr(job, "processing_status", "ended") != "ended":
            self.sleep(poll_seconds)
            job = self.client.messages.batches.retrieve(job.id)
        answers: dict[str, Any] = {}
        for item in self.client.messages.batches.results(job.id):
            if getattr(item.result, "type", "") == "succeeded":
                answers[item.custom_id] = item.result.message
        out: list[BatchResult] = []
        for i, batch in enumerate(batches):
            message = answers.get(f"b{i}")
            result: BatchResult | None = None
            if message is not None:
                try:
                    result = sanitize_batch(tool_input(message), batch, scorer=self.name)
                    usage = getattr(message, "usage", None)
                    result.input_tokens = int(getattr(usage, "input_tokens", 0) or 0)
                    result.output_tokens = int(getattr(usage, "output_tokens", 0) or 0)
                except MalformedOutput:
                    result = None
            out.append(result or self.score_batch(agent_id, batch))
        return out
