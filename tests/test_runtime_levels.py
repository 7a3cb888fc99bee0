"""Memory levels: the filter semantics of docs/runtime.md, transitions, and a multi-task scenario."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from tiermem.runtime.levels import filter_by_level, recent_items
from tiermem.runtime.memory import AgentMemory, open_memory, record_turn
from tiermem.runtime.visibility import Principal, can_read_item

from tiermem.settings import Settings
from tiermem.tokens import count_tokens


def _items(levels: str) -> list[dict[str, str]]:
    names = {"g": "global", "p": "project", "t": "task"}
    return [{"id": str(i), "memory_level": names[c]} for i, c in enumerate(levels)]


def _ids(items: list[dict[str, str]]) -> str:
    return ",".join(i["id"] for i in items)


def test_global_level_sees_only_global_items() -> None:
    items = _items("gptgpt")
    assert _ids(filter_by_level(items, "global")) == "0,3"


def test_project_level_walks_back_skipping_tasks_until_a_global_item() -> None:
    #            0123456789
    items = _items("ppgptpttpt")
    # From the end: 9 t skip, 8 p take, 7 t, 6 t, 5 p take, 4 t, 3 p take, 2 g stop.
    assert _ids(filter_by_level(items, "project")) == "3,5,8"


def test_task_level_is_the_trailing_run_of_task_items() -> None:
    items = _items("tttpttt")
    assert _ids(filter_by_level(items, "task")) == "4,5,6"
    assert filter_by_level(_items("tttp"), "task") == []


def test_project_level_with_no_global_item_takes_every_project_item() -> None:
    assert _ids(filter_by_level(_items("ptpp"), "project")) == "0,2,3"


def _seed_scenario(memory: AgentMemory) -> None:
    """An orchestrator's project with 10 project actions and 3 tasks of 20 actions each."""
    memory.level = "global"
    record_turn(memory, "Please build an organisation chart", "I will plan it as a project.")
    memory.level = "project"
    for i in range(4):
        record_turn(memory, f"plan step {i}", f"planned step {i} of the chart")
    for task in range(3):
        record_turn(memory, f"create task {task}", f"task {task} created and assigned")
        memory.level = "task"
        memory.task_id = f"task-{task}"
        for action in range(20):
            record_turn(memory, f"move shape {action} of task {task}", f"moved shape {action} 2 pixels left")
        memory.finish_task(f"I finished task {task}: the chart's part {task} is drawn.")
        assert memory.level == "project"
    for i in range(3):
        record_turn(memory, f"review {i}", f"reviewed part {i}")


def test_seed_scenario_orchestrator_sees_16_items_instead_of_70(settings: Settings) -> None:
    with open_memory(settings, "orchestrator", project_id="chart") as memory:
        _seed_scenario(memory)
        conn = memory.conn
        everything = conn.execute(
            "SELECT * FROM wm_items WHERE agent_id='orchestrator' ORDER BY ts, item_id"
        ).fetchall()
        actions = [r for r in everything if r["kind"] == "interaction" and r["level"] != "global"]
        assert len(actions) == 70  # 10 project actions + 3 x 20 task actions
        seen = recent_items(conn, memory.principal, "project", 1000)
        assert len(seen) == 16
        kinds = [i.kind for i in seen]
        assert kinds.count("interaction") == 10
        assert kinds.count("transition") == 3
        assert kinds.count("summary") == 3
        assert all("move shape" not in (i.user_message or "") for i in seen)
        full = sum(count_tokens(f"{r['user_message']} {r['agent_response']}") for r in actions)
        filtered = sum(count_tokens(i.render()) for i in seen)
        assert filtered < full * 0.5
        # After the transition the task level sees nothing of the finished task.
        assert recent_items(conn, memory.principal, "task", 100) == []
        # Global level: only the request that started the project.
        assert [i.user_message for i in recent_items(conn, memory.principal, "global", 100)] == [
            "Please build an organisation chart"
        ]


def test_transition_items_carry_the_summary_at_the_level_returned_to(settings: Settings) -> None:
    with open_memory(settings, "worker", project_id="drawing", level="task") as memory:
        record_turn(memory, "draw a box", "drawn")
        memory.finish_task("Drew the box.")
        items = recent_items(memory.conn, memory.principal, "project", 10)
        assert [(i.kind, i.level) for i in items] == [("transition", "project"), ("summary", "project")]
        assert items[0].text == "[ACTIONS]: <Task actions filtered for brevity>"
        assert items[1].text == "Drew the box."
        memory.finish_project("Finished the drawing project.")
        top = recent_items(memory.conn, memory.principal, "global", 10)
        assert [i.text for i in top] == [
            "[ACTIONS]: <Project actions filtered for brevity>",
            "Finished the drawing project.",
        ]


LEVEL_STRINGS = st.lists(
    st.tuples(st.sampled_from(["global", "project", "task"]), st.sampled_from([None, "alice", "bob"])),
    min_size=0,
    max_size=30,
)


@hsettings(max_examples=40, deadline=None)
@given(turns=LEVEL_STRINGS, limit=st.integers(min_value=1, max_value=8))
def test_store_query_equals_the_seed_filter(
    tmp_path_factory: object, turns: list[tuple[str, str | None]], limit: int
) -> None:
    """For every principal, the store's answer is the level filter over the history it may read."""
    from tiermem.settings import resolve_settings

    root = tmp_path_factory.mktemp("lv")  # type: ignore[attr-defined]
    s = resolve_settings(data_dir=root, env={}, fsync="none")
    with open_memory(s, "a") as memory:
        for n, (level, user) in enumerate(turns):
            record_turn(memory, f"m{n}", "r", memory_level=level, user=user)
        everything = memory.conn.execute(
            "SELECT item_id, level, owner FROM wm_items WHERE agent_id='a' ORDER BY ts, item_id"
        ).fetchall()
        for who in (Principal("a"), Principal("a", "alice"), Principal("a", "bob")):
            items = [{"id": r[0], "memory_level": r[1]} for r in everything if can_read_item(who, "a", r[2])]
            for level in ("global", "project", "task"):
                expected = [i["id"] for i in filter_by_level(items, level)][-limit:]
                got = [i.item_id for i in recent_items(memory.conn, who, level, limit)]
                assert got == expected, (turns, who, level)
