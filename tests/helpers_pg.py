"""A real PostgreSQL server for the tests: pgserver's bundled binaries (with pgvector), one per session.

`PgServer.database()` makes a fresh database (C collation, UTF-8) per test and
returns its URL; `drop` removes it. The server runs in a temporary directory
and is stopped when the session ends; if it cannot start, the tests that use
it fail (they are never skipped).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pgserver  # type: ignore[import-untyped]
import psycopg
from psycopg import sql


class PgServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.server: Any = pgserver.get_server(root, cleanup_mode="stop")
        self.admin_url: str = self.server.get_uri()
        self._names = itertools.count(1)

    def url(self, database: str, user: str = "postgres") -> str:
        return f"postgresql://{quote(user)}:@/{database}?host={quote(str(self.root))}"

    def database(self) -> str:
        name = f"tm_test_{next(self._names)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE template0 ENCODING 'UTF8' LOCALE 'C'").format(
                    sql.Identifier(name)
                )
            )
        return self.url(name)

    def drop(self, url: str) -> None:
        name = url.split("/")[3].split("?")[0]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def role(self, name: str) -> None:
        """A login role without any right of its own (what it may read comes from grants and policies)."""
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone()
            if exists is None:
                conn.execute(
                    sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER NOBYPASSRLS").format(sql.Identifier(name))
                )

    def stop(self) -> None:
        self.server.cleanup()
