"""The hot-store contract: every backend of `tiermem.runtime.store.HotStore` passes this suite.

Parametrised over the backends: the embedded SQLite store and the PostgreSQL
one (on a real server the session starts: tests/helpers_pg.py). The events are generated
(seeded, so a failure reproduces); a small reference model computes from the
same events who owns each row, and every read is checked against
`tiermem.runtime.visibility`'s predicates over that model, row by row: the
store must return exactly what the principal may see, no more, no less.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tiermem.runtime.levels import filter_by_level
from tiermem.runtime.pg_store import PostgresHotStore
from tiermem.runtime.sqlite_store import SQLiteHotStore
from tiermem.runtime.store import HotStore, ProjectionInfo
from tiermem.runtime.visibility import (
    KV_ORDER,
    Principal,
    can_read_fact,
    can_read_item,
    owner_key,
    owner_users,
)

from tiermem.events import validate
from tiermem.ids import parse_ts

BackendFactory = Callable[[pytest.FixtureRequest, Path], HotStore]


def _postgres(request: pytest.FixtureRequest, root: Path) -> HotStore:
    # A fresh database on the session's server for every store, dropped after the test.
    server = request.getfixturevalue("pg_server")
    url = server.database()
    request.addfinalizer(lambda: server.drop(url))
    return PostgresHotStore.connect(url)


BACKENDS: list[tuple[str, BackendFactory]] = [
    ("sqlite", lambda request, root: SQLiteHotStore.connect(root / "hot.sqlite")),
    ("postgres", _postgres),
]

AGENTS = {"a1": ("support", "p1"), "a2": ("support", "p1"), "a3": ("coding", "p2")}
USERS = [None, "alice", "bob", "carol"]
SCOPES = ["agent", "project", "agent_type", "system", "override"]
WORD = "zebrafinch"  # in every episode, so a search for it lists them all


@pytest.fixture(params=BACKENDS, ids=[name for name, _ in BACKENDS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HotStore]:
    factory: BackendFactory = request.param[1]
    s = factory(request, tmp_path)
    yield s
    s.close()


def _ts(i: int) -> str:
    return f"2026-03-01T{10 + i // 3600:02d}:{(i // 60) % 60:02d}:{i % 60:02d}.000Z"


class World:
    """Generated events plus the reference model of every row's owner."""

    def __init__(self, seed: int) -> None:
        rng = random.Random(seed)
        self.events: list[dict[str, Any]] = []
        self.turns: dict[str, dict[str, Any]] = {}  # event id -> {agent, owner, level}
        self.facts: dict[str, dict[str, Any]] = {}
        self.episodes: dict[str, dict[str, Any]] = {}
        n = 0
        for _ in range(40):
            agent, user = rng.choice(list(AGENTS)), rng.choice(USERS)
            level = rng.choice(["global", "global", "project", "task"])
            ev = self._add(
                n,
                {
                    "type": "interaction",
                    "agent_id": agent,
                    "user_message": f"turn {n}",
                    "agent_response": "ok",
                    "memory_level": level,
                    **({"user": user} if user else {}),
                },
            )
            self.turns[ev["event_id"]] = {
                "agent": agent,
                "owner": owner_key([user]),
                "level": level,
                "ts": ev["ts"],
            }
            n += 1
        turn_ids = list(self.turns)
        for _ in range(25):
            agent = rng.choice(list(AGENTS))
            sources = rng.sample([t for t in turn_ids if self.turns[t]["agent"] == agent] or turn_ids, k=1)
            participants = sorted({rng.choice(["alice", "bob"])} if rng.random() < 0.4 else set())
            ev = self._add(
                n,
                {
                    "type": "episode",
                    "agent_id": agent,
                    "name": f"episode {n}",
                    "summary": f"{WORD} talk {n}",
                    "start_ts": _ts(n),
                    "end_ts": _ts(n),
                    "importance": 5,
                    "participants": participants,
                    "source_event_ids": sources,
                    "key_quotes": [{"text": f"{WORD} quote {n}", "event_id": sources[0]}],
                },
            )
            owners = set(participants) | {u for s in sources for u in owner_users(self.turns[s]["owner"])}
            self.episodes[ev["event_id"]] = {"agent": agent, "owner": owner_key(owners)}
            n += 1
        for i in range(60):
            agent = rng.choice(list(AGENTS))
            agent_type, project = AGENTS[agent]
            scope = rng.choice(SCOPES)
            participant = rng.choice(USERS) if rng.random() < 0.3 else None
            sources = [rng.choice(turn_ids)] if rng.random() < 0.4 else []
            key = f"k{i % 7}"
            record: dict[str, Any] = {
                "type": "fact_set",
                "agent_id": agent,
                "key": key,
                "value": f"{WORD} value {i}",
                "fact_id": f"kv:{i}",
                "source_event_ids": sources,
            }
            if scope != "agent":
                record["scope"] = scope
            if scope in ("agent_type", "override"):
                record["agent_type"] = agent_type
            if scope in ("project", "override"):
                record["project_id"] = project
            if participant:
                record["participant"] = participant
            ev = self._add(n, record)
            owners = {participant} | {u for s in sources for u in owner_users(self.turns[s]["owner"])}
            self.facts[f"kv:{i}"] = {
                "fact_id": f"kv:{i}",
                "agent_id": agent,
                "scope": scope,
                "agent_type": record.get("agent_type"),
                "project_id": record.get("project_id"),
                "key": key,
                "owner": owner_key(owners),
                "ts": ev["ts"],
            }
            n += 1
        for user in ("alice", "bob"):
            self._add(
                n, {"type": "relationship_updated", "agent_id": "a1", "participant": user, "summary": user}
            )
            n += 1

    def _add(self, n: int, record: dict[str, Any]) -> dict[str, Any]:
        ev = validate({**record, "ts": _ts(n), "event_id": f"e{n:04d}"})
        self.events.append(ev)
        return ev

    def principals(self) -> list[Principal]:
        out = []
        for agent, (agent_type, project) in AGENTS.items():
            for user in USERS:
                out.append(Principal(agent, user, agent_type, project))
            out.append(Principal(agent, "alice"))  # an agent opened without its scopes
        return out

    def visible_items(self, p: Principal) -> list[str]:
        return sorted(t for t, m in self.turns.items() if can_read_item(p, m["agent"], m["owner"]))

    def visible_facts(self, p: Principal) -> set[str]:
        return {f for f, row in self.facts.items() if can_read_fact(p, row)}

    def kv_expected(self, p: Principal, key: str) -> str | None:
        rank = {s: i for i, s in enumerate(KV_ORDER)}
        rows = [self.facts[f] for f in self.visible_facts(p) if self.facts[f]["key"] == key]
        if not rows:
            return None
        rows.sort(key=lambda r: r["fact_id"])
        best = min(rows, key=lambda r: (rank[r["scope"]], r["owner"] is None, -parse_ts(r["ts"]).timestamp()))
        return str(best["fact_id"])


def _load(store: HotStore, world: World) -> None:
    # Turns before what is derived from them, as the projector applies streams.
    order = {"interaction": 0, "episode": 1, "fact_set": 2, "relationship_updated": 3}
    events = sorted(world.events, key=lambda e: order[e["type"]])
    store.apply_batch(events, {"position": "end"}, ProjectionInfo())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_read_returns_exactly_what_the_principal_may_see(store: HotStore, seed: int) -> None:
    world = World(seed)
    _load(store, world)
    assert store.get_meta("position") == "end"
    for p in world.principals():
        assert [i.item_id for i in store.history(p)] == world.visible_items(p), p
        facts = {r["fact_id"] for r in store.list_facts(p, limit=10_000)}
        assert facts == world.visible_facts(p), p
        for fact_id in world.facts:
            assert (store.visible_fact(p, fact_id) is not None) == (fact_id in world.visible_facts(p))
        for key in {f["key"] for f in world.facts.values()}:
            got = store.kv_lookup(p, key)
            assert (got["fact_id"] if got else None) == world.kv_expected(p, key), (p, key)
        episodes = {e["episode_id"] for e in store.search_episodes(p, WORD, limit=1000)}
        expected = {e for e, m in world.episodes.items() if can_read_item(p, m["agent"], m["owner"])}
        assert episodes == expected, p
        searched = {
            f.fact_id for f in store.search_facts(p, f"{WORD} value", limit=1000, now=parse_ts(_ts(0)))
        }
        assert searched == world.visible_facts(p), p
        rel = store.relationship(p)
        assert (rel is not None) == (p.agent_id == "a1" and p.user in ("alice", "bob"))
        assert rel is None or rel["participant"] == p.user


def test_recent_items_follow_the_level_filter_over_the_visible_history(store: HotStore) -> None:
    world = World(7)
    _load(store, world)
    for p in world.principals():
        history = [{"id": t, "memory_level": world.turns[t]["level"]} for t in world.visible_items(p)]
        history.sort(key=lambda h: (world.turns[h["id"]]["ts"], h["id"]))
        for level in ("global", "project", "task"):
            expected = [h["id"] for h in filter_by_level(history, level)][-4:]
            assert [i.item_id for i in store.recent(p, level, 4)] == expected, (p, level)
        newest = history[-1]["memory_level"] if history else "global"
        assert store.current_level(p) == newest


def test_applying_twice_or_in_another_store_gives_the_same_digest(
    store: HotStore, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    world = World(11)
    _load(store, world)
    digest, counts = store.digest(), store.counts()
    store.apply_now(world.events)  # the projector meeting what the runtime applied already
    assert store.digest() == digest and store.counts() == counts
    for name, factory in BACKENDS:
        other_root = tmp_path / f"other-{name}"
        other_root.mkdir()
        other = factory(request, other_root)
        try:
            _load(other, world)
            if type(other) is type(store):
                assert other.digest() == digest
        finally:
            other.close()


def test_erasing_a_user_removes_every_row_they_own_and_refuses_them_later(store: HotStore) -> None:
    world = World(5)
    _load(store, world)
    secret = {"type": "interaction", "agent_id": "a1", "user": "alice", "agent_response": "noted"}
    store.apply_now([validate({**secret, "user_message": "my plumquartz code", "ts": _ts(8000)})])
    alice = Principal("a1", "alice", *AGENTS["a1"])
    assert any(world.turns[t]["owner"] == "alice" for t in world.visible_items(alice))
    info = store.apply_now(
        [validate({"type": "erasure", "target_kind": "user", "target": "alice", "ts": _ts(9000)})]
    )
    assert info.erasures == 1
    for p in world.principals():
        for item in store.history(p):
            assert "alice" not in owner_users(world.turns[item.item_id]["owner"])
            assert item.user != "alice"
        for row in store.list_facts(p, limit=10_000):
            assert "alice" not in owner_users(row.get("owner"))
        for ep in store.search_episodes(p, WORD, limit=1000):
            assert "alice" not in owner_users(world.episodes[ep["episode_id"]]["owner"])
        assert store.relationship(p) is None or p.user != "alice"
    # A later turn of hers is refused; bob's is not.
    later = [
        validate(
            {
                "type": "interaction",
                "agent_id": "a1",
                "user": u,
                "user_message": f"back {u}",
                "agent_response": "hi",
            }
        )
        for u in ("alice", "bob")
    ]
    assert store.apply_now(later).refused == 1
    # Nothing of hers stays in the store's files (free pages, indexes, the WAL): only her id, in the tombstone.
    assert store.scrub() is True
    for path in store.files():
        data = path.read_bytes()
        assert b"plumquartz" not in data and b"back alice" not in data


def test_latest_decision_wins_and_owners_only_grow(store: HotStore) -> None:
    base = {"type": "knowledge_decided", "agent_id": "a1", "fact_id": "f1", "decision": "created"}
    store.apply_now(
        [
            validate({**base, "content": "old", "status": "active", "ts": _ts(1), "participant": "bob"}),
            validate({**base, "content": "new", "status": "active", "ts": _ts(3), "decision": "merged"}),
            validate({**base, "content": "stale", "status": "active", "ts": _ts(2), "decision": "touched"}),
        ]
    )
    bob, carol = Principal("a1", "bob"), Principal("a1", "carol")
    row = store.visible_fact(bob, "f1")
    assert row is not None and row["content"] == "new" and row["owner"] == "bob"
    assert store.visible_fact(carol, "f1") is None and store.visible_fact(Principal("a1"), "f1") is None
    store.apply_now([validate({**base, "status": "inactive", "ts": _ts(4), "decision": "deactivated"})])
    assert store.visible_fact(bob, "f1") is None
