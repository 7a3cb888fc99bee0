"""The offline compressor's output, byte for byte, on fixed inputs.

The digests below were produced by the compressor as it was before its speed
work (commit af9155c), with

    .venv/bin/python tests/compress_golden.py OUT --agents 3 --per-agent 700 --demo-days 2 --per-day 300 --edge-turns 600

A change that alters any derived event (an episode's name or summary, a fact's
wording or confidence, a note, an id, the order of the lines, a field's
position) changes a digest. Optimisations must leave them as they are; a change
of behaviour must say so by updating them.

Changed on purpose since: a turn scored as small talk is still an episode's key
quote when it answers a question (the turn before it ends with "?"): the bench
and edge episodes' digests only (the demo has no such turn).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from compress_golden import bench_output, demo_output, digest, edge_output

PINNED: dict[str, dict[str, tuple[int, str]]] = {
    "bench": {
        "episodes": (429, "8b49cab2658991d3a39a21248e1b6c6eb4f66ef1715c9222eb8db25e7463764f"),
        "knowledge": (1078, "f294094925241f08e8fdc287148fa30c39e00df44782bd2b76cc3dd9d99eb13d"),
        "relationships": (24, "b1d35d679439ef71a0bacf1e2d66d5a88f41707347dd07c327414eb173f92cd7"),
        "notes": (946, "8af13beb11ee6523e39192b9a6c7d69e00464c33da74b97d0774a7872af839a4"),
    },
    "demo": {
        "episodes": (194, "b2c1810c0aad2bb15e65c22e33cf2514b362d564fcf688fd7bdf98f614aebe07"),
        "knowledge": (94, "c8f03800903f5228e08f09004b2b2a358c4a94c8f0ade7681f8b770351e2b2ab"),
        "relationships": (48, "e31ff5060b379756bc872d81839fad78150ed50eeb54b033265e37b3d8293347"),
        "notes": (276, "10da9833b2d404d08e309311e24cbfe5d023d62c260f58bee6a3e47a9df67ed9"),
    },
    "edge": {
        "episodes": (266, "fef9eab32f414338f8bbaeaa94dbcc9eb9ea7e110e0cdb6e391477bcc767ad6d"),
        "knowledge": (462, "cba21c0182c76686f7bff38f6b66e14fd7cf85c83c60cec9b55c289f2c82669b"),
        "relationships": (6, "a46fe8a50569b42b30bebb8ec8b25b1ca6ff3d3fa3903aacb9e89ac4c391be92"),
        "notes": (1080, "75b1ef2e13cf9b180d876f6767fd8c15cade19e618e0af959ac19158ac9986e4"),
    },
}


def _produce(name: str, tmp: Path) -> dict[str, list[bytes]]:
    if name == "bench":
        return bench_output(tmp, 3, 700)
    if name == "demo":
        return demo_output(tmp, 2, 300)
    return edge_output(tmp, 600)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_derived_events_are_byte_identical(name: str, tmp_path: Path) -> None:
    out = _produce(name, tmp_path)
    got = {stream: (len(lines), digest(lines)) for stream, lines in out.items()}
    assert got == PINNED[name]


def test_edge_input_reaches_the_paths_it_is_for(tmp_path: Path) -> None:
    """The edge input is worth pinning only if its turns produce what it was written for."""
    out = edge_output(tmp_path, 600)
    knowledge = b"\n".join(out["knowledge"])
    notes = b"\n".join(out["notes"])
    assert "İstanbul".encode() in knowledge  # a fact with a character outside ASCII
    assert b'"is_correction":true' in knowledge
    assert b'"kind":"who_did_what"' in notes and b"the other day" in notes
    assert "Zoë".encode() in b"\n".join(out["episodes"])
