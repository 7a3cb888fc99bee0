"""Who may read and write what in the hot store: the principal of a call and its rules.

The principal of every read is (agent, user): the agent a memory is bound to,
with the scopes it belongs to (its agent type and project), and the person it
is talking to, if any. Every row of the hot store carries an `owner`: the
user(s) it was derived from. The projector sets it from the events:

- a turn: its `user`;
- an episode: its participants and the users of the turns it was built from;
- a proposal or a fact: its participant and the owners of the events it was
  extracted from (`source_event_ids`: turns, proposals, episodes);
- an idea or a key-value fact saved while the agent talked to a user: that
  user (the runtime writes it as the event's participant);
- a transition: the users of its source turns, else those of its session;
- a relationship summary and a retrieval: their participant.

No owner means agent-level memory: the identity, facts written without a
user, work summaries not tied to anyone.

The rules (the table is docs/visibility.md):

1. A row owned by users reaches only reads of its own agent for one of those
   users, whatever scope it claims.
2. A row without an owner reaches every read of its agent, with or without a
   user; facts without an owner also reach the agents that share their scope
   (system: everyone; agent type; project; override: project and type).
3. A read without a user therefore sees agent-level and wider memory only.
4. An agent writes (through tools, MCP, HTTP) its own agent scope, its
   project's (project, override) and facts about its current user; never
   `system` or `agent_type`, never another agent's facts, and never by
   shadowing a key it cannot write. Operators write any scope through the
   CLI and the Python API, which do not call `check_tool_write`.

The rules live here as Python predicates (`can_read_item`, `can_read_fact`,
`can_change_fact`); each hot-store backend translates them into its query
language once (the SQLite backend in `tiermem.runtime.hotstore`), and the
contract suite checks the translation against these predicates row by row.

Owners are stored as one string (`owner_key`): None (no user), the user id
itself, or, for a row shared by several users (an episode of a group
conversation), the ids joined and framed by `SEP`, which a query tests with
one substring match and which never equals a single id.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from tiermem.errors import PermissionDeniedError

# KV lookups: first match wins, from the most specific scope.
KV_ORDER = ("override", "project", "agent", "agent_type", "system")
SEP = "\x1f"  # unit separator: never part of a user id that a person types
# Scopes an agent may write through tools; "agent" is its private scope (no scope field).
TOOL_WRITABLE_SCOPES = ("agent", "project", "override")
WIDE_SCOPES = ("system", "agent_type")

audit_log = logging.getLogger("tiermem.audit")


@dataclass(frozen=True)
class Principal:
    """Who is reading: an agent (with the scopes it belongs to) and, optionally, the user it serves."""

    agent_id: str
    user: str | None = None
    agent_type: str | None = None
    project_id: str | None = None

    def as_user(self, user: str | None) -> Principal:
        """The same agent, serving `user` (None: an agent-level read)."""
        return replace(self, user=user or None)


# ------------------------------------------------------------------ owners


def owner_key(users: Iterable[str | None]) -> str | None:
    """The stored form of a set of owners: None, one id, or several framed by SEP."""
    unique = sorted({u for u in users if u})
    if not unique:
        return None
    if len(unique) == 1:
        return unique[0]
    return SEP + SEP.join(unique) + SEP


def owner_users(owner: str | None) -> frozenset[str]:
    """The users an owner key names."""
    if not owner:
        return frozenset()
    if owner.startswith(SEP) and owner.endswith(SEP) and len(owner) > 1:
        return frozenset(u for u in owner.strip(SEP).split(SEP) if u)
    return frozenset([owner])


def merge_owners(*owners: str | None) -> str | None:
    return owner_key(u for o in owners for u in owner_users(o))


def member_pattern(user: str) -> str:
    """The substring that marks `user` inside a several-owner key."""
    return SEP + user + SEP


# ------------------------------------------------------------------ reads


def can_read_item(p: Principal, agent_id: str | None, owner: str | None) -> bool:
    """Turns, transitions, episodes, relationships, retrievals: the agent's own, by owner."""
    if agent_id != p.agent_id:
        return False
    return owner is None or (p.user is not None and p.user in owner_users(owner))


def fact_scope_shared(p: Principal, fact: Mapping[str, Any]) -> bool:
    """Does the principal's agent belong to the scope a fact without an owner is in?"""
    scope = fact.get("scope") or "agent"
    if scope == "agent":
        return fact.get("agent_id") == p.agent_id
    if scope == "system":
        return True
    if scope == "agent_type":
        return p.agent_type is not None and fact.get("agent_type") == p.agent_type
    if scope == "project":
        return p.project_id is not None and fact.get("project_id") == p.project_id
    if scope == "override":
        return (
            p.project_id is not None
            and p.agent_type is not None
            and fact.get("project_id") == p.project_id
            and fact.get("agent_type") == p.agent_type
        )
    return False


def can_read_fact(p: Principal, fact: Mapping[str, Any]) -> bool:
    """Facts: an owned fact by rule 1, a fact without an owner by its scope (rule 2)."""
    owner = fact.get("owner")
    if owner is not None:
        return can_read_item(p, fact.get("agent_id"), owner)
    return fact_scope_shared(p, fact)


# ------------------------------------------------------------------ writes (tools, MCP, HTTP)


def _deny(p: Principal, action: str, target: str, why: str) -> PermissionDeniedError:
    # Recorded as a log line, not an event: a refused write changed no memory, and an
    # agent must not be able to grow the log by trying. The line holds ids and scopes only
    # (never the content), so erasure has nothing to remove from it.
    audit_log.warning(
        "denied: agent=%s user=%s action=%s target=%s reason=%s",
        p.agent_id,
        p.user or "-",
        action,
        target,
        why,
    )
    return PermissionDeniedError(f"{action} {target}: {why}")


def check_scope_write(p: Principal, scope: str | None, action: str = "write") -> None:
    """A tool may write the agent's own scope and its project's; never a wider one."""
    scope = scope or "agent"
    if scope not in TOOL_WRITABLE_SCOPES:
        raise _deny(
            p,
            action,
            f"scope {scope}",
            f"an agent writes only its own scopes ({', '.join(TOOL_WRITABLE_SCOPES)}); "
            f"{scope} facts are written by an operator (tiermem facts set --scope {scope})",
        )


def can_change_fact(p: Principal, fact: Mapping[str, Any]) -> bool:
    """May a tool call update, deactivate or overwrite this (visible) fact?"""
    if fact.get("agent_id") != p.agent_id:
        return False
    if (fact.get("scope") or "agent") not in TOOL_WRITABLE_SCOPES:
        return False
    owner = fact.get("owner")
    return owner is None or (p.user is not None and p.user in owner_users(owner))


def check_fact_change(p: Principal, fact: Mapping[str, Any], action: str) -> None:
    if not can_change_fact(p, fact):
        scope = fact.get("scope") or "agent"
        whose = "another agent's" if fact.get("agent_id") != p.agent_id else f"a {scope}"
        raise _deny(
            p,
            action,
            str(fact.get("fact_id")),
            f"{whose} fact (scope {scope}) is not yours to change; an operator can change it "
            "through the CLI or the Python API",
        )


def check_no_shadowing(p: Principal, key: str, current: Mapping[str, Any] | None, scope: str) -> None:
    """Writing `key` in `scope` must not hide a fact the agent may not change.

    `current` is what a lookup of the key returns now (first match wins, most
    specific scope first: `KV_ORDER`); the new fact would take its place when
    its scope comes first or is the same one (the newer write wins).
    """
    if current is None or can_change_fact(p, current):
        return
    rank = {s: i for i, s in enumerate(KV_ORDER)}
    if rank.get(scope, 99) > rank.get(current.get("scope") or "agent", 99):
        return  # the existing fact stays the one a lookup returns
    raise _deny(
        p,
        "store",
        f"key {key!r}",
        f"it is set in scope {current.get('scope') or 'agent'} by "
        + ("you" if current.get("agent_id") == p.agent_id else f"agent {current.get('agent_id')}")
        + f"; a {scope} fact with the same key would shadow it",
    )
