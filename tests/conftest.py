"""Shared fixtures. Part-specific helpers live in tests/helpers_<part>.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings on a fresh data root, independent of the caller's environment."""
    return resolve_settings(data_dir=tmp_path / "data", env={})


@pytest.fixture
def event_log(settings: Settings) -> Iterator[EventLog]:
    log = EventLog(settings)
    yield log
    log.close()
