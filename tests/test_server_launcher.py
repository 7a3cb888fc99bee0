"""The one launcher of `tiermem serve` (used by these tests' helpers and by `bench/bench_serve.py`)."""

from __future__ import annotations

from pathlib import Path

import httpx2
import pytest

from tiermem.app.api import Memory
from tiermem.app.server.keys import KeyStore
from tiermem.app.server.launcher import ServerStartError, clean_env, launch
from tiermem.settings import resolve_settings


def test_a_server_that_cannot_start_is_reported_with_its_own_words(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match="max-body-bytes") as failed:
        launch(tmp_path / "data", args=["--max-body-bytes", "0"])
    assert "exited with 2" in str(failed.value)


def test_it_serves_the_data_root_it_was_given_and_stops(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = KeyStore(resolve_settings(data_dir=data_dir, env={})).create(operator=False, agent_id="bot")["key"]
    turn = {"user": "ann", "user_message": "canary-LAUNCH-31", "agent_response": "ok"}
    with launch(data_dir, workers=2, env={"TIERMEM_FSYNC": "none"}) as server:
        posted = httpx2.post(
            f"{server.url}/v1/agents/bot/turns", json=turn, headers={"Authorization": f"Bearer {key}"}
        )
        assert posted.status_code == 201
    assert server.process.returncode == 0  # a graceful stop: SIGTERM, every worker gone
    with Memory(resolve_settings(data_dir=data_dir, env={})) as mem:
        rows = mem.query("SELECT user_message FROM interactions").rows
    assert rows == [("canary-LAUNCH-31",)]


def test_the_environment_keeps_no_tiermem_setting_or_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERMEM_DATA_DIR", "/elsewhere")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-canary")
    env = clean_env({"TIERMEM_FSYNC": "none"})
    assert "TIERMEM_DATA_DIR" not in env and "ANTHROPIC_API_KEY" not in env
    assert env["TIERMEM_FSYNC"] == "none"
