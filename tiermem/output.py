"""What users see: JSON for machines, tables and progress bars for people.

Progress goes to stderr and only when stderr is a terminal, so `--json` output
on stdout stays clean and CI logs stay readable.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

import orjson


def emit_json(obj: Any, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(
        orjson.dumps(obj, default=str, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
    )
    out.flush()


def format_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], max_width: int = 60) -> str:
    def cell(v: Any) -> str:
        text = "" if v is None else str(v)
        text = text.replace("\n", " ")
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    body = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    rows_text = ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in body]
    return "\n".join([line, sep, *rows_text])


class Progress:
    """A small progress bar on stderr (shown only on a terminal, or when forced)."""

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.start = time.monotonic()
        self._last_draw = 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self._last_draw > 0.1 or (self.total and self.done >= self.total)):
            self._last_draw = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        if self.total:
            frac = min(self.done / self.total, 1.0)
            bar = "#" * int(frac * 30)
            text = f"\r{self.label} [{bar:<30}] {self.done:,}/{self.total:,} {frac:4.0%} {rate:,.0f}/s"
        else:
            text = f"\r{self.label} {self.done:,} {rate:,.0f}/s"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
