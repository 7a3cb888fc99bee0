"""API keys for `tiermem serve`, and the one function that decides what a key may reach.

A key is a high-entropy random token shown once when created; only its
SHA-256 is stored (`<data>/server/keys.sqlite`), so a copy of the data root
does not leak usable keys. Because the token carries 256 bits of randomness a
plain (unsalted) hash is enough: nobody can guess a token from its hash.
Lookups go by hash and the stored hash is compared again in constant time.

Kinds of key:
- operator: every agent, and the operator-only endpoints (SQL, forget,
  exports of a user across agents, wide-scope fact writes);
- agent: one agent only; optionally bound to one user of that agent, in which
  case every read and write it makes is for that user.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiermem import heldio
from tiermem.errors import NotFoundError, TiermemError, ValidationError
from tiermem.ids import format_ts, utcnow
from tiermem.settings import Settings

TOKEN_PREFIX = "tmk_"
MAX_REMEMBERED_KEYS = 10_000
SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
    key_id TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,          -- operator | agent
    agent_id TEXT,
    user TEXT,
    label TEXT,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);
"""


class AuthError(TiermemError):
    """The request carries no key, or one that is unknown or revoked (HTTP 401)."""


class ForbiddenError(TiermemError):
    """The key is valid but may not reach this agent, user or endpoint (HTTP 403)."""


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's kind and what it is bound to."""

    key_id: str
    kind: str  # operator | agent
    agent_id: str | None = None
    user: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.kind == "operator"


# A directory descriptor for `stat_at`, which ignores it for an absolute path (as `fstatat` does).
ANY_FD = -100


def keys_path(settings: Settings) -> Path:
    return settings.data_dir / "server" / "keys.sqlite"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class KeyStore:
    """The small SQLite file of hashed keys (opened per call; keys change rarely).

    `verify` runs on every request, so it remembers the keys it found live, for as
    long as the file's contents stay the same: SQLite counts every committed change
    in the file's header, and reading that counter (a `pread` of a few bytes) is
    what each request costs; a key revoked or created by another process (the CLI)
    changes it, and the next request looks the key up again.
    """

    def __init__(self, settings: Settings) -> None:
        self._path = keys_path(settings)
        self._abspath = os.path.abspath(self._path)
        self._ready = False  # schema created (once per store object: verify runs per request)
        self._lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._header_fd: int | None = None
        self._header_ino = 0
        self._live: dict[str, Principal] = {}  # hash -> principal, valid for `_live_version`
        self._live_version: tuple[int, int, bytes] | None = None

    def close(self) -> None:
        with self._lock:
            self._drop_handles()

    def _drop_handles(self) -> None:
        """Close the reading connection and the header descriptor (both reopen on next use)."""
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._header_fd is not None:
            os.close(self._header_fd)
            self._header_fd = None

    def _version(self) -> tuple[int, int, bytes] | None:
        """(inode, size, SQLite's file change counter) of the key file as it is now; None when
        the counter cannot be relied on (a WAL-mode file does not count its changes there)."""
        # Both system calls keep the interpreter lock: on the event loop, one that lets go of it
        # while the server's other threads run waits longer to get it back than it takes.
        st = heldio.stat_at(ANY_FD, self._abspath)  # an absolute path: the folder's fd is not used
        if st is None or self._header_ino != st[0]:  # first use, or the file removed or replaced
            # The open connection and descriptor would go on reading the old file.
            self._drop_handles()
            if st is None:
                self._ready = False  # the lookup creates an empty key file, as a fresh store would
                return None
            self._header_fd = os.open(self._path, os.O_RDONLY)
            self._header_ino = st[0]
        assert self._header_fd is not None
        header = heldio.pread_now(self._header_fd, 28, 0)
        if len(header) < 28 or header[18] != 1 or header[19] != 1:  # not the rollback-journal format
            return None
        return (st[0], st[1], header[24:28])

    def _connect(self) -> sqlite3.Connection:
        if not self._ready:
            self._path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self._path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        if not self._ready:
            conn.executescript(SCHEMA)
            self._ready = True
        return conn

    def create(
        self, *, operator: bool, agent_id: str | None, user: str | None = None, label: str | None = None
    ) -> dict[str, Any]:
        """A new key: returns its id and the token (the only time the token is seen)."""
        if operator == bool(agent_id):
            raise ValidationError("kind", "give exactly one of --operator, --agent AGENT")
        if user and operator:
            raise ValidationError("user", "only an agent key can be bound to a user")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        digest = hash_token(token)
        key_id = "key_" + digest[:12]
        kind = "operator" if operator else "agent"
        conn = self._connect()
        try:
            conn.execute(
                "INSERT INTO keys (key_id, hash, kind, agent_id, user, label, created_at) VALUES (?,?,?,?,?,?,?)",
                (key_id, digest, kind, agent_id, user, label, format_ts(utcnow())),
            )
        finally:
            conn.close()
        return {"key": token, "key_id": key_id, "kind": kind, "agent_id": agent_id, "user": user}

    def list(self) -> list[dict[str, Any]]:
        conn = self._connect()
        try:
            rows = conn.execute(
                "SELECT key_id, kind, agent_id, user, label, created_at, revoked_at FROM keys ORDER BY created_at, key_id"
            ).fetchall()
        finally:
            conn.close()
        return [dict(r) for r in rows]

    def revoke(self, key_id: str) -> dict[str, Any]:
        conn = self._connect()
        try:
            cur = conn.execute(
                "UPDATE keys SET revoked_at=? WHERE key_id=? AND revoked_at IS NULL",
                (format_ts(utcnow()), key_id),
            )
            if cur.rowcount == 0:
                known = conn.execute("SELECT 1 FROM keys WHERE key_id=?", (key_id,)).fetchone()
                if known is None:
                    raise NotFoundError(f"no key {key_id!r} (see `tiermem keys list`)")
        finally:
            conn.close()
        return {"key_id": key_id, "revoked": True}

    def verify(self, token: str) -> Principal | None:
        """The principal of a live key, or None for an unknown or revoked one."""
        if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
            return None
        digest = hash_token(token)
        with self._lock:
            version = self._version()
            if version is None or version != self._live_version:
                self._live.clear()
                self._live_version = version
            known = self._live.get(digest)
            if known is not None:
                return known
            if self._reader is None:
                self._reader = self._connect()
            row = self._reader.execute(
                "SELECT key_id, hash, kind, agent_id, user, revoked_at FROM keys WHERE hash=?", (digest,)
            ).fetchone()
            if row is None or row["revoked_at"] is not None or not hmac.compare_digest(row["hash"], digest):
                return None
            principal = Principal(
                key_id=row["key_id"], kind=row["kind"], agent_id=row["agent_id"], user=row["user"]
            )
            # Remembered under the version read before the lookup: a change in between shows
            # as a new version on the next request, which looks the key up again.
            if version is not None and len(self._live) < MAX_REMEMBERED_KEYS:
                self._live[digest] = principal
            return principal


# Fact scopes an agent key may write; wider ones are the operator's.
AGENT_WRITABLE_SCOPES = frozenset({"agent", "project"})


def authorize(
    principal: Principal | None,
    *,
    agent_id: str | None = None,
    user: str | None = None,
    operator_only: bool = False,
    whole_agent: bool = False,
    scope: str | None = None,
) -> str | None:
    """The one authorisation decision of the server; returns the user the call acts for.

    No key → AuthError (401). An agent key reaching another agent, an
    operator-only endpoint, a wide fact scope, or (when bound to a user)
    another user or a call on the whole agent (`whole_agent`: its review
    queue, its export, its identity and facts writes, which span every user)
    → ForbiddenError (403). A user-bound key that names no user acts for its
    own user, so its reads are always that user's.
    """
    if principal is None:
        raise AuthError("missing or invalid API key (send `Authorization: Bearer <key>`)")
    if principal.is_operator:
        return user
    if operator_only:
        raise ForbiddenError("this endpoint needs an operator key")
    if agent_id is None or agent_id != principal.agent_id:
        raise ForbiddenError(f"this key reaches only agent {principal.agent_id!r}")
    if scope is not None and scope not in AGENT_WRITABLE_SCOPES:
        raise ForbiddenError(f"an agent key may not write the {scope!r} scope (operator only)")
    if principal.user is not None:
        if whole_agent:
            raise ForbiddenError(f"this key reaches only user {principal.user!r}, not the whole agent")
        if user is not None and user != principal.user:
            raise ForbiddenError(f"this key reaches only user {principal.user!r} of agent {agent_id!r}")
        return principal.user
    return user
