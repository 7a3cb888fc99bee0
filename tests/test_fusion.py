"""Fusing BM25 with embedding cosine, and the retrieval settings that choose the mode."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.errors import ConfigError
from tiermem.fusion import rrf_fusion, weighted_fusion
from tiermem.settings import RetrievalSettings, resolve_settings

LEX = {"a": 8.0, "b": 4.0, "c": 2.0}
DENSE = {"c": 0.9, "d": 0.5, "a": 0.1}


def keys(ranking: list[tuple[str, float]]) -> list[str]:
    return [k for k, _ in ranking]


def test_weighted_fusion_ends_are_the_single_rankings() -> None:
    assert keys(weighted_fusion(LEX, DENSE, 0.0))[:3] == ["a", "b", "c"]
    assert keys(weighted_fusion(LEX, DENSE, 1.0))[:3] == ["c", "d", "a"]


def test_weighted_fusion_scales_each_side_to_unit_range() -> None:
    fused = dict(weighted_fusion(LEX, DENSE, 0.5))
    # a: lexical 8/8 = 1, dense (0.1 - 0.1) / 0.8 = 0;  c: 2/8 = 0.25 and 1;  d: 0 and 0.5;  b: 0.5 and absent.
    assert fused == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.625, "d": 0.25})
    assert keys(weighted_fusion(LEX, DENSE, 0.5)) == ["c", "a", "b", "d"]  # tie b/d broken by key


def test_weighted_fusion_with_one_side_empty() -> None:
    assert keys(weighted_fusion({}, DENSE, 0.4)) == ["c", "d", "a"]
    assert keys(weighted_fusion(LEX, {}, 0.4)) == ["a", "b", "c"]
    assert weighted_fusion({}, {}, 0.4) == []
    with pytest.raises(ValueError):
        weighted_fusion(LEX, DENSE, 1.5)


def test_rrf_uses_ranks_only() -> None:
    fused = dict(rrf_fusion(LEX, DENSE, dense_weight=0.5, k=60))
    assert fused["a"] == pytest.approx(0.5 / 61 + 0.5 / 63)
    assert fused["d"] == pytest.approx(0.5 / 62)
    scaled = dict(rrf_fusion({k: v * 1000 for k, v in LEX.items()}, DENSE, dense_weight=0.5, k=60))
    assert scaled == pytest.approx(fused)
    assert keys(rrf_fusion(LEX, DENSE, dense_weight=0.0))[:3] == ["a", "b", "c"]


def test_retrieval_settings_default_and_overrides(tmp_path: Path) -> None:
    s = resolve_settings(data_dir=tmp_path, env={})
    assert s.retrieval == RetrievalSettings()
    assert s.retrieval.mode == "lexical" and s.retrieval.embedding_model == "all-minilm-l6-v2-static"
    cfg = tmp_path / "t.toml"
    cfg.write_text('[retrieval]\nmode = "hybrid"\ndense_weight = 0.5\n')
    s = resolve_settings(data_dir=tmp_path, config_file=cfg, env={})
    assert (s.retrieval.mode, s.retrieval.dense_weight) == ("hybrid", 0.5)
    s = resolve_settings(data_dir=tmp_path, env={"TIERMEM_RETRIEVAL__MODE": "hybrid"})
    assert s.retrieval.mode == "hybrid"
    s = resolve_settings(data_dir=tmp_path, env={"TIERMEM_RETRIEVAL__MODE": "dense"})
    assert s.retrieval.mode == "dense"  # cosine alone, kept for comparison


@pytest.mark.parametrize(
    "toml",
    [
        '[retrieval]\nmode = "semantic"\n',
        "[retrieval]\ndense_weight = 2.0\n",
        "[retrieval]\ncandidates = 0\n",
    ],
)
def test_retrieval_settings_reject_bad_values(tmp_path: Path, toml: str) -> None:
    cfg = tmp_path / "t.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError, match="retrieval"):
        resolve_settings(data_dir=tmp_path, config_file=cfg, env={})
    with pytest.raises(ConfigError):
        resolve_settings(data_dir=tmp_path, env={"TIERMEM_RETRIEVAL__MODE": "semantic"})
