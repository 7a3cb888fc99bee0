"""The hot store applies every revision of a fact as the `knowledge` view orders them.

Random sequences of knowledge events (decisions with revisions that share a
timestamp, as one evolver run writes them; key-value sets and removals) are
appended through `Memory.append`; then, per fact id, the `knowledge` SQL view
and the hot store must agree on status and content.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tiermem import Memory
from tiermem.eventlog import EventLog

STAMPS = ("2026-03-01T10:00:00.000Z", "2026-03-01T10:00:00.000Z", "2026-03-02T09:00:00.000Z")
DECISIONS = (
    ("created", "active"),
    ("merged", "active"),
    ("superseded", "active"),
    ("deactivated", "inactive"),
    ("archived", "archived"),
    ("approved", "active"),
    ("approved", "inactive"),
    ("rejected", "rejected"),
    ("pending", "pending"),
)

decided = st.fixed_dictionaries(
    {
        "kind": st.just("decided"),
        "fact": st.sampled_from(["fact:a", "fact:b", "fact:c"]),
        "decision": st.sampled_from(DECISIONS),
        "revision": st.integers(0, 4),
        "content": st.sampled_from(["moved to Oslo", "moved to Bergen", "likes tea"]),
    }
)
kv = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["set", "set", "removed"]),
        "key": st.sampled_from(["editor", "shell"]),
        "value": st.sampled_from(["vim", "emacs", "zsh"]),
    }
)
steps = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 10**6), decided | kv), min_size=1, max_size=12)


def _records(draw: list[tuple[int, int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Log order = time order, with ties, as the writers produce them.

    Evolver decisions are complete (they always carry the content) and their
    event ids are content hashes, so their order says nothing about recency;
    key-value writes get time-ordered ids from the runtime.
    """
    out: list[dict[str, Any]] = []
    for n, (stamp, salt, step) in enumerate(sorted(draw, key=lambda s: STAMPS[s[0]])):
        base = {"agent_id": "ada", "ts": STAMPS[stamp], "event_id": f"ev-{salt:07d}-{n:02d}"}
        if step["kind"] == "decided":
            decision, status = step["decision"]
            record = {
                **base,
                "type": "knowledge_decided",
                "fact_id": step["fact"],
                "decision": decision,
                "status": status,
                "revision": step["revision"],
                "decided_by": "evolver",
                "content": step["content"],
            }
        elif step["kind"] == "set":
            base["event_id"] = f"kv-{n:02d}"
            record = {**base, "type": "fact_set", "key": step["key"], "value": step["value"]}
        else:
            base["event_id"] = f"kv-{n:02d}"
            record = {**base, "type": "fact_removed", "key": step["key"]}
        out.append(record)
    return out


def _hot_view(row: dict[str, Any]) -> tuple[str, str]:
    """A hot-store row as the view states it (a KV fact reads `key: value`, a removal `inactive`)."""
    status = "inactive" if row["status"] == "removed" else row["status"]
    content = f"{row['key']}: {row['content']}" if row["kind"] == "kv" else row["content"]
    return status, content


def _write_internal(mem: Memory, records: list[dict[str, Any]]) -> None:
    """Decisions and KV writes are internal events (the evolver's, the fact tools'): callers
    cannot send them through `Memory.append`, so the test writes them as those writers do."""
    with EventLog(mem.settings) as log:
        for record in records:
            log.append(record)
    mem.refresh()


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps)
def test_knowledge_view_and_hot_store_agree_per_fact(draw: list[tuple[int, int, dict[str, Any]]]) -> None:
    records = _records(draw)
    with tempfile.TemporaryDirectory() as tmp, Memory.open(Path(tmp) / "data", env={}) as mem:
        _write_internal(mem, records)
        view = {
            r["fact_id"]: (r["status"], r["content"])
            for r in mem.sql("SELECT fact_id, status, content FROM knowledge").to_pylist()
        }
        agent = mem.agent("ada")
        hot = {
            str(r["fact_id"]): dict(r)
            for r in agent.runtime.conn.execute("SELECT fact_id, kind, key, status, content FROM facts")
        }
        for fact_id, (status, content) in view.items():
            assert fact_id in hot, (fact_id, records)
            hot_status, hot_content = _hot_view(hot[fact_id])
            assert hot_status == status, (fact_id, records)
            if content is not None:  # None: a key removed that was never set, it has no words
                assert hot_content == content, (fact_id, records)
        for fact_id, row in hot.items():
            if fact_id not in view:
                # What the view leaves out (latest decision pending/rejected) is never read as active.
                assert row["status"] != "active", (fact_id, records)
        # And what the runtime reads as active is exactly what the view says is active.
        listed = {r["fact_id"] for r in agent.runtime.store.list_facts(agent.runtime.principal, limit=100)}
        assert listed == {f for f, (s, _) in view.items() if s == "active"}


def test_a_fact_filed_under_a_scope_without_its_owner_stays_visible_to_its_agent(tmp_path: Path) -> None:
    with Memory.open(tmp_path / "data", env={}) as mem:
        for n, scope in enumerate(("agent_type", "project")):
            _write_internal(
                mem,
                [
                    {
                        "type": "knowledge_decided",
                        "agent_id": "loner",
                        "fact_id": f"fact:loner-{n}",
                        "decision": "created",
                        "status": "active",
                        "scope": scope,
                        "content": f"Loner learned thing {n}",
                        "decided_by": "auto",
                    }
                ],
            )
        agent = mem.agent("loner")
        ids = {f.fact_id for f in agent.facts.list()}
        assert {"fact:loner-0", "fact:loner-1"} <= ids
        knowledge = agent.context().section("knowledge")
        assert knowledge is not None and {"fact:loner-0", "fact:loner-1"} <= set(knowledge.item_ids)
        # Another agent does not see them: they are the loner's own.
        assert not {"fact:loner-0", "fact:loner-1"} & {f.fact_id for f in mem.agent("other").facts.list()}
