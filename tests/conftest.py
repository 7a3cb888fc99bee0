"""Shared fixtures. Part-specific helpers live in tests/helpers_<part>.py."""

from __future__ import annotations

import shutil
import tempfile
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


@pytest.fixture(scope="session")
def pg_server() -> Iterator[object]:
    """A PostgreSQL server for the session (tests/helpers_pg.py); started on first use."""
    from helpers_pg import PgServer

    # Not under pytest's temporary root: that is private to this user, and the server runs as its own.
    root = Path(tempfile.mkdtemp(prefix="tiermem-pg-"))
    server = PgServer(root)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: object) -> Iterator[str]:
    """A fresh, empty database on the session's server, dropped afterwards."""
    from helpers_pg import PgServer

    assert isinstance(pg_server, PgServer)
    url = pg_server.database()
    yield url
    pg_server.drop(url)
