"""The scorer interface and the values that cross it.

A scorer takes one batch of interactions (at most `batch_size`, oldest first)
and returns importance per interaction, the episodes it groups them into and
the facts it learned. Two implementations: `OfflineScorer` (deterministic, no
network) and `ClaudeScorer` (the anthropic SDK). The job never trusts a
scorer's output blindly: `tiermem.compressor.sanitize` checks every result
against the batch before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

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
        if self.user_message.strip():
            out.append((self.user or "user", self.user_message))
        if self.agent_response.strip():
            out.append((self.agent_name, self.agent_response))
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
    name: str

    def score_batch(self, agent_id: str, batch: list[Interaction]) -> BatchResult: ...


def make_scorer(settings: Settings, *, client: Any = None) -> Scorer:
    """Claude when a key (or a test client) is there, else the offline scorer: never silently."""
    if client is not None or settings.claude_available:
        from tiermem.compressor.claude_scorer import ClaudeScorer

        return ClaudeScorer(settings, client=client)
    from tiermem.compressor.offline_scorer import OfflineScorer

    return OfflineScorer()
