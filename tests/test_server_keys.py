"""`tiermem keys`: keys printed once, stored hashed, listed without secrets, revoked; `authorize` rules."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tiermem.app.cli import main
from tiermem.app.server.keys import AuthError, ForbiddenError, KeyStore, Principal, authorize, keys_path
from tiermem.settings import Settings


def cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["--data-dir", str(settings.data_dir), "keys", *args])
    return code, out.getvalue(), err.getvalue()


def test_create_prints_the_key_once_and_stores_only_its_hash(settings: Settings) -> None:
    code, out, _ = cli(settings, "create", "--operator", "--json")
    assert code == 0
    created = json.loads(out)
    token = created["key"]
    assert token.startswith("tmk_") and len(token) >= 40 and created["kind"] == "operator"
    code, out, _ = cli(settings, "create", "--agent", "support-bot", "--user", "alice", "--json")
    agent_token = json.loads(out)["key"]

    raw = Path(keys_path(settings)).read_bytes()
    assert token.encode() not in raw and agent_token.encode() not in raw  # only hashes on disk
    code, out, _ = cli(settings, "list", "--json")
    listed = json.loads(out)
    assert [(k["kind"], k["agent_id"], k["user"]) for k in listed] == [
        ("operator", None, None),
        ("agent", "support-bot", "alice"),
    ]
    assert token not in out and agent_token not in out

    store = KeyStore(settings)
    assert store.verify(token) == Principal(created["key_id"], "operator")
    assert store.verify(token + "x") is None and store.verify("not-a-key") is None
    code, out, _ = cli(settings, "revoke", created["key_id"], "--json")
    assert code == 0 and json.loads(out)["revoked"] is True
    assert store.verify(token) is None
    assert store.verify(agent_token) is not None


def test_bad_requests_are_one_line_errors(settings: Settings) -> None:
    code, _, err = cli(settings, "create", "--operator", "--agent", "a")
    assert code == 2 and "exactly one of" in err and "Traceback" not in err
    code, _, err = cli(settings, "create", "--operator", "--user", "alice")
    assert code == 2 and "only an agent key" in err
    code, _, err = cli(settings, "revoke", "key_000000000000")
    assert code == 1 and "does not exist" in err  # no data root yet: nothing to revoke
    settings.data_dir.mkdir(parents=True)
    code, _, err = cli(settings, "revoke", "key_000000000000")
    assert code == 1 and "no key" in err


OPERATOR = Principal("k1", "operator")
AGENT = Principal("k2", "agent", agent_id="bot")
ALICE = Principal("k3", "agent", agent_id="bot", user="alice")


def test_authorize_is_the_one_decision() -> None:
    with pytest.raises(AuthError):
        authorize(None, agent_id="bot")
    assert authorize(OPERATOR, agent_id="any", user="bob", operator_only=True, scope="system") == "bob"
    assert authorize(AGENT, agent_id="bot", user="bob") == "bob"
    assert authorize(AGENT, agent_id="bot", scope="project") is None
    for kwargs in (
        {"agent_id": "other"},
        {"agent_id": "bot", "operator_only": True},
        {"agent_id": "bot", "scope": "system"},
        {"agent_id": "bot", "scope": "agent_type"},
    ):
        with pytest.raises(ForbiddenError):
            authorize(AGENT, **kwargs)  # type: ignore[arg-type]
    assert authorize(ALICE, agent_id="bot") == "alice"  # no user named: acts for its own
    assert authorize(ALICE, agent_id="bot", user="alice") == "alice"
    with pytest.raises(ForbiddenError):
        authorize(ALICE, agent_id="bot", user="bob")
    with pytest.raises(ForbiddenError):
        authorize(ALICE, agent_id="bot", whole_agent=True)


def test_a_remembered_key_is_refused_as_soon_as_another_store_revokes_it(settings: Settings) -> None:
    """`verify` remembers live keys between requests; every change to the key file, made by
    any process, must end that at once — checked on each of many back-to-back revocations."""
    server, cli_store = KeyStore(settings), KeyStore(settings)  # the server's, and the CLI's
    try:
        for _ in range(20):
            created = cli_store.create(operator=False, agent_id="support-bot")
            first = server.verify(created["key"])
            assert first is not None and server.verify(created["key"]) == first  # remembered
            cli_store.revoke(created["key_id"])
            assert server.verify(created["key"]) is None
        # A new key reaches the server too, and the file replaced under it is followed.
        created = cli_store.create(operator=True, agent_id=None)
        assert server.verify(created["key"]) is not None
        path = keys_path(settings)
        path.replace(path.with_name("old.sqlite"))
        assert server.verify(created["key"]) is None  # a fresh, empty key file: no key is live
    finally:
        server.close()
        cli_store.close()
