"""The one token estimate every part uses: ceil(len(text) / 4).

A real tokenizer would need a model download and differs per model; a
character ratio is stable, deterministic and close enough for budgets.
"""

from __future__ import annotations


def count_tokens(text: str) -> int:
    """Estimated tokens of `text`: ceil(characters / 4), 0 for the empty string."""
    return (len(text) + 3) // 4
