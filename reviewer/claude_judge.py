"""An optional Claude-judged sample for a review (only when a key or a client is given).

A small, deterministic sample of one day of one agent (the flagged interactions
first, then evenly spaced ones) is sent in one request; Claude returns a score
1–5 and a one-line reason per interaction through a tool, and the output is
sanitised (unknown ids dropped, scores coerced and clamped). Any failure
returns None: the offline report stands on its own. With `llm.provider =
"openai"` the same request goes to the OpenAI-compatible endpoint as a forced
function call. The review passes one `Reachability` to every call, so an
unreachable endpoint costs one short retry for the whole review.
"""

from __future__ import annotations

from typing import Any

import duckdb

from tiermem.llm import Reachability, anthropic_client, model_name, openai_client
from tiermem.settings import Settings

JUDGE_TOOL: dict[str, Any] = {
    "name": "judgements",
    "description": "Record a quality score for each interaction.",
    "input_schema": {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "event_id": {"type": "string"},
                        "score": {"type": "integer", "description": "1 (bad) to 5 (excellent)"},
                        "reason": {"type": "string", "description": "one short line"},
                    },
                    "required": ["event_id", "score"],
                },
            }
        },
        "required": ["items"],
    },
}

PROMPT = (
    "You review an AI agent's replies. For each interaction below, score the reply 1-5 for helpfulness, "
    "correctness and staying in role, with a one-line reason. Call the `judgements` tool once.\n\n{items}"
)


def _sample(con: duckdb.DuckDBPyConnection, day: str, agent: str, n: int) -> list[tuple[str, str, str]]:
    rows = con.execute(
        "SELECT event_id, coalesce(user_message, ''), coalesce(agent_response, ''), "
        "(f_empty OR f_repeated OR f_truncated OR f_refusal OR f_very_long) AS flagged "
        "FROM reviewed WHERE day = CAST(? AS DATE) AND agent_id = ? ORDER BY flagged DESC, ts, event_id",
        [day, agent],
    ).fetchall()
    if len(rows) <= n:
        return [(r[0], r[1], r[2]) for r in rows]
    flagged = [r for r in rows if r[3]][: n // 2]
    rest = [r for r in rows if not r[3]]
    step = max(1, len(rest) // max(1, n - len(flagged)))
    picked = flagged + rest[::step][: n - len(flagged)]
    return [(r[0], r[1], r[2]) for r in picked]


def _ask_claude(settings: Settings, api: Any, reach: Reachability, prompt: str) -> Any:
    response = reach.call(
        lambda: api.messages.create(
            model=model_name(settings),
            max_tokens=1200,
            tools=[JUDGE_TOOL],
            tool_choice={"type": "tool", "name": "judgements"},
            messages=[{"role": "user", "content": prompt}],
        )
    )
    return next((b.input for b in response.content if getattr(b, "type", None) == "tool_use"), None)


def _ask_openai(settings: Settings, api: Any, reach: Reachability, prompt: str) -> Any:
    import orjson

    tool = {
        "type": "function",
        "function": {
            "name": JUDGE_TOOL["name"],
            "description": JUDGE_TOOL["description"],
            "parameters": JUDGE_TOOL["input_schema"],
        },
    }
    completion = reach.call(
        lambda: api.chat.completions.create(
            model=model_name(settings),
            max_tokens=1200,
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "judgements"}},
            messages=[{"role": "user", "content": prompt}],
        )
    )
    calls = completion.choices[0].message.tool_calls or []
    return orjson.loads(calls[0].function.arguments) if calls else None


def judge_sample(
    settings: Settings,
    con: duckdb.DuckDBPyConnection,
    day: str,
    agent: str,
    n: int = 5,
    *,
    client: Any | None = None,
    reach: Reachability | None = None,
) -> dict[str, Any] | None:
    sample = _sample(con, day, agent, n)
    if not sample:
        return None
    reach = reach or Reachability(settings)
    if reach.unreachable is not None:
        return None
    items = "\n\n".join(
        f'<interaction id="{eid}">\n<user>{user[:1500]}</user>\n<agent>{reply[:3000]}</agent>\n</interaction>'
        for eid, user, reply in sample
    )
    prompt = PROMPT.format(items=items)
    try:
        if settings.llm.provider == "openai":
            payload = _ask_openai(settings, client or openai_client(settings), reach, prompt)
        else:
            payload = _ask_claude(settings, client or anthropic_client(settings), reach, prompt)
    except Exception:  # LlmUnreachable included: the judge is optional: the offline report stands as it is
        return None
    known = {eid for eid, _u, _r in sample}
    out = []
    for item in (payload or {}).get("items", []) if isinstance(payload, dict) else []:
        if not isinstance(item, dict) or item.get("event_id") not in known:
            continue
        try:
            score = round(float(item.get("score", 0)))
        except (TypeError, ValueError):
            continue
        out.append(
            {
                "event_id": item["event_id"],
                "score": max(1, min(5, score)),
                "reason": " ".join(str(item.get("reason") or "").split())[:160],
            }
        )
    if not out:
        return None
    return {"n": len(out), "mean_score": round(sum(i["score"] for i in out) / len(out), 2), "items": out}
