"""Settings resolution: overrides > TIERMEM_* variables > the TOML file > defaults, with one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiermem.errors import ConfigError
from tiermem.settings import DEFAULT_PRICES, ModelPrice, Settings, resolve_settings

TOML = """
fsync = "group"
anthropic_model = "claude-from-file"
[compressor]
importance_threshold = 6
[compressor.agent_thresholds]
guarded-npc = 8
[runtime]
top_knowledge = 9
[prices."my-model"]
input = 1.5
output = 2.5
"""


def _root(tmp_path: Path, text: str = TOML) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    (root / "tiermem.toml").write_text(text)
    return root


def test_defaults_without_file_or_environment(tmp_path: Path) -> None:
    s = resolve_settings(data_dir=tmp_path, env={})
    assert s == Settings(data_dir=tmp_path)
    assert s.config_file is None and not s.claude_available


def test_file_then_environment_then_overrides(tmp_path: Path) -> None:
    root = _root(tmp_path)
    env = {
        "TIERMEM_FSYNC": "none",
        "TIERMEM_COMPRESSOR__BATCH_SIZE": "20",
        "TIERMEM_COMPRESSOR__USE_BATCHES_API": "yes",
        "TIERMEM_EVOLVER__RELATED": "0.75",
        "TIERMEM_SEGMENT_MAX_BYTES": "1024",
        "ANTHROPIC_API_KEY": "sk-env",
        "OTHER": "ignored",
    }
    s = resolve_settings(data_dir=root, env=env, anthropic_model="claude-override")
    assert s.config_file == root / "tiermem.toml"
    assert s.fsync == "none"  # the variable beats the file
    assert s.anthropic_model == "claude-override"  # the override beats the file
    assert s.compressor.importance_threshold == 6 and s.compressor.threshold_for("guarded-npc") == 8
    assert s.compressor.batch_size == 20 and s.compressor.use_batches_api is True
    assert s.evolver.related == 0.75 and s.segment_max_bytes == 1024
    assert s.runtime.top_knowledge == 9 and s.runtime.recent_interactions == 5
    assert (
        s.prices["my-model"] == ModelPrice(1.5, 2.5)
        and s.prices["claude-opus-5"] == DEFAULT_PRICES["claude-opus-5"]
    )
    assert s.anthropic_api_key == "sk-env"


def test_data_dir_and_config_from_the_environment(tmp_path: Path) -> None:
    root = _root(tmp_path)
    other = tmp_path / "other.toml"
    other.write_text('fsync = "none"\n')
    s = resolve_settings(env={"TIERMEM_DATA_DIR": str(root)})
    assert s.data_dir == root and s.fsync == "group"
    s = resolve_settings(env={"TIERMEM_DATA_DIR": str(root), "TIERMEM_CONFIG": str(other)})
    assert s.fsync == "none" and s.config_file == other


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("nope = 1\n", {}, "unknown setting 'nope'"),
        ("[runtime]\nnope = 1\n", {}, r"\[runtime\]: unknown setting"),
        ("fsync = \n", {}, "tiermem.toml"),
        ("", {"TIERMEM_GALAXY__X": "1"}, "unknown section 'galaxy'"),
        ("", {"TIERMEM_RUNTIME__NOPE": "1"}, "unknown setting runtime.nope"),
        ("", {"TIERMEM_RUNTIME__TIER_BUDGETS": "1"}, "unknown setting runtime.tier_budgets"),
        ("", {"TIERMEM_NOPE": "1"}, "unknown setting 'nope'"),
        ("", {"TIERMEM_COMPRESSOR__BATCH_SIZE": "many"}, "expected int"),
        ("", {"TIERMEM_COMPRESSOR__USE_BATCHES_API": "maybe"}, "expected bool"),
        ('fsync = "sometimes"\n', {}, "fsync='sometimes'"),
    ],
)
def test_bad_settings_are_one_line_errors(
    tmp_path: Path, toml: str, env: dict[str, str], message: str
) -> None:
    root = _root(tmp_path, toml)
    with pytest.raises(ConfigError, match=message) as info:
        resolve_settings(data_dir=root, env=env)
    assert "\n" not in str(info.value).strip()


def test_a_named_config_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        resolve_settings(data_dir=tmp_path, config_file=tmp_path / "missing.toml", env={})
    # the default <data-dir>/tiermem.toml is optional
    assert resolve_settings(data_dir=tmp_path, env={}).config_file is None


def test_retrieval_shares_and_recall_share_are_checked(tmp_path: Path) -> None:
    (tmp_path / "tiermem.toml").write_text(
        "[runtime]\nrecall_share = 0.8\nretrieval_shares = {episodes = 0.3, facts = 0.2}\n"
    )
    s = resolve_settings(data_dir=tmp_path, env={})
    assert s.runtime.recall_share == 0.8 and dict(s.runtime.retrieval_shares) == {
        "episodes": 0.3,
        "facts": 0.2,
    }
    for bad in (
        "recall_share = 1.5",
        "retrieval_shares = {episodes = 0.8, facts = 0.5}",
        "retrieval_shares = {turns = 0.1}",
    ):
        (tmp_path / "tiermem.toml").write_text(f"[runtime]\n{bad}\n")
        with pytest.raises(ConfigError, match="runtime"):
            resolve_settings(data_dir=tmp_path, env={})
