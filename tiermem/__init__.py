"""tiermem: tiered, event-sourced memory for LLM agents.

The shared pieces live here (settings, ids, errors, CLI, scheduler); each
component is a subpackage: tiermem.log, tiermem.ingest, tiermem.compressor,
tiermem.reviewer, tiermem.evolver, tiermem.runtime.
"""

__version__ = "0.1.0"
