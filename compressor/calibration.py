"""How far the offline importance scores agree with a person's judgement.

A labelled set is a JSONL file of turns, each with the importance a person
gave it (1-10) and why. The offline scorer scores each turn on its own (no
previous turn, nothing seen before), and the agreement is Spearman's rank
correlation between its scores and the labels: only the order matters, since
the scorer is used to rank turns against a threshold, not to reproduce the
exact numbers. Ties get their average rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
from tiermem.compressor.offline_scorer import OfflineScorer
from tiermem.compressor.scoring import Interaction

from tiermem.errors import ValidationError

# Labelled turns carry no time; a fixed one keeps scoring reproducible.
LABEL_TS = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class LabelledTurn:
    id: str
    agent: str
    user: str
    user_message: str
    agent_response: str
    label: int
    reason: str
    source: str = "own"

    def interaction(self) -> Interaction:
        return Interaction(
            event_id=self.id,
            agent_id=self.agent,
            ts=LABEL_TS,
            user=self.user,
            session_id="labelled",
            project_id="",
            memory_level="global",
            user_message=self.user_message,
            agent_response=self.agent_response,
        )


def load_labels(path: Path | str) -> list[LabelledTurn]:
    turns = []
    for n, line in enumerate(Path(path).read_bytes().splitlines(), 1):
        if not line.strip():
            continue
        raw = orjson.loads(line)
        try:
            turn = LabelledTurn(**raw)
        except TypeError as exc:
            raise ValidationError(f"{path}:{n}", str(exc)) from None
        if not 1 <= turn.label <= 10 or not turn.reason.strip():
            raise ValidationError(f"{path}:{n}", "label must be 1-10 and come with a reason")
        turns.append(turn)
    return turns


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (Pearson's over the tie-averaged ranks)."""
    if len(xs) != len(ys) or len(xs) < 2:
        raise ValueError("spearman needs two sequences of the same length >= 2")
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = math.sqrt(sum((a - mx) ** 2 for a in rx))
    vy = math.sqrt(sum((b - my) ** 2 for b in ry))
    return cov / (vx * vy) if vx and vy else 0.0


def offline_scores(turns: Sequence[LabelledTurn], scorer: OfflineScorer | None = None) -> list[int]:
    scorer = scorer or OfflineScorer()
    return [scorer.score_interaction(t.interaction(), None, set()) for t in turns]


def agreement(turns: Sequence[LabelledTurn], scorer: OfflineScorer | None = None) -> float:
    """Spearman's correlation between the offline scores and the labels of `turns`."""
    return spearman(offline_scores(turns, scorer), [t.label for t in turns])
