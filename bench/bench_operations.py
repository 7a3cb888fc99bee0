"""Operations benchmark: what the scheduler's frequent jobs, the session-end hook and MCP calls cost.

    .venv/bin/python bench/bench_operations.py

1. the threshold check when no agent is due (runs every `threshold_check_seconds`),
   with 200 agents x 12 logged interactions;
2. the job wrapper alone (lock + run log) around a no-op;
3. `end_session` with the inline session-end path (gap-fill + compress check)
   for an 8-turn session of an agent under its limit;
4. MCP tool calls over stdio against a real `tiermem mcp` subprocess:
   start-up to first `initialize`, then p50/p99 of `memory_fact_recall`.

No performance target covers these; they show the scheduler's frequent check
is cheap enough to run every minute and the MCP layer adds little to the tools.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client
from tiermem.compressor.job import compress_due
from tiermem.runtime.memory import end_session, open_memory, record_turn

from tiermem.app.jobs import run_job
from tiermem.app.sessions import handle_session_end
from tiermem.eventlog import EventLog
from tiermem.ids import derived_event_id, format_ts
from tiermem.settings import resolve_settings

REPO = Path(__file__).resolve().parent.parent


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1000:.1f} ms, p99 {pct(values, 0.99) * 1000:.1f} ms (n={len(values)})"


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="tiermem-bench-ops-"))
    settings = resolve_settings(data_dir=root / "data", env={})
    start = datetime(2026, 1, 1, tzinfo=UTC)
    records = []
    for a in range(200):
        for i in range(12):
            ts = start + timedelta(minutes=a * 20 + i)
            records.append(
                {
                    "type": "interaction",
                    "event_id": derived_event_id(ts, "bench-ops", str(a), str(i)),
                    "ts": format_ts(ts),
                    "agent_id": f"agent-{a:03d}",
                    "user": "u",
                    "user_message": f"question {i} about topic {a}",
                    "agent_response": f"answer {i}",
                }
            )
    with EventLog(settings) as log:
        log.append_many(records)

    checks = []
    for _ in range(20):
        t = time.perf_counter()
        info = compress_due(settings)
        checks.append(time.perf_counter() - t)
        assert info.agents == 0
    print(f"threshold check, nothing due (200 agents, 2,400 interactions): {ms(checks)}")

    wrapper = []
    for _ in range(200):
        t = time.perf_counter()
        run_job(settings, "evolve", func=lambda s: None, echo=open("/dev/null", "w"))  # noqa: SIM115
        wrapper.append(time.perf_counter() - t)
    print(f"job wrapper around a no-op (flock + 2 run-log lines): {ms(wrapper)}")

    ends = []
    for n in range(10):
        with open_memory(
            settings, f"agent-{n:03d}", user="u", session_id=f"bench-{n}", on_session_end=handle_session_end
        ) as memory:
            for i in range(8):
                record_turn(memory, f"I prefer email, not phone (#{i})", "Noted.")
            t = time.perf_counter()
            end_session(memory)
            ends.append(time.perf_counter() - t)
    print(f"end_session, inline path (gap-fill + compress check, 8-turn session): {ms(ends)}")

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tiermem.app.cli", "--data-dir", str(settings.data_dir), "mcp", "--agent", "agent-000"],
        cwd=str(REPO),
    )

    async def mcp_bench() -> tuple[float, list[float]]:
        t0 = time.perf_counter()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            ready = time.perf_counter() - t0
            await session.call_tool("memory_fact_store", {"key": "deploy_branch", "value": "main"})
            calls = []
            for _ in range(300):
                t = time.perf_counter()
                result = await session.call_tool("memory_fact_recall", {"key": "deploy_branch"})
                calls.append(time.perf_counter() - t)
                assert not result.is_error
            return ready, calls

    ready, calls = anyio.run(mcp_bench)
    print(f"tiermem mcp: start-up to initialized {ready:.2f} s; memory_fact_recall round trip: {ms(calls)}")
    print(f"(data under {root})")


if __name__ == "__main__":
    main()
