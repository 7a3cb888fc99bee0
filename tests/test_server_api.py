"""`tiermem serve` over a real running server: every endpoint, keys (401/403), limits, visibility."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from helpers_server import (
    AGENT,
    ALICE_CANARY,
    BOB_CANARY,
    OTHER_AGENT,
    Seeded,
    Server,
    cli_json,
    make_key,
    running_server,
    seed,
)

from tiermem.app.server.keys import KeyStore
from tiermem.settings import resolve_settings

PROBLEM = "application/problem+json"
MAX_BODY = 65_536


@dataclass
class Env:
    server: Server
    seeded: Seeded
    operator: str
    agent: str  # reaches AGENT, any user
    alice: str  # reaches AGENT, user alice only
    other: str  # reaches OTHER_AGENT


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    data_dir = tmp_path_factory.mktemp("serve") / "data"
    seeded = seed(data_dir)
    keys = dict(
        operator=make_key(data_dir, operator=True),
        agent=make_key(data_dir, agent=AGENT),
        alice=make_key(data_dir, agent=AGENT, user="alice"),
        other=make_key(data_dir, agent=OTHER_AGENT),
    )
    with running_server(data_dir, "--max-body-bytes", str(MAX_BODY)) as server:
        yield Env(server, seeded, **keys)
        assert "Traceback" not in server.log()


def assert_problem(response: object, status: int) -> dict[str, object]:
    assert response.status_code == status, response.text  # type: ignore[attr-defined]
    assert response.headers["content-type"].startswith(PROBLEM)  # type: ignore[attr-defined]
    body: dict[str, object] = response.json()  # type: ignore[attr-defined]
    assert body["status"] == status and body["detail"] and "Traceback" not in response.text  # type: ignore[attr-defined]
    return body


# ---------------------------------------------------------------- health, docs


def test_health_and_openapi_docs_need_no_key(env: Env) -> None:
    with env.server.client() as c:
        assert c.get("/healthz").json()["status"] == "ok"
        page = c.get("/docs").text
        assert "swagger" in page.lower()
        # Its JavaScript and CSS come from this server, not a CDN: the page works offline.
        assert "/docs-assets/swagger-ui-bundle.js" in page and "cdn" not in page.lower()
        asset = c.get("/docs-assets/swagger-ui-bundle.js")
        assert asset.status_code == 200 and len(asset.content) > 100_000
        assert c.get("/docs-assets/swagger-ui.css").status_code == 200
        paths = c.get("/openapi.json").json()["paths"]
    assert "/v1/agents/{agent_id}/turns" in paths and "/v1/sql" in paths and "/v1/forget" in paths


# ---------------------------------------------------------------- keys: 401 / 403


def test_no_key_wrong_key_and_revoked_key_are_401(env: Env) -> None:
    with env.server.client() as c:
        assert_problem(c.get(f"/v1/agents/{AGENT}/context"), 401)
    with env.server.client("tmk_not-a-real-key") as c:
        assert_problem(c.get(f"/v1/agents/{AGENT}/context"), 401)
    store = KeyStore(resolve_settings(data_dir=env.server.data_dir, env={}))
    created = store.create(operator=False, agent_id=AGENT)
    with env.server.client(created["key"]) as c:
        assert c.get(f"/v1/agents/{AGENT}/identity").status_code == 200
        store.revoke(created["key_id"])
        assert_problem(c.get(f"/v1/agents/{AGENT}/identity"), 401)


def test_agent_key_reaches_only_its_agent_and_no_operator_endpoint(env: Env) -> None:
    with env.server.client(env.other) as c:
        assert_problem(c.get(f"/v1/agents/{AGENT}/context"), 403)
        assert_problem(
            c.post(
                f"/v1/agents/{AGENT}/turns", json={"user": "x", "user_message": "a", "agent_response": "b"}
            ),
            403,
        )
        assert c.get(f"/v1/agents/{OTHER_AGENT}/identity").status_code == 200
    with env.server.client(env.agent) as c:
        assert_problem(c.post("/v1/sql", json={"query": "SELECT 1"}), 403)
        assert_problem(c.post("/v1/forget", json={"user": "carol"}), 403)
        assert_problem(c.get("/v1/export", params={"user": "alice"}), 403)
        # wide scopes are the operator's
        assert_problem(c.put(f"/v1/agents/{AGENT}/facts/tz", json={"value": "UTC", "scope": "system"}), 403)
        # another agent's proposal through this agent's path is not found, through its own path forbidden
        assert_problem(c.get(f"/v1/agents/{AGENT}/proposals/{env.seeded.other_proposal_id}"), 404)
        assert_problem(c.get(f"/v1/agents/{OTHER_AGENT}/proposals/{env.seeded.other_proposal_id}"), 403)


def test_user_bound_key_cannot_name_another_user(env: Env) -> None:
    with env.server.client(env.alice) as c:
        assert_problem(c.get(f"/v1/agents/{AGENT}/context", params={"user": "bob"}), 403)
        assert_problem(
            c.get(f"/v1/agents/{AGENT}/recall", params={"query": "locker", "participant": "bob"}), 403
        )
        assert_problem(
            c.post(
                f"/v1/agents/{AGENT}/turns", json={"user": "bob", "user_message": "a", "agent_response": "b"}
            ),
            403,
        )
        assert_problem(c.post(f"/v1/agents/{AGENT}/tools/memory_fact_list", json={"user": "bob"}), 403)
        # calls on the whole agent span every user
        assert_problem(c.get(f"/v1/agents/{AGENT}/proposals"), 403)
        assert_problem(c.get(f"/v1/agents/{AGENT}/export"), 403)
        assert_problem(c.put(f"/v1/agents/{AGENT}/identity", json={"content": "I am alice's now"}), 403)
        assert_problem(c.put(f"/v1/agents/{AGENT}/facts/k", json={"value": "v"}), 403)
        # naming no user acts for the key's own user
        assert c.get(f"/v1/agents/{AGENT}/context").json()["user"] == "alice"


# ---------------------------------------------------------------- turns


def test_post_turn_is_201_after_the_durable_append_and_idempotent(env: Env) -> None:
    body = {
        "user": "dave",
        "user_message": "Where is my parcel?",
        "agent_response": "On its way.",
        "session_id": "s-dave",
        "memory_level": "global",
        "model": "claude-sonnet-5",
        "usage": {"input_tokens": 10, "output_tokens": 5},
        "tools_used": ["recall_memory"],
        "latency_ms": 12.5,
        "channel": "web",
        "event_id": "dave-turn-0001",
        "attachments": [{"kind": "image", "caption": "a dented parcel on a doorstep"}],
    }
    with env.server.client(env.agent) as c:
        first = c.post(f"/v1/agents/{AGENT}/turns", json=body)
        assert first.status_code == 201, first.text
        assert first.json()["event_id"] == "dave-turn-0001"
        again = c.post(f"/v1/agents/{AGENT}/turns", json=body)
        assert again.status_code == 201 and again.json()["event_id"] == "dave-turn-0001"
    with env.server.client(env.operator) as c:
        rows = c.post(
            "/v1/sql",
            json={
                "query": "SELECT count(*) AS n, any_value(channel) AS ch,"
                " any_value(attachments) AS media FROM interactions WHERE user = 'dave'"
            },
        ).json()
    assert len(rows) == 1 and rows[0]["n"] == 1 and rows[0]["ch"] == "web"
    assert "a dented parcel on a doorstep" in str(rows[0]["media"])


def test_an_event_id_taken_by_another_record_is_409_and_never_a_silent_201(env: Env) -> None:
    alice_turn = {
        "user": "alice",
        "user_message": f"My safe combination is {ALICE_CANARY}-safe.",
        "agent_response": "Noted.",
        "event_id": "shared-id-0001",
    }
    with env.server.client(env.alice) as c:
        assert c.post(f"/v1/agents/{AGENT}/turns", json=alice_turn).status_code == 201
        # The same turn sent again is idempotent, as before.
        again = c.post(f"/v1/agents/{AGENT}/turns", json=alice_turn)
        assert again.status_code == 201 and again.json()["event_id"] == "shared-id-0001"
        # Her own other words under the id: refused, not answered as stored.
        own_other = c.post(f"/v1/agents/{AGENT}/turns", json={**alice_turn, "user_message": "hello"})
    bob_turn = {**alice_turn, "user": "bob", "user_message": f"I am Bob, {BOB_CANARY}-safe."}
    with env.server.client(env.agent) as c:
        other_user = c.post(f"/v1/agents/{AGENT}/turns", json=bob_turn)
        # The framework route answers a body with a 19-digit number: the same answer there.
        big = {**bob_turn, "metadata": {"n": 1234567890123456789}}
        other_user_framework = c.post(f"/v1/agents/{AGENT}/turns", json=big)
    with env.server.client(env.other) as c:
        other_agent = c.post(f"/v1/agents/{OTHER_AGENT}/turns", json={**bob_turn, "user": "alice"})
    bodies = [assert_problem(r, 409) for r in (own_other, other_user, other_user_framework, other_agent)]
    assert all(b["field"] == "event_id" for b in bodies)
    # One answer whoever holds the id: nothing of the stored record, its agent or its user.
    assert all(b == bodies[0] for b in bodies)
    for text in (own_other.text, other_user.text, other_agent.text):
        assert ALICE_CANARY not in text and "alice" not in text.lower() and AGENT not in text
    with env.server.client(env.operator) as c:
        rows = c.post(
            "/v1/sql",
            json={"query": "SELECT user, user_message FROM interactions WHERE event_id = 'shared-id-0001'"},
        ).json()
    assert rows == [{"user": "alice", "user_message": alice_turn["user_message"]}]


# ---------------------------------------------------------------- reads: the CLI's JSON


def test_context_is_the_json_of_tiermem_context(env: Env) -> None:
    with env.server.client(env.operator) as c:
        got = c.get(f"/v1/agents/{AGENT}/context", params={"user": "alice", "level": "global"})
    assert got.status_code == 200
    assert got.json() == cli_json(
        env.server.data_dir, "context", AGENT, "--user", "alice", "--level", "global"
    )
    assert got.json()["sections"][0]["name"] == "base"


def test_recall_is_the_json_of_tiermem_recall(env: Env) -> None:
    with env.server.client(env.operator) as c:
        got = c.get(f"/v1/agents/{AGENT}/recall", params={"query": "locker code", "participant": "alice"})
    assert got.status_code == 200
    results = got.json()["results"]
    assert [r["name"] for r in results] == ["Alice locker"]
    expected = cli_json(env.server.data_dir, "recall", AGENT, "locker code", "--participant", "alice")
    assert got.json() == expected


# ---------------------------------------------------------------- tools, facts, identity


def test_tools_list_and_call(env: Env) -> None:
    with env.server.client(env.agent) as c:
        names = {t["name"] for t in c.get(f"/v1/agents/{AGENT}/tools").json()}
        assert {"recall_memory", "memory_fact_store", "memory_fact_recall"} <= names
        stored = c.post(
            f"/v1/agents/{AGENT}/tools/memory_fact_store",
            json={"arguments": {"key": "greeting", "value": "Hi!"}},
        )
        assert stored.status_code == 200 and stored.json()["stored"] is True
        got = c.post(f"/v1/agents/{AGENT}/tools/memory_fact_recall", json={"arguments": {"key": "greeting"}})
        assert "Hi!" in got.text
        bad = assert_problem(c.post(f"/v1/agents/{AGENT}/tools/no_such_tool", json={}), 422)
        assert bad["field"] == "name"


def test_facts_crud(env: Env) -> None:
    with env.server.client(env.agent) as c:
        put = c.put(f"/v1/agents/{AGENT}/facts/office_hours", json={"value": "9-17 CET"})
        assert put.status_code == 200 and put.json()["key"] == "office_hours"
        assert c.get(f"/v1/agents/{AGENT}/facts/office_hours").json()["value"] == "9-17 CET"
        keys = {f["key"] for f in c.get(f"/v1/agents/{AGENT}/facts").json()["facts"]}
        assert {"office_hours", "escalation_email"} <= keys
        assert c.delete(f"/v1/agents/{AGENT}/facts/office_hours").json()["removed"] is True
        assert_problem(c.get(f"/v1/agents/{AGENT}/facts/office_hours"), 404)
        web = {"project_id": "web"}
        put = c.put(
            f"/v1/agents/{AGENT}/facts/branch", params=web, json={"value": "main", "scope": "project"}
        )
        assert put.status_code == 200 and put.json()["scope"] == "project"
        assert c.get(f"/v1/agents/{AGENT}/facts/branch", params=web).json()["scope"] == "project"
        assert_problem(c.get(f"/v1/agents/{AGENT}/facts/branch"), 404)  # not in this agent's own scope
    with env.server.client(env.operator) as c:
        assert (
            c.put(f"/v1/agents/{AGENT}/facts/tz", json={"value": "UTC", "scope": "system"}).status_code == 200
        )


def test_identity_get_put_and_its_limit(env: Env) -> None:
    with env.server.client(env.other) as c:
        assert (
            c.put(f"/v1/agents/{OTHER_AGENT}/identity", json={"content": "I handle invoices."}).status_code
            == 200
        )
        got = c.get(f"/v1/agents/{OTHER_AGENT}/identity").json()
        assert got["content"] == "I handle invoices." and got["limit"] == 1000
        assert_problem(c.put(f"/v1/agents/{OTHER_AGENT}/identity", json={"content": "x" * 1001}), 422)


# ---------------------------------------------------------------- the review queue


def test_proposals_list_show_approve_reject_edit(env: Env) -> None:
    approve_id, reject_id, edit_id = env.seeded.proposal_ids
    with env.server.client(env.agent) as c:
        pending = {p["proposal_id"] for p in c.get(f"/v1/agents/{AGENT}/proposals").json()}
        assert {approve_id, reject_id, edit_id} <= pending
        shown = c.get(f"/v1/agents/{AGENT}/proposals/{approve_id}").json()
        assert shown["provenance"]["source_turns"] and shown["if_approved"]["changes"]
        assert (
            c.post(f"/v1/agents/{AGENT}/proposals/{approve_id}/approve").json()["proposal_id"] == approve_id
        )
        rejected = c.post(f"/v1/agents/{AGENT}/proposals/{reject_id}/reject", json={"reason": "not true"})
        assert rejected.json()["action"] == "rejected"
        edited = c.post(
            f"/v1/agents/{AGENT}/proposals/{edit_id}/edit", json={"content": "Invoices go out on the 1st"}
        ).json()
        assert edited["fact"]["key"] == "invoices"
        assert c.get(f"/v1/agents/{AGENT}/facts/invoices").json()["value"] == "Invoices go out on the 1st"
        still = {p["proposal_id"] for p in c.get(f"/v1/agents/{AGENT}/proposals").json()}
        assert not still & {approve_id, reject_id, edit_id}
        assert_problem(c.post(f"/v1/agents/{AGENT}/proposals/{approve_id}/approve"), 422)  # not pending now


# ---------------------------------------------------------------- export, sql, forget


def test_export_agent_and_user(env: Env) -> None:
    with env.server.client(env.agent) as c:
        data = c.get(f"/v1/agents/{AGENT}/export").json()
        assert data["target_kind"] == "agent" and data["target"] == AGENT
        md = c.get(f"/v1/agents/{AGENT}/export", params={"format": "md"})
        assert md.headers["content-type"].startswith("text/markdown")
    with env.server.client(env.operator) as c:
        user = c.get("/v1/export", params={"user": "alice"}).json()
        assert user["target_kind"] == "user" and ALICE_CANARY in str(user)


def test_sql_is_read_only(env: Env) -> None:
    with env.server.client(env.operator) as c:
        rows = c.post("/v1/sql", json={"query": "SELECT count(*) AS n FROM interactions"}).json()
        assert rows[0]["n"] >= 3
        assert_problem(c.post("/v1/sql", json={"query": "DELETE FROM interactions"}), 400)


def test_forget_a_user_over_http(env: Env) -> None:
    with env.server.client(env.operator) as c:
        assert "canary-CAROL-5150" in c.get(f"/v1/agents/{AGENT}/export").text
        done = c.post("/v1/forget", json={"user": "carol", "reason": "asked to be forgotten"})
        assert (
            done.status_code == 200 and done.json()["target"] == "carol" and done.json()["erased_events"] >= 1
        )
        assert "canary-CAROL-5150" not in c.get(f"/v1/agents/{AGENT}/export").text
        assert "canary-CAROL-5150" not in c.get(f"/v1/agents/{AGENT}/context", params={"user": "carol"}).text
        assert_problem(c.post("/v1/forget", json={}), 422)


# ---------------------------------------------------------------- limits and malformed input


def test_body_limit_and_field_limits(env: Env) -> None:
    with env.server.client(env.agent) as c:
        big = {"user": "alice", "user_message": "x" * (MAX_BODY + 10), "agent_response": "ok"}
        assert_problem(c.post(f"/v1/agents/{AGENT}/turns", json=big), 413)

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted while streaming
            yield b'{"user": "alice", "user_message": "'
            for _ in range(MAX_BODY // 1000 + 2):
                yield b"y" * 1000
            yield b'", "agent_response": "ok"}'

        assert_problem(
            c.post(
                f"/v1/agents/{AGENT}/turns", content=chunks(), headers={"content-type": "application/json"}
            ),
            413,
        )
        long_user = {"user": "u" * 201, "user_message": "a", "agent_response": "b"}
        assert assert_problem(c.post(f"/v1/agents/{AGENT}/turns", json=long_user), 422)["field"] == "user"
        long_caption = {"user": "a", "user_message": "a", "agent_response": "b"}
        long_caption["attachments"] = [{"kind": "image", "caption": "c" * 2001}]
        problem = assert_problem(c.post(f"/v1/agents/{AGENT}/turns", json=long_caption), 422)
        assert "attachments[0].caption" in str(problem)
        extra = {"user": "a", "user_message": "a", "agent_response": "b", "agent_id": "billing-bot"}
        assert_problem(c.post(f"/v1/agents/{AGENT}/turns", json=extra), 422)
        assert_problem(
            c.post(
                f"/v1/agents/{AGENT}/turns",
                content=b"{not json",
                headers={"content-type": "application/json"},
            ),
            422,
        )
        assert_problem(c.get(f"/v1/agents/{AGENT}/context", params={"level": "galaxy"}), 422)
        assert_problem(c.get("/v1/agents/bad%20agent/context"), 422)
        assert_problem(c.get("/v1/nowhere"), 404)


# ---------------------------------------------------------------- visibility


def test_user_a_key_scoped_reads_never_show_user_b(env: Env) -> None:
    """Every read alice's key can make, with and without a query: no trace of bob's canary."""
    seen: list[str] = []
    with env.server.client(env.alice) as c:
        seen.append(c.get(f"/v1/agents/{AGENT}/context").text)
        seen.append(c.get(f"/v1/agents/{AGENT}/context", params={"query": "locker code"}).text)
        seen.append(c.get(f"/v1/agents/{AGENT}/recall", params={"query": "locker code"}).text)
        for tool, args in [
            ("recall_memory", {"query": "locker code"}),
            ("memory_recall", {"query": "locker code"}),
            ("memory_fact_list", {}),
            ("memory_idea_recall", {"query": "locker"}),
        ]:
            seen.append(c.post(f"/v1/agents/{AGENT}/tools/{tool}", json={"arguments": args}).text)
    everything = "\n".join(seen)
    assert ALICE_CANARY in everything  # the reads do return alice's own memory
    assert BOB_CANARY not in everything
