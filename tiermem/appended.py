"""What an append answers: one result per event, and a batch's results with its refusals."""

from __future__ import annotations

from dataclasses import dataclass, field

from tiermem.errors import ValidationError


@dataclass(frozen=True)
class AppendResult:
    event_id: str
    stream: str
    segment: str  # "<stream>/date=YYYY-MM-DD/<stem>"
    line: int  # 0-based line number in the segment; -1 for a duplicate
    duplicate: bool = False


@dataclass
class AppendBatchResult:
    results: list[AppendResult] = field(default_factory=list)
    rejected: list[tuple[int, ValidationError]] = field(default_factory=list)

    @property
    def accepted(self) -> int:
        return sum(1 for r in self.results if not r.duplicate)

    @property
    def duplicates(self) -> int:
        return sum(1 for r in self.results if r.duplicate)
