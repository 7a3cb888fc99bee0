"""Background catch-up: reads never wait for the projector, and an agent always reads its own turns.

The projector is held back by taking its lock in the test (what another
process's projector does), so each step synchronises on a real condition:
the lock, and the projector thread's finished rounds.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_runtime import append, interaction, projector_held
from tiermem.runtime.background import BackgroundProjector, lock_is_free
from tiermem.runtime.projector import project, project_if_free

from tiermem import Memory
from tiermem.app.cli import command_settings
from tiermem.errors import ConfigError
from tiermem.settings import Settings, resolve_settings


def _recent(ctx: object) -> str:
    return "\n".join(s.text for s in ctx.sections if s.name == "recent")  # type: ignore[attr-defined]


def test_a_read_does_not_wait_and_the_own_turn_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "data"
    settings = resolve_settings(data_dir=root, env={}, fsync="none")
    assert settings.runtime.catch_up == "background"  # the default: what this test opens
    append(settings, interaction("bot", "warm-up turn", user="alice"))
    project(settings)
    with Memory.open(root, env={}, fsync="none") as mem:
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


def test_a_round_asked_for_by_a_read_starts_when_the_read_ends(settings: Settings) -> None:
    """The catch-up a read asks for does not run beside it (it would hold the interpreter)."""
    append(settings, interaction("bot", "hello", user="alice"))
    bg = BackgroundProjector(settings, poll_seconds=3600)  # no round from the poll in this test
    try:
        with bg.reading():
            ticket = bg.poke()
            # Nothing but the end of the read can start the round now: it does not come.
            assert not bg.wait(ticket, timeout=0.3, now=False)
            assert bg.state.rounds == 0
        assert bg.wait(ticket, timeout=60, now=False)  # the read's end started it
        assert bg.state.applied == 1
    finally:
        bg.stop()


def test_the_memory_reads_its_own_log_writes_at_once(tmp_path: Path) -> None:
    """A batch call's output (here `Memory.append`) is in the next read, without the thread."""
    root = tmp_path / "data"
    with Memory.open(root, env={}, fsync="none") as mem:
        assert mem.projector is not None
        mem.append(interaction("bot", "written through the Memory", user="alice"))
        bot = mem.agent("bot", user="alice")
        # The thread has never run (it starts on the first read that has nothing of its own to
        # apply): the turn below was applied by this Memory's own catch-up.
        assert mem.projector.state.rounds == 0
        assert "written through the Memory" in _recent(bot.context(user="alice"))


def test_a_fresh_memory_serves_the_store_as_projected_until_refresh(tmp_path: Path) -> None:
    """What another process appended is not waited for; `refresh()` is the explicit catch-up."""
    root = tmp_path / "data"
    settings = resolve_settings(data_dir=root, env={}, fsync="none")
    append(settings, interaction("bot", "projected turn", user="alice"))
    project(settings)
    with Memory.open(root, env={}, fsync="none") as mem:
        with projector_held(settings):  # another process is projecting: the thread skips its rounds
            append(settings, interaction("bot", "appended elsewhere", user="alice"))
            bot = mem.agent("bot", user="alice")
            assert "appended elsewhere" not in _recent(bot.context(user="alice"))
        mem.refresh()  # whether the thread got there first or not, the log is applied now
        assert "appended elsewhere" in _recent(bot.context(user="alice"))


def test_inline_catches_up_before_the_first_read(tmp_path: Path) -> None:
    root = tmp_path / "data"
    settings = resolve_settings(data_dir=root, env={}, fsync="none")
    append(settings, interaction("bot", "appended before the open", user="alice"))
    with Memory.open(root, env={}, fsync="none", runtime={"catch_up": "inline"}) as mem:
        assert mem.projector is None
        assert "appended before the open" in _recent(mem.agent("bot").context(user="alice"))


def test_one_shot_commands_catch_up_inline_and_servers_keep_the_setting(settings: Settings) -> None:
    assert settings.runtime.catch_up == "background"
    assert command_settings("context", settings).runtime.catch_up == "inline"
    assert command_settings("recall", settings).runtime.catch_up == "inline"
    assert command_settings("serve", settings).runtime.catch_up == "background"
    assert command_settings("mcp", settings).runtime.catch_up == "background"


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
