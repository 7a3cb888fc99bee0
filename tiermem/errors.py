"""Exception classes shared by every part.

The library raises these; the CLI turns them into one-line messages and exit
codes at the edge (tiermem.app.cli), so library callers get structured errors.
Exit codes: 2 for a usage problem (bad arguments, bad config, a refused query
or record), 1 for a failure, 3 for a partial result (`ingest` with rejects).
"""

from __future__ import annotations

import errno

# errno -> what it means for the person reading the message ("Errno 30" says little).
_OS_REASONS = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENOENT: "no such file or directory",
    errno.ENOTDIR: "a path component is a file, not a directory",
    errno.EISDIR: "is a directory",
    errno.EIO: "input/output error",
}


def os_reason(exc: BaseException) -> str:
    """What an OS error (or a library's I/O error) means, in a few words."""
    if isinstance(exc, OSError):
        return _OS_REASONS.get(exc.errno or 0) or exc.strerror or type(exc).__name__
    text = " ".join(str(exc).split())
    if "No space left" in text or "disk is full" in text or "database or disk is full" in text:
        return "disk full"
    if "Read-only file system" in text or "readonly database" in text:
        return "read-only file system"
    return text or type(exc).__name__


class TiermemError(Exception):
    """Base class: every error tiermem raises on purpose."""

    exit_code = 1


class ConfigError(TiermemError):
    """Settings could not be resolved (bad TOML, bad env value, bad flag)."""

    exit_code = 2


class ValidationError(TiermemError):
    """A record failed validation; `field` names the offending field."""

    exit_code = 2

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class EventIdConflictError(ValidationError):
    """An `event_id` the log already holds for another record: this one was not stored.

    A record sent again under its own id is a duplicate, answered as stored; a
    different record under a taken id is refused with this error. The message
    is the same whoever's record holds the id, so it tells a caller no more
    than that the id is taken.
    """

    def __init__(self) -> None:
        super().__init__("event_id", "already used by another record; this one was not stored (use a new id)")


class LogCorruptionError(TiermemError):
    """The log on disk is not what the manifest and segments promise."""


class ReadOnlyQueryError(TiermemError):
    """An analyst query tried to do more than read the memory; `tiermem sql` is read-only."""

    exit_code = 2


class QueryError(TiermemError):
    """An analyst query failed while running (bad SQL, timeout, memory limit)."""

    exit_code = 1


class InputError(TiermemError):
    """An input file cannot be used: missing, a directory, unreadable."""

    exit_code = 1


class StorageError(TiermemError):
    """The data root cannot be written (read-only, full disk, not a directory).

    The message says what happened and what state the log was left in.
    """

    exit_code = 1


class DataRootNotFoundError(TiermemError):
    """A command that only reads memory was pointed at a data root that does not exist."""

    exit_code = 1


class NotFoundError(TiermemError):
    """A named agent, event, proposal or fact does not exist."""

    exit_code = 1


class LimitExceededError(TiermemError):
    """A hard limit was hit (for example the 1,000-character L0 identity)."""

    exit_code = 2


class PermissionDeniedError(TiermemError):
    """An agent tried to write memory it does not own (a wider scope, another agent's fact)."""

    exit_code = 2


class AlreadyRunningError(TiermemError):
    """Another process holds an exclusive role (scheduler, job) on this data root."""

    exit_code = 1


class TransientError(TiermemError):
    """Worth retrying: network hiccup, rate limit, overloaded model, busy lock."""


class TerminalError(TiermemError):
    """Not worth retrying: bad credentials, bad request, schema mismatch."""
