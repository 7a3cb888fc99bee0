"""The projector passes over the turns the server applied itself, and never over any other.

A line is passed over only with a mark noted after its apply committed, naming
its segment, line, event id and the store file; every turn must reach the hot
store exactly once whatever marks there are.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tiermem.runtime.applied import AppliedLines, open_identified_store
from tiermem.runtime.memory import TurnToRecord, record_turns
from tiermem.runtime.projector import content_digest, project, project_if_free, rebuild
from tiermem.runtime.sqlite_store import SQLiteHotStore

from tiermem.app.api import Memory
from tiermem.app.server.service import MemoryService
from tiermem.settings import Settings

AGENT = "skip-bot"


def _hot_turns(settings: Settings) -> list[tuple[str, str]]:
    store, _ = open_identified_store(settings)
    try:
        assert isinstance(store, SQLiteHotStore)
        rows = store.conn.execute(
            "SELECT event_id, user_message FROM wm_items WHERE kind = 'interaction' ORDER BY event_id"
        )
        return [(str(r[0]), str(r[1])) for r in rows]
    finally:
        store.close()


def _record(settings: Settings, n: int, prefix: str, applied: AppliedLines | None, apply_some: bool) -> None:
    """Record n turns in one batch; apply (and mark) every other one when `apply_some`."""
    with Memory(settings) as mem:
        memory = mem.agent(AGENT).runtime
        project(settings)  # the agent's own setup events are behind the projector now

        def apply(events: list[dict[str, Any]], positions: list[tuple[str, int]]) -> None:
            if not apply_some:
                return
            store, identity = open_identified_store(settings)
            try:
                store.apply_now(events[::2])
            finally:
                store.close()
            if applied is not None:
                applied.note(identity, positions[::2], [str(e["event_id"]) for e in events[::2]])

        turns = [
            TurnToRecord(
                memory, f"{prefix} message {i}", "ok", {"user": "alice", "event_id": f"{prefix}-{i:03d}"}
            )
            for i in range(n)
        ]
        record_turns(turns, apply=apply)


def test_marked_turns_are_passed_over_and_unmarked_ones_projected(settings: Settings) -> None:
    applied = AppliedLines()
    _record(settings, 20, "a", applied, apply_some=True)
    assert applied.pending() == 10
    info = project_if_free(settings, applied=applied)
    assert info is not None and applied.skipped == 10 and applied.pending() == 0
    assert _hot_turns(settings) == [(f"a-{i:03d}", f"a message {i}") for i in range(20)]


def test_turns_another_process_applied_are_passed_over_without_marks(settings: Settings) -> None:
    # Another server process recorded 20 turns and applied every other one itself; its marks
    # are its own, so this projector has none: it applies only the 10 the store lacks, and the
    # store ends as a rebuild from the log makes it.
    _record(settings, 20, "o", None, apply_some=True)
    info = project_if_free(settings, applied=AppliedLines())
    assert info is not None and info.by_type.get("interaction") == 10
    assert _hot_turns(settings) == [(f"o-{i:03d}", f"o message {i}") for i in range(20)]
    live = content_digest(settings)
    assert rebuild(settings).digest == live


def test_a_mark_with_another_event_id_or_store_is_not_trusted(settings: Settings) -> None:
    applied = AppliedLines()
    _record(settings, 4, "b", None, apply_some=False)  # recorded, applied nowhere
    store, identity = open_identified_store(settings)
    store.close()
    assert identity is not None
    # A mark naming another id at the line of b-000, and marks for another store file.
    applied.note(identity, [("interactions/x", 0)], ["b-000"])
    segment = _segment_of(settings, "b-000")
    applied.note(identity, [(segment, 0)], ["not-b-000"])
    applied.note((identity[0], identity[1] + 1), [(segment, 1)], ["b-001"])
    project_if_free(settings, applied=applied)
    assert applied.skipped == 0
    assert [eid for eid, _ in _hot_turns(settings)] == [f"b-{i:03d}" for i in range(4)]


def _segment_of(settings: Settings, event_id: str) -> str:
    for path in sorted((settings.log_dir / "interactions").rglob("*.jsonl")):
        if event_id.encode() in path.read_bytes():
            rel = path.relative_to(settings.log_dir).with_suffix("")
            return str(rel)
    raise AssertionError(f"{event_id} not in the log")


@pytest.mark.parametrize(("update_fails", "warmed"), [(False, False), (True, False), (False, True)])
def test_the_servers_turns_reach_the_hot_store_once_whether_its_update_ran_or_not(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, update_fails: bool, warmed: bool
) -> None:
    # `warmed`: opened as the server's start-up opens it, on a data root with no hot store yet
    # (the update thread's store must still know which file it writes, or nothing is marked).
    if update_fails:  # the server's own update of the hot store fails: nothing may be passed over

        def broken(self: SQLiteHotStore, events: Any) -> Any:
            raise OSError("disk full")

        monkeypatch.setattr(SQLiteHotStore, "apply_now", broken)

    async def serve() -> tuple[int, int]:
        svc = MemoryService(settings)
        try:
            if warmed:
                assert not settings.hot_db.exists()
                await svc.warm()
            projector = await svc.run(lambda: svc.memory.projector)
            assert projector is not None
            projector.start()
            await svc.run(svc.agent, AGENT)
            await asyncio.to_thread(projector.wait)  # the agent's setup is projected
            await asyncio.gather(
                *(
                    svc.record_turn(AGENT, "alice", f"served {i}", "ok", {"event_id": f"s-{i:03d}"})
                    for i in range(30)
                )
            )
            await svc.run(lambda: None)  # every queued update has run (or failed)
            await asyncio.to_thread(projector.wait)
            return projector.applied.noted, projector.applied.skipped
        finally:
            svc.close()

    noted, skipped = asyncio.run(serve())
    assert (noted, skipped) == ((0, 0) if update_fails else (30, 30))
    assert _hot_turns(settings) == [(f"s-{i:03d}", f"served {i}") for i in range(30)]


def test_a_store_file_created_by_the_opening_itself_has_no_identity(settings: Settings) -> None:
    # Which file the connection holds is known only when the same file was there before and after.
    store, identity = open_identified_store(settings)
    store.close()
    assert identity is None
    store, identity = open_identified_store(settings)
    store.close()
    assert identity is not None
