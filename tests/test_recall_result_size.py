"""The recall tool prices each item from the sizes it keeps (`tools._RecallResult`): what writing the
whole result out as JSON would count, for any text (quotes, backslashes, control characters,
non-ASCII), so the same items fit."""

from __future__ import annotations

import random

from tiermem.runtime import tools

ALPHABET = ["a", "Z", " ", '"', "\\", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "日", "😀", "/", "\u2028", "'"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40)))


def _replayed(result: tools._RecallResult, added: list[tuple[int, dict[str, object]]]) -> tools._RecallResult:
    """The same additions made by writing the whole result out at each one (what the tool did)."""
    plain = tools._RecallResult()
    for cap, kwargs in added:
        lists = [plain.memories, plain.episode_lines, plain.turn_lines, plain.turns]
        before = [len(x) for x in lists]
        memory, turn, header = kwargs.get("memory"), kwargs.get("turn"), kwargs.get("header")
        if memory is not None:
            plain.memories.append(memory[0])  # type: ignore[index]
            plain.episode_lines.append(memory[1])  # type: ignore[index]
        if header is not None and header not in plain.turn_lines:
            plain.turn_lines.append(header)  # type: ignore[arg-type]
            plain.turns.append({"line": header, "event_ids": []})
        if turn is not None:
            plain.turn_lines.append(turn[0])  # type: ignore[index]
            plain.turns.append({"line": turn[0], "event_ids": turn[1]})  # type: ignore[index]
        if plain.cost() > cap:
            for x, n in zip(lists, before, strict=True):
                del x[n:]
    return plain


def test_items_fit_as_writing_the_whole_result_out_fits_them() -> None:
    rng = random.Random(6)
    fitted = refused = 0
    for _ in range(300):
        result = tools._RecallResult()
        assert result.kept_cost() == result.cost()
        added: list[tuple[int, dict[str, object]]] = []
        for _ in range(rng.randint(1, 25)):
            cap = rng.randint(10, 400)
            kind = rng.random()
            kwargs: dict[str, object]
            if kind < 0.3:
                entry = {
                    "episode_id": _text(rng),
                    "name": _text(rng),
                    "score": rng.choice([None, 0.5, 1e-7, 3.0]),
                }
                kwargs = {"memory": (entry, _text(rng))}
            else:
                header = rng.choice([None, _text(rng), "Since I last went over my memories:"])
                kwargs = {
                    "turn": (_text(rng), [_text(rng) for _ in range(rng.randint(0, 3))]),
                    "header": header,
                }
            added.append((cap, kwargs))
            if result.try_add(cap, **kwargs):  # type: ignore[arg-type]
                fitted += 1
            else:
                refused += 1
            assert result.kept_cost() == result.cost()
        plain = _replayed(result, added)
        assert result.render() == plain.render()
    assert fitted > 500 and refused > 500
