"""The scorer interface and the values that cross it.

A scorer takes one batch of interactions (at most `batch_size`, oldest first)
and returns importance per interaction, the episodes it groups them into and
the facts it learned. Two implementations: `OfflineScorer` (deterministic, no
network), `ClaudeScorer` (the anthropic SDK) and `OpenAIScorer` (any
OpenAI-compatible endpoint); `make_scorer` picks one from `llm.provider` and
wraps a model scorer so that an unreachable endpoint leaves the run on the
offline scorer, named in the job's `scorer` field. The job never trusts a
scorer's output blindly: `tiermem.compressor.sanitize` checks every result
against the batch before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from tiermem.attachments import with_attachments
from tiermem.settings import Settings

FACT_CATEGORIES = ("user", "domain", "personal")


@dataclass(frozen=True)
class Interaction:
    """One logged turn as the compressor sees it."""

    event_id: str
    agent_id: str
    ts: datetime
    user: str
    session_id: str
    project_id: str
    memory_level: str
    user_message: str
    agent_response: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # Media shared with the turn; their captions are words of the side that shared them.
    attachments: tuple[dict[str, Any], ...] = ()

    # Derived once at construction: every scorer reads them several times per
    # turn (functools.cached_property takes a lock on each first access).
    spoken: tuple[tuple[str, str], ...] = field(init=False, repr=False, compare=False)
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        spoken = tuple(self.lines())
        object.__setattr__(self, "spoken", spoken)
        object.__setattr__(self, "text", "\n".join(t for _, t in spoken))

    @property
    def agent_name(self) -> str:
        # Display name of the agent for quotes; callers may set metadata.agent_name.
        return str(self.metadata.get("agent_name") or self.agent_id)

    def lines(self) -> list[tuple[str, str]]:
        """(speaker, text) of the non-empty sides of the turn, in spoken order."""
        out = []
        user_side = bool(self.user_message.strip()) or not self.agent_response.strip()
        user_text = with_attachments(self.user_message, self.attachments if user_side else ())
        if user_text.strip():
            out.append((self.user or "user", user_text))
        agent_text = with_attachments(self.agent_response, () if user_side else self.attachments)
        if agent_text.strip():
            out.append((self.agent_name, agent_text))
        return out


@dataclass
class Quote:
    text: str  # verbatim, a whole side of one turn
    event_id: str
    speaker: str = ""


@dataclass
class EpisodeDraft:
    name: str
    summary: str
    member_ids: list[str]
    key_quotes: list[Quote]
    emotional_context: str = ""
    importance: int = 1


@dataclass
class FactDraft:
    category: str  # user | domain | personal
    content: str
    topic: str = ""
    participant: str = ""
    confidence: float = 0.6
    importance: int = 5
    is_correction: bool = False
    evidence: list[Quote] = field(default_factory=list)


@dataclass
class BatchResult:
    scores: dict[str, int]  # event_id -> importance 1..10
    episodes: list[EpisodeDraft]
    facts: list[FactDraft]
    scorer: str  # "offline" | "claude"
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    retries: int = 0


class Scorer(Protocol):
    @property
    def name(self) -> str: ...

    def score_batch(self, agent_id: str, batch: list[Interaction]) -> BatchResult: ...


class OfflineWhenUnreachable:
    """A model scorer that hands every batch to the offline scorer once its endpoint proved unreachable."""

    def __init__(self, online: Any, offline: Scorer) -> None:
        self.online = online
        self.offline = offline

    @property
    def name(self) -> str:
        """The model scorer's name, or "offline (llm unreachable: ...)" once it fell back."""
        return str(self.online.reach.path_name(self.online.name))

    def score_batch(self, agent_id: str, batch: list[Interaction]) -> BatchResult:
        from tiermem.llm import LlmUnreachable

        if self.online.reach.unreachable is None:
            try:
                return self.online.score_batch(agent_id, batch)
            except LlmUnreachable:
                pass
        return self.offline.score_batch(agent_id, batch)

    def score_many(self, agent_id: str, batches: list[list[Interaction]]) -> list[BatchResult]:
        """The Message Batches API (Claude only); any other scorer answers batch by batch."""
        from tiermem.llm import LlmUnreachable

        if self.online.name == "claude" and self.online.reach.unreachable is None:
            try:
                return self.online.score_many(agent_id, batches)
            except LlmUnreachable:
                pass
        return [self.score_batch(agent_id, b) for b in batches]


def make_scorer(settings: Settings, *, client: Any = None) -> Scorer:
    """The model scorer for `llm.provider` (or a test client), else the offline scorer: never silently.

    A given `client` is an `anthropic.Anthropic` unless the provider is `openai`.
    """
    from tiermem.compressor.offline_scorer import OfflineScorer

    provider = settings.llm_provider
    if provider == "openai" or (client is not None and settings.llm.provider == "openai"):
        from tiermem.compressor.openai_scorer import OpenAIScorer

        return OfflineWhenUnreachable(OpenAIScorer(settings, client=client), OfflineScorer())
    if provider == "anthropic" or (client is not None and settings.llm.provider != "offline"):
        from tiermem.compressor.claude_scorer import ClaudeScorer

        return OfflineWhenUnreachable(ClaudeScorer(settings, client=client), OfflineScorer())
    return OfflineScorer()
