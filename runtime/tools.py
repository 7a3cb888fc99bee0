"""The memory tools: Anthropic tool-use specs and their Python handlers.

`tool_specs()` and `call_tool(memory, name, args)` are the one implementation
behind the Claude turn loop and the MCP server (`tiermem mcp`). Arguments
never include the agent id: the `AgentMemory` is already bound to one agent.
Bad arguments raise `tiermem.errors.ValidationError` naming the argument.

Every tool that delivers memory appends a `retrieval` event (query, item ids,
scores, tokens of the result) and so bumps the items' `recall_count`.

Every tool reads as the memory's principal (the agent and the user it serves:
`tiermem.runtime.visibility`), and writes only what an agent may write: its
own scope, its project's, and facts about its current user. A write to
`system` or `agent_type`, a change to another agent's fact, or a key that
would shadow one raises `PermissionDeniedError` (a tool error the model can
read, logged on `tiermem.audit`). While the agent serves a user, what it
stores is about that user and stays in its own scope: a shared scope asked
for is narrowed to the agent's own, and the result says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from tiermem.runtime.memory import FACT_SCOPES, AgentMemory
from tiermem.runtime.visibility import (
    check_fact_change,
    check_no_shadowing,
    check_scope_write,
    owner_key,
)

from tiermem.errors import NotFoundError, ValidationError
from tiermem.ids import utcnow
from tiermem.merging import estimate_tokens, merge_offline, summarize_offline
from tiermem.similarity import text_similarity
from tiermem.tokens import count_tokens
from tiermem.topics import detect_topic


def merge_texts(old: str, new: str) -> tuple[str, str | None]:
    result = merge_offline(old, new)
    return result.content, result.note


NEAR_IDENTICAL = 0.95
RELATED = 0.80
RECALL_LIMIT = 3

RECALL_MEMORY_DESCRIPTION = (
    "Search your own memories of past interactions. Use when someone references a previous "
    "conversation, when you want to recall specific details about a person, or when something "
    "reminds you of a past moment."
)


def _spec(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": props, "required": required},
    }


def _s(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def tool_specs() -> list[dict[str, Any]]:
    """The memory tools in Anthropic tool-use format (name, description, input_schema)."""
    return [
        _spec(
            "recall_memory",
            RECALL_MEMORY_DESCRIPTION,
            {
                "query": _s("A name, topic, event, or feeling"),
                "participant": _s("Filter by person name"),
            },
            ["query"],
        ),
        _spec(
            "memory_recall",
            "Recall anything from your memory when you are not sure where it is: tries an exact "
            "key-value fact first, then searches what you have learned.",
            {"query": _s("A fact key or a few words about what you want to remember")},
            ["query"],
        ),
        _spec(
            "memory_fact_store",
            "Store a key-value fact (e.g. test_command = pytest -q). The scope decides who shares it: "
            "agent (only you, default), project, agent_type, override (project + your type), system.",
            {
                "key": _s("Short identifier, e.g. deploy_branch"),
                "value": _s("The value"),
                "scope": _s("Who shares the fact", enum=list(FACT_SCOPES)),
            },
            ["key", "value"],
        ),
        _spec(
            "memory_fact_recall",
            "Look up a key-value fact by its exact key; the most specific scope wins.",
            {"key": _s("The fact key")},
            ["key"],
        ),
        _spec("memory_fact_list", "List the key-value facts you can see, in every scope.", {}, []),
        _spec(
            "memory_idea_save",
            "Save an insight or learning as a declarative fact. Near-duplicates of what you already "
            "know are merged, not repeated; the result says what happened (created/merged/deduplicated).",
            {
                "content": _s("The insight, as a declarative statement"),
                "topic": _s("Optional topic (detected from the words when not given)"),
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Optional tags"},
                "scope": _s("Who shares it: agent (only you, default) or project", enum=["agent", "project"]),
            },
            ["content"],
        ),
        _spec(
            "memory_idea_recall",
            "Search the insights and learned facts you can see, optionally within a topic.",
            {"query": _s("What you are looking for"), "topic": _s("Optional topic pre-filter")},
            ["query"],
        ),
        _spec(
            "memory_idea_list",
            "List the insights and learned facts you can see, newest first.",
            {"topic": _s("Optional topic")},
            [],
        ),
        _spec(
            "memory_write",
            "Change your memory directly. L0 is your identity (always in your prompt, at most 1,000 "
            "characters); L1 is your learned knowledge. add | update | remove; update and remove on "
            "L1 need target_id (the id shown in brackets).",
            {
                "action": _s("What to do", enum=["add", "update", "remove"]),
                "layer": _s("L0 identity or L1 knowledge", enum=["L0", "L1"]),
                "content": _s("The new content (for remove on L0: the text to remove)"),
                "target_id": _s("The fact id to update or remove (L1)"),
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Optional tags"},
            },
            ["action", "layer", "content"],
        ),
    ]


_SPECS = {spec["name"]: spec for spec in tool_specs()}


def _check_args(name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(args, Mapping):
        raise ValidationError("arguments", f"expected an object, got {type(args).__name__}")
    schema = _SPECS[name]["input_schema"]
    props: dict[str, Any] = schema["properties"]
    unknown = set(args) - set(props)
    if unknown:
        raise ValidationError(
            sorted(unknown)[0], f"unknown argument to {name}; known: {', '.join(props) or 'none'}"
        )
    out: dict[str, Any] = {}
    for key, value in args.items():
        if value is None:
            continue
        spec = props[key]
        if spec["type"] == "string":
            if not isinstance(value, str):
                raise ValidationError(key, f"expected a string, got {type(value).__name__}")
            if "enum" in spec and value not in spec["enum"]:
                raise ValidationError(key, f"expected one of {', '.join(spec['enum'])}, got {value!r}")
        elif spec["type"] == "array" and (
            not isinstance(value, list) or not all(isinstance(v, str) for v in value)
        ):
            raise ValidationError(key, "expected a list of strings")
        out[key] = value
    for key in schema["required"]:
        if key not in out or (isinstance(out[key], str) and not out[key].strip() and key != "content"):
            raise ValidationError(key, f"missing (required by {name})")
    return out


def _cost(result: Any) -> int:
    return count_tokens(orjson.dumps(result).decode())


# ---------------------------------------------------------------- handlers


# Shares of the recall budget the kinds may fill, cumulatively, in this order: episodes first
# (the summarised past), then turns no episode covers yet, then the best remembered turns.
RECALL_STAGES = (("episodes", 0.75), ("unfolded", 0.9), ("quotes", 1.0))
RECALL_QUOTES_SHOWN = 3
UNFOLDED_HEADER = "Since I last went over my memories:"
# A remembered-turn line that resolves a relative date ends "(yesterday = 7 May 2023)".
_ANCHORED = re.compile(r"\([^()]* = [^()]*\)$")


def _episode_entry(ep: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """One recalled episode: its structured entry and its first-person line."""
    when = str(ep.get("start_ts") or "")[:10]
    end = str(ep.get("end_ts") or "")[:10]
    if end and end != when:
        when = f"{when} to {end}"
    quotes = [q.get("text", "") for q in ep.get("key_quotes") or [] if isinstance(q, dict)]
    quotes = quotes[:RECALL_QUOTES_SHOWN]
    entry = {
        "episode_id": ep["episode_id"],
        "name": ep["name"],
        "when": when,  # the dates, once: the first-person line repeats the rest
        "summary": ep["summary"],
        "key_quotes": quotes,
        "emotional_context": ep.get("emotional_context"),
        "participants": ep.get("participants") or [],
        "importance": ep.get("importance"),
        "score": ep.get("score"),
    }
    line = f'I remember "{ep["name"]}" ({when}): {ep["summary"]}'
    if quotes:
        line += " What was said: " + " / ".join(f'"{q}"' for q in quotes)
    if ep.get("emotional_context"):
        line += f" How it felt: {ep['emotional_context']}"
    return entry, line


def _unfolded_line(turn: Mapping[str, Any]) -> str:
    return (
        f"{str(turn['ts'])[:10]} {turn['user'] or 'someone'}: {turn['user_message']}"
        f" / I said: {turn['agent_response']}"
    )


def _json_chars(value: Any) -> int:
    """Characters of `value` as the result's JSON writes it."""
    return len(orjson.dumps(value).decode())


# The result's JSON around its parts: {"memories":[..],"turns":[..],"text":".."}.
_FRAME_CHARS = len('{"memories":[],"turns":[],"text":}')
_NOTHING = "Nothing comes to mind about that."
_TURNS_HEADER = "What was said, as I remember it:"
_TURNS_HEADER_CHARS = _json_chars(_TURNS_HEADER) - 2  # inside the text: without its quotes


class _RecallResult:
    """The recall result built item by item within a token budget: an item fits whole or not at all.

    Its size is kept as items are added: each item's JSON (a line's, inside the text, without its
    quotes; the newlines between lines are written as two characters), so pricing an item does not
    write the whole result again (`cost` is the result written out: what the sizes add up to).
    """

    def __init__(self) -> None:
        self.memories: list[dict[str, Any]] = []
        self.turns: list[dict[str, Any]] = []
        self.episode_lines: list[str] = []
        self.turn_lines: list[str] = []
        self._chars = {"memories": 0, "turns": 0, "episode_lines": 0, "turn_lines": 0}

    def _size(self, chars: dict[str, int]) -> int:
        """Characters of the result's JSON with the parts' sizes `chars` (the lists as they are)."""
        commas = max(0, len(self.memories) - 1) + max(0, len(self.turns) - 1)
        lines = len(self.episode_lines) + (len(self.turn_lines) + 1 if self.turn_lines else 0)
        if lines:
            said = (
                chars["episode_lines"] + chars["turn_lines"] + (_TURNS_HEADER_CHARS if self.turn_lines else 0)
            )
            text = 2 + said + 2 * (lines - 1)
        else:
            text = _json_chars(_NOTHING)
        return _FRAME_CHARS + chars["memories"] + chars["turns"] + commas + text

    def render(self) -> dict[str, Any]:
        lines = list(self.episode_lines)
        if self.turn_lines:
            lines.append(_TURNS_HEADER)
            lines.extend(self.turn_lines)
        text = "\n".join(lines) if lines else _NOTHING
        return {"memories": self.memories, "turns": self.turns, "text": text}

    def cost(self) -> int:
        return _cost(self.render())

    def kept_cost(self) -> int:
        """`cost`, from the kept sizes."""
        return (self._size(self._chars) + 3) // 4

    def try_add(
        self,
        cap: int,
        *,
        memory: tuple[dict[str, Any], str] | None = None,
        turn: tuple[str, list[str]] | None = None,
        header: str | None = None,
    ) -> bool:
        """Add one item (with its date header if it needs one) if the result stays within `cap`."""
        added: list[tuple[str, Any]] = []
        if memory is not None:
            added += [("memories", memory[0]), ("episode_lines", memory[1])]
        if header is not None and header not in self.turn_lines:
            added += [("turn_lines", header), ("turns", {"line": header, "event_ids": []})]
        if turn is not None:
            added += [("turn_lines", turn[0]), ("turns", {"line": turn[0], "event_ids": turn[1]})]
        chars = dict(self._chars)
        for name, value in added:
            getattr(self, name).append(value)
            chars[name] += _json_chars(value) - (2 if name.endswith("lines") else 0)  # a line's quotes
        if (self._size(chars) + 3) // 4 <= cap:
            self._chars = chars
            return True
        for name, _ in reversed(added):
            getattr(self, name).pop()  # each list got its values appended last, in this order
        return False


def _recall_memory(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    """Episodes, then turns no episode covers yet, then the best remembered turns, within the budget.

    The budget (`runtime.recall_budget_tokens`) counts the result as the model
    reads it (its JSON). Each kind may fill the budget up to its stage's share
    (`RECALL_STAGES`), so episodes cannot crowd out the exact words; an item
    that does not fit is left out whole and a smaller one after it may still
    fit. Remembered turns already quoted by a recalled episode are not repeated,
    unless their line resolves a relative date the quote leaves open.
    """
    query, participant = args["query"], args.get("participant")
    who = memory.principal
    budget = max(1, int(memory.settings.runtime.recall_budget_tokens))
    caps = {name: int(budget * share) for name, share in RECALL_STAGES}
    result = _RecallResult()
    found = memory.store.search_episodes(who, query, participant, RECALL_LIMIT)
    quoted: set[str] = set()
    for ep in found:
        if result.try_add(caps["episodes"], memory=_episode_entry(ep)):
            quoted |= {
                str(q.get("event_id"))
                for q in (ep.get("key_quotes") or [])[:RECALL_QUOTES_SHOWN]
                if isinstance(q, dict) and q.get("event_id")
            }
    delivered: list[tuple[str, float]] = []
    for turn in memory.store.search_turns(who, query, participant, RECALL_LIMIT):
        line = _unfolded_line(turn)
        if result.try_add(caps["unfolded"], turn=(line, [str(turn["event_id"])]), header=UNFOLDED_HEADER):
            delivered.append((str(turn["event_id"]), float(turn["score"])))
    # The turns themselves, best match first, one dated line each with the ids they come from:
    # the exact words often answer what a summary cannot ("when", "how much", "what did she say").
    shown = {event_id for event_id, _ in delivered}
    room = max(0, budget - result.kept_cost())
    header: str | None = None
    for line, ids in memory.store.recall_lines(who, query, participant, budget=room):
        if not ids:
            header = line
            continue
        if quoted.intersection(ids) and not _ANCHORED.search(line):
            continue  # the episode already quotes it, and the line resolves no date the quote leaves open
        if shown.intersection(ids):
            continue  # a turn no episode covers yet, already listed above
        result.try_add(caps["quotes"], turn=(line, list(ids)), header=header)
    out = result.render()
    memory.record_retrieval(
        "recall_memory",
        query,
        [m["episode_id"] for m in result.memories] + [i for i, _ in delivered],
        [float(m["score"] or 0.0) for m in result.memories] + [score for _, score in delivered],
        result.kept_cost(),  # what writing `out` counts
        reason="agent reached for a memory" + (f" (about {participant})" if participant else ""),
    )
    return out


def _fact_out(row: Any) -> dict[str, Any]:
    return {
        "fact_id": row["fact_id"],
        "key": row["key"],
        "value": row["content"],
        "scope": row["scope"],
        "updated_at": row["updated_at"],
    }


def _search_out(
    memory: AgentMemory, query: str, topic: str | None, kinds: tuple[str, ...] | None
) -> list[dict[str, Any]]:
    found = memory.store.search_facts(
        memory.principal,
        query,
        topic=topic,
        limit=5,
        kinds=kinds,
        weights=memory.settings.runtime.scope_weights,
        now=utcnow(),
    )
    return [
        {
            "fact_id": f.fact_id,
            "content": f.content,
            "key": f.key,
            "topic": f.topic,
            "scope": f.scope,
            "category": f.category,
            "score": f.score,
        }
        for f in found
    ]


def _memory_recall(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    query = args["query"]
    row = memory.get_fact(query.strip())
    if row is not None:
        result: dict[str, Any] = {"source": "kv", **_fact_out(row)}
        memory.record_retrieval(
            "memory_recall", query, [row["fact_id"]], [1.0], _cost(result), reason="kv exact match"
        )
        return result
    results = _search_out(memory, query, None, None)
    result = {"source": "search", "results": results}
    memory.record_retrieval(
        "memory_recall",
        query,
        [r["fact_id"] for r in results],
        [r["score"] for r in results],
        _cost(result),
        reason="no exact key; full-text search",
    )
    return result


def _narrowed(memory: AgentMemory, scope: str | None) -> tuple[str | None, str | None]:
    """(scope to write, note): while serving a user, writes stay in the agent's own scope."""
    if memory.user and (scope or "agent") != "agent":
        return None, (
            f"kept in your own scope, about {memory.user}: what you store while talking to "
            f"{memory.user} is theirs and is not shared with the {scope} scope"
        )
    return scope, None


def _fact_store(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    key = args["key"].strip()
    who = memory.principal
    check_scope_write(who, args.get("scope"), "store")
    scope, note = _narrowed(memory, args.get("scope"))
    check_no_shadowing(who, key, memory.store.kv_lookup(who, key), scope or "agent")
    fact_id = memory.store_fact(key, args["value"], scope)
    result: dict[str, Any] = {"stored": True, "fact_id": fact_id, "key": key, "scope": scope or "agent"}
    if note:
        result["note"] = note
    return result


def _fact_recall(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    row = memory.get_fact(args["key"].strip())
    if row is None:
        return {"found": False, "key": args["key"]}
    result = {"found": True, **_fact_out(row)}
    memory.record_retrieval(
        "memory_fact_recall", args["key"], [row["fact_id"]], [1.0], _cost(result), reason="kv lookup"
    )
    return result


def _fact_list(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    rows = memory.store.list_facts(memory.principal, kinds=("kv",), limit=200)
    result = {"facts": [_fact_out(r) for r in rows]}
    if rows:
        memory.record_retrieval(
            "memory_fact_list", None, [r["fact_id"] for r in rows], None, _cost(result), reason="list"
        )
    return result


def _idea_save(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    """Save an insight: deduplicated or merged into what the agent already knows, else created.

    A long idea is kept as a short summary (what search and the prompt show)
    with the original beside it; tags are recorded with the proposal; the
    topic is the given one, else the one its words suggest.
    """
    original, tags = args["content"].strip(), args.get("tags") or []
    if not original:
        raise ValidationError("content", "empty")
    who = memory.principal
    check_scope_write(who, args.get("scope"), "save")
    scope, note = _narrowed(memory, args.get("scope"))
    long = estimate_tokens(original) > memory.settings.evolver.summary_over_tokens
    content = summarize_offline(original) if long else original
    kept_original = original if long else None
    topic = args.get("topic") or detect_topic(original)
    # Candidates: the agent's own knowledge that shares words with the new idea (dedup in the target
    # scope), written for the same user: an idea merges only into what belongs to the same person.
    found = memory.store.search_facts(who, content, limit=20, kinds=("knowledge",), now=utcnow())
    best, best_sim = None, 0.0
    for f in found:
        if f.scope != (scope or "agent") or f.owner != owner_key([memory.user]):
            continue
        sim = text_similarity(f.content, content)
        if sim > best_sim:
            best, best_sim = f, sim
    extra: dict[str, Any] = {"tags": tags or None, "scope": scope, "original": kept_original}
    result: dict[str, Any]
    if best is not None and best_sim > NEAR_IDENTICAL:
        memory.add_knowledge(
            best.content,
            category=best.category or "insight",
            topic=best.topic or topic,
            fact_id=best.fact_id,
            decision="touched",
            similarity=best_sim,
            note="near-identical idea saved again",
            **extra,
        )
        result = {"action": "deduplicated", "fact_id": best.fact_id, "similarity": best_sim}
    elif best is not None and best_sim >= RELATED:
        merged, merge_note = merge_texts(best.content, content)
        memory.add_knowledge(
            merged,
            category=best.category or "insight",
            topic=args.get("topic") or best.topic or topic,
            fact_id=best.fact_id,
            decision="merged",
            previous_content=best.content,
            similarity=best_sim,
            note=merge_note,
            **extra,
        )
        result = {"action": "merged", "fact_id": best.fact_id, "similarity": best_sim, "content": merged}
    else:
        fact_id = memory.add_knowledge(content, category="insight", topic=topic, **extra)
        result = {"action": "created", "fact_id": fact_id, "similarity": round(best_sim, 6)}
    result.update(scope=scope or "agent", topic=topic)
    if tags:
        result["tags"] = tags
    if kept_original is not None:
        result["summary"] = content
    if note:
        result["note"] = note
    return result


def _idea_recall(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    results = _search_out(memory, args["query"], args.get("topic"), ("knowledge",))
    result = {"results": results}
    memory.record_retrieval(
        "memory_idea_recall",
        args["query"],
        [r["fact_id"] for r in results],
        [r["score"] for r in results],
        _cost(result),
        reason="idea search" + (f" (topic {args['topic']})" if args.get("topic") else ""),
    )
    return result


def _idea_list(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    rows = memory.store.list_facts(memory.principal, kinds=("knowledge",), topic=args.get("topic"), limit=100)
    ideas = [
        {
            "fact_id": r["fact_id"],
            "content": r["content"],
            "topic": r["topic"],
            "category": r["category"],
            "scope": r["scope"],
        }
        for r in rows
    ]
    result = {"ideas": ideas}
    if ideas:
        memory.record_retrieval(
            "memory_idea_list", None, [i["fact_id"] for i in ideas], None, _cost(result), reason="list"
        )
    return result


def _new_identity(current: str, action: str, content: str) -> str:
    """The L0 text after `action` (add a line, replace all, remove a passage or everything)."""
    text = content.strip()
    if action == "add":
        if not text:
            raise ValidationError("content", "empty")
        return f"{current}\n{text}" if current else text
    if action == "update":
        return text
    if not text:
        return ""
    if text not in current:
        raise NotFoundError("that text is not in your identity (L0)")
    return current.replace(text, "").replace("\n\n", "\n").strip()


def _memory_write(memory: AgentMemory, args: dict[str, Any]) -> dict[str, Any]:
    action, layer, content = args["action"], args["layer"], args["content"]
    if layer == "L0":
        new = _new_identity(memory.identity(), action, content)
        event_id = memory.set_identity(new)
        return {
            "action": action,
            "layer": "L0",
            "id": f"identity:{memory.agent_id}",
            "event_id": event_id,
            "chars": len(new),
        }
    return _write_knowledge(memory, action, content, args)


def _write_knowledge(memory: AgentMemory, action: str, content: str, args: dict[str, Any]) -> dict[str, Any]:
    """An L1 write: add a memory, or update / remove one this principal may change."""
    tags = args.get("tags")
    if action == "add":
        fact_id = memory.add_knowledge(content, category=(tags[0] if tags else "insight"), tags=tags)
        return {"action": "add", "layer": "L1", "id": fact_id}
    target = args.get("target_id")
    if not target:
        raise ValidationError("target_id", f"required for {action} on L1")
    row = memory.visible_fact(target)
    if row is None:
        raise NotFoundError(f"no active memory {target!r} that you can see")
    check_fact_change(memory.principal, dict(row), action)
    if action == "update":
        if not content.strip():
            raise ValidationError("content", "empty")
        if memory.user and row["owner"] is None:
            # New words said in a user's session are theirs; a fact others read cannot carry them.
            raise ValidationError(
                "target_id",
                f"{target} is shared (scope {row['scope']}); while talking to {memory.user} you can "
                "remove it or add a new memory, not rewrite it",
            )
        memory.add_knowledge(
            content,
            category=row["category"] or "insight",
            topic=row["topic"],
            fact_id=target,
            decision="superseded",
            previous_content=row["content"],
            note="updated by the agent",
            scope=row["scope"] if row["scope"] != "agent" else None,
        )
        return {"action": "update", "layer": "L1", "id": target}
    memory.decide_fact(target, "deactivated", "inactive", note="removed by the agent")
    return {"action": "remove", "layer": "L1", "id": target}


HANDLERS: dict[str, Callable[[AgentMemory, dict[str, Any]], dict[str, Any]]] = {
    "recall_memory": _recall_memory,
    "memory_recall": _memory_recall,
    "memory_fact_store": _fact_store,
    "memory_fact_recall": _fact_recall,
    "memory_fact_list": _fact_list,
    "memory_idea_save": _idea_save,
    "memory_idea_recall": _idea_recall,
    "memory_idea_list": _idea_list,
    "memory_write": _memory_write,
}


def call_tool(memory: AgentMemory, name: str, args: Mapping[str, Any] | None) -> dict[str, Any]:
    """Run one memory tool for the bound agent; ValidationError on bad arguments."""
    handler = HANDLERS.get(name)
    if handler is None:
        raise ValidationError("name", f"unknown tool {name!r}; known: {', '.join(HANDLERS)}")
    return handler(memory, _check_args(name, args or {}))
