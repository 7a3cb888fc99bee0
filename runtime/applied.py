"""Log lines this process has already applied to the hot store, which its projector may skip.

A server records turns and applies them to the hot store itself, at once, so
that a read after the answer sees them; its projector thread then reads the
same lines from the log. Applying them again changes nothing (application is
idempotent) but costs the apply and the store's write lock, against the
server's own updates. So the server notes here what it applied, and the
projector passes over those lines instead.

Skipping must never lose a line, so a mark is strict:

- it is noted only after the transaction that applied the line committed;
- it names the line by segment, line number and event id, and the projector
  skips a line only when the id it reads there is that id;
- it names the store it was applied to (the SQLite file's device and inode,
  the same before and after the connection was opened): after a rebuild
  replaced the file, a mark for the old one is dropped, not used;
- it lives in this process's memory only: after a crash nothing is skipped,
  and the projector, whose position commits with its rows, applies again
  whatever it had not passed.

A mark the projector does not meet (the line was already behind its position,
or the store differs) is simply dropped: the cost of a lost mark is one
redundant apply, never a missing row. Stores other than a local SQLite file
have no identity here and nothing is skipped for them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import TypeAlias

from tiermem.runtime.store import HotStore, open_store

from tiermem.settings import Settings

StoreIdentity: TypeAlias = tuple[int, int]
# Marks kept at most (about 150 bytes each): past that, while no projector pass
# comes to meet them, they are all dropped, which costs redundant applies only.
MAX_MARKS = 100_000


def _file_identity(settings: Settings) -> StoreIdentity | None:
    if settings.hot_url:
        return None
    try:
        st = os.stat(settings.hot_db)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def open_identified_store(settings: Settings) -> tuple[HotStore, StoreIdentity | None]:
    """The hot store and the identity of the file its connection opened (None: unknown)."""
    before = _file_identity(settings)
    store = open_store(settings)
    after = _file_identity(settings)
    # A file created or replaced while the connection opened: which one it holds is not known.
    return store, (after if before is not None and before == after else None)


class AppliedLines:
    """Marks `(store, segment) -> {line number (1-based): event id}`, shared by threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._marks: dict[tuple[StoreIdentity, str], dict[int, str]] = {}
        self.noted = 0  # lines noted as applied, all time
        self.skipped = 0  # lines the projector passed over thanks to a mark, all time
        self._held = 0  # marks held now

    def note(
        self, store: StoreIdentity | None, positions: Iterable[tuple[str, int]], event_ids: Iterable[str]
    ) -> None:
        """After the commit that applied them: the events `event_ids` at `positions`
        ((segment, 0-based line), in the same order) are in the store `store`."""
        if store is None:
            return
        with self._lock:
            for (segment, line), event_id in zip(positions, event_ids, strict=True):
                self._marks.setdefault((store, segment), {})[line + 1] = event_id
                self.noted += 1
                self._held += 1
            if self._held > MAX_MARKS:
                self._marks.clear()
                self._held = 0

    def take(self, store: StoreIdentity | None, segment: str) -> dict[int, str]:
        """The marks of one segment for this store, removed; marks for other stores are dropped."""
        with self._lock:
            stale = [key for key in self._marks if key[0] != store]
            for key in stale:
                self._held -= len(self._marks.pop(key))
            if store is None:
                return {}
            marks = self._marks.pop((store, segment), {})
            self._held -= len(marks)
            return marks

    def count_skipped(self, n: int) -> None:
        with self._lock:
            self.skipped += n

    def pending(self) -> int:
        """Marks not yet met by the projector."""
        with self._lock:
            return self._held
