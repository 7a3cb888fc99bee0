"""The visibility rules in SQLite's SQL: `tiermem.runtime.visibility`'s predicates as WHERE fragments.

These fragments are the rules' one translation for this backend (the contract suite checks the
two agree row for row); every read of the hot store that filters by principal takes its clause
from here.
"""

from __future__ import annotations

from typing import Any

from tiermem.runtime.visibility import Principal, member_pattern


def owner_clause(p: Principal, alias: str) -> tuple[str, list[Any]]:
    """Rows without an owner, or owned by the principal's user (alone or among others)."""
    if p.user is None:
        return f"{alias}.owner IS NULL", []
    return (
        f"({alias}.owner IS NULL OR {alias}.owner = ? OR instr({alias}.owner, ?) > 0)",
        [p.user, member_pattern(p.user)],
    )


def item_clause(p: Principal, alias: str) -> tuple[str, list[Any]]:
    """Turns, transitions, episodes, relationships, retrievals this principal may read."""
    where, params = owner_clause(p, alias)
    return f"({alias}.agent_id = ? AND {where})", [p.agent_id, *params]


def owned_by_clause(user: str, alias: str | None = None) -> tuple[str, list[Any]]:
    """Rows one of whose owners is `user` (what erasing that user deletes)."""
    col = f"{alias}.owner" if alias else "owner"
    return f"({col} = ? OR instr({col}, ?) > 0)", [user, member_pattern(user)]


def fact_clause(p: Principal, alias: str = "f") -> tuple[str, list[Any]]:
    """Facts this principal may read: owned ones as items, the others by the scopes it shares."""
    a = alias
    shared = [f"({a}.scope = 'agent' AND {a}.agent_id = ?)", f"{a}.scope = 'system'"]
    params: list[Any] = [p.agent_id]
    if p.agent_type:
        shared.append(f"({a}.scope = 'agent_type' AND {a}.agent_type = ?)")
        params.append(p.agent_type)
    if p.project_id:
        shared.append(f"({a}.scope = 'project' AND {a}.project_id = ?)")
        params.append(p.project_id)
        if p.agent_type:
            shared.append(f"({a}.scope = 'override' AND {a}.project_id = ? AND {a}.agent_type = ?)")
            params.extend([p.project_id, p.agent_type])
    clause = f"({a}.owner IS NULL AND ({' OR '.join(shared)}))"
    if p.user is not None:
        mine, mine_params = owned_by_clause(p.user, a)
        clause = f"({clause} OR ({a}.owner IS NOT NULL AND {a}.agent_id = ? AND {mine}))"
        params.extend([p.agent_id, *mine_params])
    return clause, params
