"""tau2 parity: a tool call answered exactly as tau2-bench's own environment answers it.

flatscore's default mode validates arguments against a schema and writes compact JSON; tau2
does neither. It calls the tool's Python function with whatever arguments the model sent,
reports any exception as ``Error: <message>`` (so a wrong argument name gets Python's own
``TypeError`` text), and turns a result into text its own way: a pydantic record is dumped
as it is stored (floats unrounded) and written with ``json.dumps``'s default separators,
while numbers inside plain lists and dicts become strings. Parity mode reproduces that, so
that a model in flatscore reads, byte for byte, what it would read in tau2.

Why here and not in the engine: what a call answers is the domain's business; the engine
only classifies the failure into a channel (the classification does not change the text).
"""

from __future__ import annotations

import inspect
import json
import types
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Callable

from pydantic import BaseModel

from .environment import Environment, UnknownToolError
from .toolkit import ArgumentsError, Side, Toolkit, render_result


class Tau2UnknownTool(UnknownToolError):
    """The requested side has no such tool; ``str()`` is tau2's text, not KeyError's quoted key."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class NoUserTools(ValueError):
    """A user-side call in a domain whose user has no tools (retail)."""


@dataclass(frozen=True)
class ToolAnswer:
    """What the caller reads (``content``), whether tau2 flags it as an error, and the cause."""

    content: str
    error: bool
    exception: BaseException | None = None


def tau2_text(value: Any) -> str:
    """A tool's return value as tau2 shows it to the model.

    Strings pass unchanged; anything else becomes JSON with ``json.dumps``'s default
    separators (``{"a": 1}``). A pydantic record is dumped in Python mode and written as
    stored; numbers and booleans met outside a record (in a list or dict the tool built)
    become strings, as tau2's serializer makes them.
    """
    if isinstance(value, str):
        return value
    return json.dumps(_plain(value), default=str)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, str) or value is None:
        return value
    if isinstance(value, (bool, int, float)):
        return str(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise ValueError(f"Unsupported type: {type(value)}")


def call_as_python(kit: Toolkit, name: str, arguments: dict[str, Any]) -> Any:
    """Call a tool the way Python calls a function: no schema, the arguments as sent.

    Arguments that do not fit the signature raise :class:`ArgumentsError` carrying the
    ``TypeError`` text Python itself writes for the call, named after the toolkit's class
    (``RetailTools.get_order_details() got an unexpected keyword argument 'id'``).
    """
    kit.tau2_parity = True
    method = getattr(kit, kit.specs[name].method_name)
    try:
        inspect.signature(method).bind(**arguments)
    except TypeError:
        raise ArgumentsError(_python_binding_error(type(kit).__name__, name, method.__func__, arguments)) from None
    return method(**arguments)


def _python_binding_error(owner: str, name: str, func: Callable, arguments: dict[str, Any]) -> str:
    """Python's own message for a call whose arguments do not bind (the body never runs)."""
    stand_in = types.FunctionType(func.__code__, func.__globals__, name, func.__defaults__, func.__closure__)
    stand_in.__kwdefaults__ = func.__kwdefaults__
    stand_in.__qualname__ = f"{owner}.{name}"
    try:
        stand_in(None, **arguments)
    except TypeError as exc:
        return str(exc)
    raise AssertionError(f"{owner}.{name}: arguments {sorted(arguments)} were expected not to bind")


def tau2_answer(env: Environment, side: Side, name: str, arguments: dict[str, Any], sync: bool = True) -> ToolAnswer:
    """Answer one call as tau2 does.

    Like tau2, the cross-side sync runs only after a call that succeeded; ``sync=False`` is how
    tau2 replays a task's gold actions (``make_tool_call``: no sync between them).
    """
    try:
        kit = env.toolkit(side)
        if kit is None:
            raise NoUserTools("User tools not available")
        if name not in kit.specs:
            raise Tau2UnknownTool(f"Tool '{name}' not found.")
        result = call_as_python(kit, name, arguments)
        if sync:
            env.sync()
    except Exception as exc:  # tau2 answers every failure of a call with its text
        return ToolAnswer(f"Error: {exc}", True, exc)
    return ToolAnswer(tau2_text(result), False)


def answer_call(
    env: Environment, side: Side, name: str, arguments: dict[str, Any], tau2_parity: bool = False
) -> ToolAnswer:
    """One call's answer: tau2's (parity mode) or flatscore's own (schema-checked, compact JSON)."""
    if tau2_parity:
        return tau2_answer(env, side, name, arguments)
    try:
        result = env.invoke(side, name, arguments)
    except Exception as exc:  # every failure of a call is data, never a crash
        text = f"Error: Tool '{name}' not found." if isinstance(exc, UnknownToolError) else f"Error: {exc}"
        return ToolAnswer(text, True, exc)
    return ToolAnswer(render_result(result), False)
