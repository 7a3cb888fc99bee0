"""tiermem.runtime: the hot store, context assembly, memory levels, memory tools, turn loop.

The names other parts and users import most are re-exported here lazily, so
`import tiermem.runtime` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "AgentMemory": "tiermem.runtime.memory",
    "open_memory": "tiermem.runtime.memory",
    "record_turn": "tiermem.runtime.memory",
    "end_session": "tiermem.runtime.memory",
    "assemble_context": "tiermem.runtime.context",
    "project": "tiermem.runtime.projector",
    "rebuild": "tiermem.runtime.projector",
    "content_digest": "tiermem.runtime.projector",
    "tool_specs": "tiermem.runtime.tools",
    "HotStore": "tiermem.runtime.store",
    "open_store": "tiermem.runtime.store",
    "Principal": "tiermem.runtime.visibility",
    "call_tool": "tiermem.runtime.tools",
    "run_turn": "tiermem.runtime.turnloop",
    "count_tokens": "tiermem.tokens",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tiermem.runtime' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
