"""Background catch-up: reads never wait for the projector, and an agent always reads its own turns.

The projector is held back by taking its lock in the test (what another
process's projector does), so each step synchronises on a real condition:
the lock, and the projector thread's finished rounds.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers_runtime import append, interaction
from tiermem.runtime.background import BackgroundProjector, lock_is_free
from tiermem.runtime.projector import project, project_if_free

from tiermem import Memory
from tiermem.errors import ConfigError
from tiermem.settings import Settings, resolve_settings


@contextmanager
def projector_held(settings: Settings) -> Iterator[None]:
    """Hold the data root's projector lock, as a projector in another process would."""
    settings.locks_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(settings.locks_dir / "projector.lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _recent(ctx: object) -> str:
    return "\n".join(s.text for s in ctx.sections if s.name == "recent")  # type: ignore[attr-defined]


def test_a_read_does_not_wait_and_the_own_turn_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "data"
    settings = resolve_settings(data_dir=root, env={}, fsync="none")
    append(settings, interaction("bot", "warm-up turn", user="alice"))
    project(settings)
    with Memory.open(root, env={}, fsync="none", runtime={"catch_up": "background"}) as mem:
        assert mem.projector is not None
        # Another process appends turns while its projector holds the lock.
        with projector_held(settings):
            append(settings, interaction("bot", "the turn written elsewhere", user="alice"))
            assert not lock_is_free(settings)
            bot = mem.agent("bot", user="alice")
            ctx = bot.context(user="alice")
            # Served at once from the store as it is: the other process's turn is not in yet.
            assert "warm-up turn" in _recent(ctx)
            assert "the turn written elsewhere" not in _recent(ctx)
            # The agent's own turn is in its very next context, projector or not.
            bot.record_turn("alice", "my own new turn", "noted")
            ctx = bot.context(user="alice")
            assert "my own new turn" in _recent(ctx)
            ticket = mem.projector.poke()
        # Lock released: the thread's next round applies the other process's turn.
        assert mem.projector.wait(ticket)
        mem.projector.wait()  # a round begun after the release
        ctx = bot.context(user="alice")
        assert "the turn written elsewhere" in _recent(ctx)
        assert "my own new turn" in _recent(ctx)  # applied again by the projector: still once
        assert _recent(ctx).count("my own new turn") == 1
        assert mem.projector.state.error is None


def test_project_if_free_skips_while_another_projector_runs(settings: Settings) -> None:
    append(settings, interaction("bot", "hello", user="alice"))
    with projector_held(settings):
        assert project_if_free(settings) is None
    info = project_if_free(settings)
    assert info is not None and info.applied == 1


def test_the_thread_stops_and_reports_rounds(settings: Settings) -> None:
    append(settings, interaction("bot", "hello", user="alice"))
    bg = BackgroundProjector(settings, poll_seconds=60)
    try:
        assert bg.wait()
        assert bg.state.applied == 1 and bg.state.rounds >= 1
    finally:
        bg.stop()
    assert bg._thread is None


def test_catch_up_mode_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="catch_up"):
        Memory.open(tmp_path, env={}, runtime={"catch_up": "sometimes"})
    toml = tmp_path / "tiermem.toml"
    toml.write_text('[runtime]\ncatch_up = "sometimes"\n')
    with pytest.raises(ConfigError, match="catch_up"):
        resolve_settings(data_dir=tmp_path, env={}, config_file=toml)
