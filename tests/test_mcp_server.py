"""`tiermem mcp`: the SDK's own client against the real `tiermem mcp` subprocess."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from helpers_scheduler import REPO
from mcp import ClientSession, StdioServerParameters, stdio_client

from tiermem.app.mcp_server import call_as_mcp, mcp_tools
from tiermem.errors import ValidationError

REQUIRED_TOOLS = {
    "recall_memory",
    "memory_recall",
    "memory_fact_store",
    "memory_fact_recall",
    "memory_fact_list",
    "memory_idea_save",
    "memory_idea_recall",
}


def _session(
    data: Path,
    agent: str,
    body: Callable[[ClientSession], Awaitable[Any]],
    *extra: str,
    env: dict[str, str] | None = None,
) -> Any:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tiermem.app.cli", "--data-dir", str(data), "mcp", "--agent", agent, *extra],
        cwd=str(REPO),
        env=env,  # added to the SDK's default environment
    )

    # The server's stderr goes to a real file: the SDK hands it to the subprocess by file
    # descriptor, and whatever stands in for sys.stderr in a test run may have none.
    with tempfile.TemporaryFile("w+") as errlog:

        async def run() -> Any:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return await body(session)

        try:
            return anyio.run(run)
        except BaseException:
            errlog.seek(0)
            sys.stderr.write(errlog.read()[-4000:])
            raise


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


@pytest.mark.slow
def test_client_lists_tools_and_round_trips_a_fact_and_an_idea(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def body(s: ClientSession) -> dict[str, Any]:
        listed = await s.list_tools()
        out: dict[str, Any] = {"tools": {t.name: t for t in listed.tools}}
        out["store"] = await s.call_tool("memory_fact_store", {"key": "deploy_branch", "value": "release/7"})
        out["recall"] = await s.call_tool("memory_fact_recall", {"key": "deploy_branch"})
        out["save"] = await s.call_tool(
            "memory_idea_save",
            {"content": "Flaky payment tests were caused by a shared Redis fixture", "topic": "testing"},
        )
        out["idea"] = await s.call_tool("memory_idea_recall", {"query": "why were payment tests flaky"})
        out["bad"] = await s.call_tool("memory_fact_store", {"value": "no key"})
        out["unknown"] = await s.call_tool("memory_teleport", {})
        out["spoof"] = await s.call_tool("memory_fact_recall", {"key": "deploy_branch", "agent_id": "other"})
        # The server is still alive after the errors.
        out["after"] = await s.call_tool("memory_fact_list", {})
        return out

    out = _session(data, "coder", body)
    tools = out["tools"]
    assert set(tools) >= REQUIRED_TOOLS
    for tool in tools.values():
        assert tool.description, tool.name
        assert tool.input_schema["type"] == "object"
        assert "agent_id" not in tool.input_schema.get("properties", {})
    assert "query" in tools["recall_memory"].input_schema["required"]
    assert "your own memor" in tools["recall_memory"].description.lower()  # first person

    assert not out["store"].is_error, _text(out["store"])
    assert not out["recall"].is_error and "release/7" in _text(out["recall"])
    assert not out["save"].is_error, _text(out["save"])
    assert not out["idea"].is_error and "shared Redis fixture" in _text(out["idea"])
    assert out["bad"].is_error and "key" in _text(out["bad"])
    assert out["unknown"].is_error and "unknown tool" in _text(out["unknown"])
    assert out["spoof"].is_error and "agent_id" in _text(out["spoof"])
    assert not out["after"].is_error and "deploy_branch" in _text(out["after"])

    # Another agent's server does not see the fact: the agent is bound by the server, not by arguments.
    async def other(s: ClientSession) -> types.CallToolResult:
        return await s.call_tool("memory_fact_recall", {"key": "deploy_branch"})

    assert "release/7" not in _text(_session(data, "someone-else", other))


def test_errors_become_tool_errors_never_exceptions() -> None:
    """call_as_mcp with a TEST DOUBLE caller: each failure mode is an isError result."""

    def caller(memory: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
        if name == "bad":
            raise ValidationError("key", "required")
        if name == "bug":
            raise KeyError("oops")
        return {"ok": True, "args": args}

    known = {"bad", "bug", "fine"}
    assert call_as_mcp(None, caller, known, "bad", {}).is_error
    bug = call_as_mcp(None, caller, known, "bug", None)
    assert bug.is_error and "internal error" in _text(bug)
    assert call_as_mcp(None, caller, known, "nope", {}).is_error
    fine = call_as_mcp(None, caller, known, "fine", {"q": 1})
    assert not fine.is_error and fine.structured_content == {"ok": True, "args": {"q": 1}}


def test_schema_never_exposes_the_agent_id() -> None:
    spec = {
        "name": "t",
        "description": "d",
        "input_schema": {
            "type": "object",
            "properties": {"agent_id": {"type": "string"}, "query": {"type": "string"}},
            "required": ["agent_id", "query"],
        },
    }
    (tool,) = mcp_tools([spec])
    assert tool.input_schema["properties"] == {"query": {"type": "string"}}
    assert tool.input_schema["required"] == ["query"]
