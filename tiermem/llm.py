"""Which language model a run calls, how its clients are built, and what an outage costs.

Three paths: Claude through the `anthropic` SDK (the default when a key is
set), any OpenAI-compatible endpoint through the `openai` SDK (`llm.base_url`
+ `llm.model`: Ollama, vLLM, llama.cpp or a hosted service), and the offline
path, which calls nothing. `llm.provider = "offline"` forces the last one even
with a key in the environment.

Both SDKs are built with their own retries off and a short connect timeout:
the callers decide what to retry. `Reachability` is the one rule for an
endpoint that cannot be reached: a connection failure (refused, no route, DNS,
timeout) is retried `llm.max_retries` times after a short pause; if the run
has not had a single answer yet, the endpoint is marked unreachable for the
rest of the run, `LlmUnreachable` is raised and the caller takes its offline
path and names the reason (`path_name`). Once an answer came back, a later
connection failure is an ordinary `TransientError`: a run that started on the
model does not quietly finish on the offline path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from tiermem.errors import TransientError
from tiermem.settings import Settings

T = TypeVar("T")

OFFLINE = "offline"


class LlmUnreachable(TransientError):
    """The model endpoint could not be reached: the run continues on the offline path."""


def model_name(settings: Settings) -> str:
    """The model to ask: `llm.model`, else `anthropic_model` for Claude."""
    if settings.llm.model:
        return settings.llm.model
    return settings.anthropic_model


def endpoint(settings: Settings) -> str:
    """A short name of where the calls go, for messages and job summaries."""
    if settings.llm_provider == "openai":
        return f"openai-compatible {settings.llm.base_url or 'api.openai.com'} ({model_name(settings)})"
    return f"{settings.llm_provider} ({model_name(settings)})"


def api_key(settings: Settings, env: dict[str, str] | None = None) -> str | None:
    """The key for the chosen provider.

    Claude's key is resolved with the settings (`anthropic_api_key`). An
    OpenAI-compatible server reads the variable named by `llm.api_key_env`
    (default `OPENAI_API_KEY`); local servers accept any key, so a placeholder
    is sent when none is set.
    """
    if settings.llm_provider == "anthropic":
        return settings.anthropic_api_key
    import os

    source = os.environ if env is None else env
    name = settings.llm.api_key_env or "OPENAI_API_KEY"
    return source.get(name) or "not-needed"


def _timeout(settings: Settings, httpx: Any) -> Any:
    return httpx.Timeout(settings.llm.timeout_seconds, connect=settings.llm.connect_timeout_seconds)


def anthropic_client(settings: Settings, *, http_client: Any = None) -> Any:
    """An `anthropic.Anthropic` with the SDK's retries off and the short connect timeout."""
    import anthropic
    import httpx2

    return anthropic.Anthropic(
        api_key=settings.anthropic_api_key,
        max_retries=0,
        timeout=_timeout(settings, httpx2),
        http_client=http_client,
    )


def openai_client(settings: Settings, *, http_client: Any = None, env: dict[str, str] | None = None) -> Any:
    """An `openai.OpenAI` for `llm.base_url`, with the SDK's retries off and the short connect timeout."""
    import httpx2
    import openai

    return openai.OpenAI(
        api_key=api_key(settings, env),
        base_url=settings.llm.base_url or None,
        max_retries=0,
        timeout=_timeout(settings, httpx2),
        http_client=http_client,
    )


def connection_errors() -> tuple[type[BaseException], ...]:
    """The SDK errors that mean "the endpoint did not answer" (timeouts included)."""
    import anthropic
    import httpx2
    import openai

    return (anthropic.APIConnectionError, openai.APIConnectionError, httpx2.TransportError)


class Reachability:
    """One run's view of the endpoint: answered yet, or unreachable (and why)."""

    def __init__(self, settings: Settings, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self.sleep = sleep
        self.answered = False
        self.unreachable: str | None = None
        self.attempts = 0

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()` with the connection-failure rule of the module docstring."""
        if self.unreachable is not None:
            raise LlmUnreachable(self.unreachable)
        errors = connection_errors()
        tries = 1 + self.settings.llm.max_retries
        last: BaseException | None = None
        for i in range(tries):
            if i:
                self.sleep(self.settings.llm.retry_delay_seconds)
            self.attempts += 1
            try:
                out = fn()
            except errors as exc:
                last = exc
                continue
            self.answered = True
            return out
        reason = f"{endpoint(self.settings)}: {type(last).__name__}: {last}"
        if not self.answered:
            self.unreachable = reason
            raise LlmUnreachable(f"llm unreachable: {reason}") from last
        raise TransientError(f"llm request failed after {tries} attempts: {reason}") from last

    def path_name(self, online: str) -> str:
        """The path a job reports: `online`, or the offline path with the reason."""
        if self.unreachable is None:
            return online
        return f"{OFFLINE} (llm unreachable: {self.unreachable})"
