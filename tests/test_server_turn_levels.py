"""A posted turn without a level takes the agent's current level as it is when its batch is built.

The server keeps each agent's level between batches (`runtime.level_cache`);
these checks change the level from other processes, and post the server's own
turns, and compare every answer's `memory_level` with the level read afresh from
the hot store by the test (a connection of its own, nothing kept).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers_server import make_key, running_server, settings_for
from tiermem.runtime.hotstore import connect
from tiermem.runtime.levels import current_level
from tiermem.runtime.visibility import Principal

AGENT = "level-bot"

# Another process: one agent-level turn at a level, or the end of the agent's task or project.
OTHER_PROCESS = """
import sys
from pathlib import Path
from tiermem.app.api import Memory
from tiermem.settings import resolve_settings

data_dir, what, level = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
with Memory(resolve_settings(data_dir=data_dir, env={})) as mem:
    agent = mem.agent(sys.argv[4])
    if what == "turn":
        agent.record_turn(None, "where are we?", "working on it", memory_level=level)
    else:
        agent.record_turn(None, "plan the project", "planned", memory_level="project")
        agent.record_turn(None, "do the task", "doing it", memory_level="task")
        agent.finish_task("the task is done")
"""


def _other_process(data_dir: Path, what: str, level: str = "", agent: str = AGENT) -> None:
    subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(data_dir), what, level, agent], check=True)


def _fresh_level(data_dir: Path, agent: str = AGENT) -> str:
    conn = connect(settings_for(data_dir).hot_db, create=False)
    try:
        return current_level(conn, Principal(agent, None, None, None))
    finally:
        conn.close()


def _post(client: Any, n: int, agent: str = AGENT, **extra: Any) -> str:
    body = {"user": "alice", "user_message": f"question {n}", "agent_response": f"answer {n}", **extra}
    response = client.post(f"/v1/agents/{agent}/turns", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["memory_level"])


def test_turns_take_the_level_other_processes_and_earlier_turns_left(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    key = make_key(data_dir, operator=True)
    with running_server(data_dir) as server, server.client(key) as client:
        assert _post(client, 0) == "global"
        n = 1
        for what, level in (
            ("turn", "task"),
            ("turn", "project"),
            ("finish", ""),  # a task outside any project, and its end: back at global
            ("turn", "task"),
            ("turn", "global"),
        ):
            _other_process(data_dir, what, level)
            expected = _fresh_level(data_dir)
            assert expected == (level or "global")
            for _ in range(3):  # the next batch, and the ones after it, see it
                assert _post(client, n) == expected
                n += 1
            # The server's own turns with a level belong to their user: the agent's level stays.
            assert _post(client, n, memory_level="task" if expected != "task" else "global") != expected
            assert _post(client, n + 1) == expected == _fresh_level(data_dir)
            n += 2
        # Another agent's level is its own.
        _other_process(data_dir, "turn", "project", agent="other-bot")
        assert _post(client, n, agent="other-bot") == "project"
        assert _post(client, n + 1) == "global"
