"""A posted turn's body, read once: the common case checked by hand, the rest by the route's model.

The route's contract is the `TurnIn` model (`routes.py`): its fields, types,
limits and `extra="forbid"`. Most posted turns are plain: each field present
has exactly the JSON type the model declares and is within its limits. For
those, `plain_turn` gives what the model would (the same values, the fields in
the model's order, nulls left out, an integer latency as a float) with a loop
over the body's keys instead of the model's validation and dump. Anything else
— an unknown field, a value of another type (which the model might coerce), a
limit exceeded, a required field missing — is not decided here: the model
decides, and a body it refuses goes to the framework route, whose 422 names
the field. So the answers stay the route's; the hand check only answers
sooner for what the model accepts as it is (tested against the model over
generated bodies).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, get_args

import orjson
import pydantic

from tiermem.app.server.routes import ID_MAX, SHORT_MAX, TEXT_MAX, Level, TurnIn

# The model's keyword limits on its lists (routes.py: `tools_used`, `attachments`).
TOOLS_MAX = 100
ATTACHMENTS_MAX = 16
LEVELS = frozenset(get_args(Level))
OMITTED = ("user", "user_message", "agent_response")  # kept apart from the fields, as the route does

_NOT_PLAIN: Any = object()


def _ident(value: Any) -> Any:
    return value if type(value) is str and 0 < len(value) <= ID_MAX else _NOT_PLAIN


def _text(value: Any) -> Any:
    return value if type(value) is str and len(value) <= TEXT_MAX else _NOT_PLAIN


def _short(value: Any) -> Any:
    return value if type(value) is str and len(value) <= SHORT_MAX else _NOT_PLAIN


def _level(value: Any) -> Any:
    return value if type(value) is str and value in LEVELS else _NOT_PLAIN


def _usage(value: Any) -> Any:
    if type(value) is not dict or any(type(n) is not int for n in value.values()):
        return _NOT_PLAIN
    return dict(value)


def _tools(value: Any) -> Any:
    if type(value) is not list or len(value) > TOOLS_MAX:
        return _NOT_PLAIN
    if any(type(v) is not str or not 0 < len(v) <= ID_MAX for v in value):
        return _NOT_PLAIN
    return list(value)


def _latency(value: Any) -> Any:
    if type(value) is float and value >= 0:
        return value
    return float(value) if type(value) is int and value >= 0 else _NOT_PLAIN  # the model's float


def _object(value: Any) -> Any:
    return value if type(value) is dict else _NOT_PLAIN


def _attachments(value: Any) -> Any:
    if type(value) is not list or len(value) > ATTACHMENTS_MAX:
        return _NOT_PLAIN
    return value if all(type(v) is dict for v in value) else _NOT_PLAIN


# Every field of `TurnIn`, in its order, with the check of its plain values (the tests compare
# the names and the order with the model's).
KINDS: dict[str, Callable[[Any], Any]] = {
    "user": _ident,
    "user_message": _text,
    "agent_response": _text,
    "session_id": _ident,
    "project_id": _ident,
    "task_id": _ident,
    "memory_level": _level,
    "event_id": _ident,
    "model": _ident,
    "usage": _usage,
    "tools_used": _tools,
    "latency_ms": _latency,
    "selection_reason": _short,
    "approval_status": _ident,
    "channel": _ident,
    "metadata": _object,
    "attachments": _attachments,
}
ORDER = tuple(name for name in KINDS if name not in OMITTED)
RANK = {name: rank for rank, name in enumerate(KINDS)}
# The fields whose plain value is a string, by their (least, most) characters.
TEXTS: dict[str, tuple[int, int]] = {
    name: (1, ID_MAX) if check is _ident else (0, TEXT_MAX if check is _text else SHORT_MAX)
    for name, check in KINDS.items()
    if check in (_ident, _text, _short)
}


class PostedTurn(NamedTuple):
    """A turn the route accepts: its user and texts, and its other fields as the route passes them on."""

    user: str
    user_message: str
    agent_response: str
    fields: dict[str, Any]


# 19 digits in a row may be a number beyond 64 bits: found as 19 zeros in the body with every
# digit made a zero and every other byte a space (one pass in C; a regular expression scan
# cost several times as much).
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER = b"0" * 19


def parse_turn(body: bytes) -> PostedTurn | None:
    """The validated turn, or None when the framework route must answer (with its own 422)."""
    if _LONG_NUMBER in body.translate(_DIGITS):
        # orjson reads an integer beyond 64 bits as a float: the turn would be stored with
        # another number where the framework's parser keeps it exact and the log refuses it.
        return None
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict:
        return None
    turn = plain_turn(data)
    if turn is not None:
        return turn
    try:
        model = TurnIn.model_validate(data)
    except pydantic.ValidationError:
        return None
    return from_model(model)


def from_model(model: TurnIn) -> PostedTurn:
    fields = model.model_dump(exclude_none=True, exclude=set(OMITTED))
    return PostedTurn(model.user, model.user_message, model.agent_response, fields)


def plain_turn(data: dict[str, Any]) -> PostedTurn | None:
    """What `TurnIn` makes of `data` when every field is exactly of its declared JSON type and
    within its limits; None when the model must decide."""
    fields: dict[str, Any] = {}
    last = -1  # the rank of the last field kept: the model's order is the output's
    ordered = True
    for name, value in data.items():
        if type(value) is str:  # most fields: their limits looked up at once
            bounds = TEXTS.get(name)
            if bounds is None:
                if name != "memory_level" or value not in LEVELS:
                    return None
            elif not bounds[0] <= len(value) <= bounds[1]:
                return None
        elif value is None:
            if name in OMITTED or name not in KINDS:
                return None
            continue
        else:
            check = KINDS.get(name)
            if check is None:
                return None
            value = check(value)
            if value is _NOT_PLAIN:
                return None
        fields[name] = value
        rank = RANK[name]
        ordered = ordered and rank > last
        last = rank
    try:
        user, message, response = fields.pop("user"), fields.pop("user_message"), fields.pop("agent_response")
    except KeyError:
        return None
    if not ordered:
        fields = {name: fields[name] for name in ORDER if name in fields}
    return PostedTurn(user, message, response, fields)
