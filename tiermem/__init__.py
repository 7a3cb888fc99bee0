"""tiermem: tiered, event-sourced memory for LLM agents.

    from tiermem import Memory

The base every part shares lives here (settings, ids, errors, the event
schema, text/date/token helpers, similarity); each component is a subpackage
(tiermem.log, tiermem.ingest, tiermem.compressor, tiermem.reviewer,
tiermem.evolver, tiermem.runtime); the application layer (CLI, jobs,
scheduler, demo, the public API) is tiermem.app.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public API is defined in the application layer (tiermem/app/api.py), because it drives
# every component and the base may not import components. It is resolved on first access
# (module __getattr__), so `import tiermem.ids` loads nothing else and no import cycle arises.
_PUBLIC = {
    "Memory": "tiermem.app.api",
    "AgentMemory": "tiermem.app.api",
    "Context": "tiermem.app.results",
    "Recall": "tiermem.app.results",
    "Fact": "tiermem.app.results",
}

__all__ = ["AgentMemory", "Context", "Fact", "Memory", "Recall", "__version__"]

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ below does the import
    from tiermem.app.api import AgentMemory, Memory
    from tiermem.app.results import Context, Fact, Recall


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'tiermem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value
