"""Merging two related memories into one (docs/evolver.md).

The instruction: "Combine these into a single memory. If they
contradict, prefer the newer information but note the change." Two merger
implementations share that contract:

- `merge_offline`: deterministic clause-level merge; a contradiction (one side
  negated, or a different number/value for the same clause) keeps the newer
  clause and says so in the note.
- `ClaudeMerger`: one cheap tool-use call through the `anthropic` SDK (or, as
  `OpenAIMerger`, a function call on any OpenAI-compatible endpoint), output
  sanitised; any failure falls back to the offline merge, and the result says
  which path produced it. An endpoint that cannot be reached costs one short
  retry for the whole run (`tiermem.llm.Reachability`); every later merge of
  the run is offline at once, and `path` names the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tiermem.llm import Reachability, anthropic_client, model_name, openai_client
from tiermem.settings import Settings
from tiermem.similarity import content_tokens, text_similarity

_NEGATIONS = frozenset(
    {"not", "no", "never", "dont", "doesnt", "isnt", "wont", "cant", "nor", "stop", "stopped"}
)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_CLAUSE_SPLIT = re.compile(r"(?<=[.;!?])\s+|\n+")
_CLAUSE_MATCH = 0.55  # two clauses this similar talk about the same thing


@dataclass(frozen=True)
class MergeResult:
    content: str
    contradiction: bool
    note: str | None
    path: str  # "offline" | "claude"


def _negated(text: str) -> bool:
    words = set(re.findall(r"[a-z']+", text.lower().replace("'", "")))
    return bool(words & _NEGATIONS) or "n't" in text.lower()


def contradicts(old: str, new: str, *, strong_only: bool = False) -> bool:
    """Do two texts about the same thing disagree (negation flip, changed number, swapped order)?

    `strong_only` leaves out the weakest signal (same frame, different last word:
    "likes tea" / "likes dogs" may both be true), for facts not known to share a topic.
    """
    if _negated(old) != _negated(new):
        return True
    ot, nt = content_tokens(old), content_tokens(new)
    old_numbers, new_numbers = set(_NUMBER.findall(old)), set(_NUMBER.findall(new))
    # The same statement with another number ("2 cats" / "3 cats"); two different
    # statements that merely carry numbers (dates, ids) are not a contradiction.
    if (
        old_numbers
        and new_numbers
        and old_numbers != new_numbers
        and len(set(_skeleton_tokens(ot)) ^ set(_skeleton_tokens(nt))) <= 1
    ):
        return True
    # Shared words in another order usually swap a relation: "tea over coffee" / "coffee over tea".
    if _order_swapped(ot, nt):
        return True
    if strong_only:
        return False
    # Same frame, different final value: "prefers tea" / "prefers coffee".
    return len(ot) >= 2 and len(nt) >= 2 and ot[:-1] == nt[:-1] and ot[-1] != nt[-1]


def _order_swapped(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    # Only for texts made of (nearly) the same words; paraphrases reorder freely.
    if len(set(a) ^ set(b)) > 2:
        return False
    shared = [w for w in dict.fromkeys(a) if w in set(b) and a.count(w) == 1 and b.count(w) == 1]
    if len(shared) < 3:
        return False
    pos_b = {w: b.index(w) for w in shared}
    order = [pos_b[w] for w in shared]
    return any(order[i] > order[j] for i in range(len(order)) for j in range(i + 1, len(order)))


def _skeleton_tokens(tokens: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(t for t in tokens if not t.isdigit())


def _skeleton(text: str) -> tuple[str, ...]:
    return _skeleton_tokens(content_tokens(text))


def _clauses(text: str) -> list[str]:
    return [c.strip() for c in _CLAUSE_SPLIT.split(text.strip()) if c.strip()]


def _join(clauses: list[str]) -> str:
    out = []
    for c in clauses:
        out.append(c if c[-1] in ".!?;" else c + ".")
    return " ".join(out).strip()


def merge_offline(old: str, new: str) -> MergeResult:
    """Deterministic merge: newer clauses replace matching older ones; new clauses are appended."""
    old_tokens, new_tokens = set(content_tokens(old)), set(content_tokens(new))
    if new_tokens <= old_tokens and not contradicts(old, new):
        return MergeResult(old, False, None, "offline")
    if old_tokens <= new_tokens and not contradicts(old, new):
        return MergeResult(new, False, None, "offline")
    old_clauses, new_clauses = _clauses(old), _clauses(new)
    merged: list[str] = []
    changes: list[str] = []
    used: set[int] = set()
    for oc in old_clauses:
        best, best_score = -1, 0.0
        for i, nc in enumerate(new_clauses):
            score = text_similarity(oc, nc)
            if _skeleton(oc) and _skeleton(oc) == _skeleton(nc):
                score = max(score, 1.0 - 1e-6)  # the same clause with another number: "2 cats" / "3 cats"
            if score > best_score:
                best, best_score = i, score
        if best >= 0 and best_score >= _CLAUSE_MATCH:
            nc = new_clauses[best]
            used.add(best)
            if contradicts(oc, nc):
                changes.append(f"'{oc.rstrip('.')}' → '{nc.rstrip('.')}'")
            merged.append(nc)  # the newer wording wins either way
        else:
            merged.append(oc)
    merged.extend(nc for i, nc in enumerate(new_clauses) if i not in used)
    # Whole-text contradiction not visible clause by clause (single clauses, different frames).
    if not changes and contradicts(old, new) and len(old_clauses) == 1 and len(new_clauses) == 1:
        changes.append(f"'{old.strip().rstrip('.')}' → '{new.strip().rstrip('.')}'")
        merged = [new.strip()]
    content = _join(list(dict.fromkeys(merged)))
    note = ("changed: " + "; ".join(changes) + " (newer wins)") if changes else None
    return MergeResult(content, bool(changes), note, "offline")


MERGE_TOOL: dict[str, Any] = {
    "name": "merged_memory",
    "description": "Return the single combined memory.",
    "input_schema": {
        "type": "object",
        "properties": {
            "content": {"type": "string", "description": "the combined memory, one declarative statement"},
            "contradiction": {"type": "boolean", "description": "true if the two memories disagreed"},
            "note": {"type": "string", "description": "what changed, if they disagreed"},
        },
        "required": ["content", "contradiction"],
    },
}

MERGE_PROMPT = (
    "Combine these into a single memory. If they contradict, prefer the newer information but note "
    "the change. Keep it short and declarative.\n\n<older>\n{old}\n</older>\n<newer>\n{new}\n</newer>"
)

Merger = Callable[[str, str], MergeResult]


class ClaudeMerger:
    """Merge with Claude (tool use, sanitised), falling back to the offline merge on any failure."""

    online = "claude"

    def __init__(self, settings: Settings, client: Any | None = None, max_tokens: int = 400) -> None:
        self.model = model_name(settings)
        self.max_tokens = max_tokens
        self.client: Any = client if client is not None else self._default_client(settings)
        self.reach = Reachability(settings)
        self.failures = 0

    def _default_client(self, settings: Settings) -> Any:
        return anthropic_client(settings)

    @property
    def path(self) -> str:
        return self.reach.path_name(self.online)

    def _ask(self, old: str, new: str) -> Any:
        """The merged_memory tool input (a dict), or None."""
        response = self.reach.call(
            lambda: self.client.messages.create(
                model=self.model,
                max_tokens=self.max_tokens,
                tools=[MERGE_TOOL],
                tool_choice={"type": "tool", "name": "merged_memory"},
                messages=[{"role": "user", "content": MERGE_PROMPT.format(old=old, new=new)}],
            )
        )
        return next((b.input for b in response.content if getattr(b, "type", None) == "tool_use"), None)

    def __call__(self, old: str, new: str) -> MergeResult:
        if self.reach.unreachable is not None:
            return merge_offline(old, new)
        try:
            payload = self._ask(old, new)
            content = str(payload.get("content") or "").strip() if isinstance(payload, dict) else ""
            if not content:
                raise ValueError("empty merge")
            contradiction = bool(payload.get("contradiction")) if isinstance(payload, dict) else False
            note = payload.get("note") if isinstance(payload, dict) else None
            note_text = str(note).strip() if note else None
            if contradiction and not note_text:
                note_text = f"changed: '{old.strip()}' → '{new.strip()}' (newer wins)"
            return MergeResult(content[:4000], contradiction, note_text, self.online)
        except Exception:  # the merge must never fail a run: degrade to the deterministic path
            self.failures += 1
            return merge_offline(old, new)


class OpenAIMerger(ClaudeMerger):
    """The same merge as a forced function call on an OpenAI-compatible endpoint."""

    online = "openai"

    def _default_client(self, settings: Settings) -> Any:
        return openai_client(settings)

    def _ask(self, old: str, new: str) -> Any:
        import orjson

        tool = {
            "type": "function",
            "function": {
                "name": MERGE_TOOL["name"],
                "description": MERGE_TOOL["description"],
                "parameters": MERGE_TOOL["input_schema"],
            },
        }
        completion = self.reach.call(
            lambda: self.client.chat.completions.create(
                model=self.model,
                max_tokens=self.max_tokens,
                tools=[tool],
                tool_choice={"type": "function", "function": {"name": "merged_memory"}},
                messages=[{"role": "user", "content": MERGE_PROMPT.format(old=old, new=new)}],
            )
        )
        calls = completion.choices[0].message.tool_calls or []
        return orjson.loads(calls[0].function.arguments) if calls else None


def make_merger(settings: Settings, client: Any | None = None) -> tuple[Merger, str]:
    """The merger to use and its path name: the provider's model (or a given client), else offline."""
    if settings.llm_provider == "openai" or (client is not None and settings.llm.provider == "openai"):
        return OpenAIMerger(settings, client), "openai"
    if settings.claude_available or (client is not None and settings.llm.provider != "offline"):
        return ClaudeMerger(settings, client), "claude"
    return merge_offline, "offline"


def summarize_offline(text: str, max_words: int = 60) -> str:
    """A short extractive summary for a long memory: the leading sentences, capped."""
    sentences = _clauses(text)
    out: list[str] = []
    words = 0
    for s in sentences:
        n = len(s.split())
        if out and words + n > max_words:
            break
        out.append(s)
        words += n
    summary = _join(out)
    if len(summary.split()) > max_words:
        summary = " ".join(summary.split()[:max_words]) + " …"
    return summary


def estimate_tokens(text: str) -> int:
    """About four characters a token: enough to decide "long" (> ~200 tokens)."""
    return (len(text) + 3) // 4
