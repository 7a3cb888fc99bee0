"""The sample generator: reproducible, varied, and every record valid for ingest."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import orjson
from tiermem.ingest.pipeline import ingest_file

from tiermem.app import samples
from tiermem.settings import Settings


def test_samples_are_reproducible_varied_and_all_valid(settings: Settings, tmp_path: Path) -> None:
    end = date(2026, 3, 10)
    a = list(samples.generate(days=3, per_day=300, end=end, seed=4))
    b = list(samples.generate(days=3, per_day=300, end=end, seed=4))
    assert a == b and len(a) == 900
    modern = [r for r in a if "agent_id" in r]
    assert len({r["agent_id"] for r in modern}) == len(samples.AGENTS)
    assert len({r["user"] for r in modern}) == len(samples.USERS)
    assert len({r["ts"][:10] for r in modern}) == 3
    assert any("model" not in r for r in modern)  # some turns lack enrichment
    assert any("agentId" in r for r in a)  # some in the v0 camelCase format
    assert any("recall_memory" in r.get("tools_used", []) for r in modern)
    src = samples.write_jsonl(tmp_path / "s.jsonl", iter(a))
    assert src == 900
    info = ingest_file(settings, tmp_path / "s.jsonl", progress=False)
    assert (info.accepted, info.rejected) == (900, 0)
    first = orjson.loads((tmp_path / "s.jsonl").read_bytes().splitlines()[0])
    assert first == a[0]
