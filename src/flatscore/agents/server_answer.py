"""A server's chat answer -> the agent's turn, with what the server's tool-call parsing got wrong.

A server started with a tool-call parser (vLLM ``--enable-auto-tool-choice --tool-call-parser
hermes``, ``transformers serve``) returns well-formed calls as ``message.tool_calls`` and leaves
anything its parser could not read in ``message.content``. vLLM's hermes parser, for one, gives up
on the whole answer when a single block fails (and logs a traceback), including blocks flatscore's
own parser reads as well formed, e.g. a zero-argument call written without ``"arguments"``
(``tests/data/vllm_answers``). Such misses are the server's, not the model's; the turn still runs
the call, and the miss is reported (``server_missed_call``) beside the model's errors, never
counted toward the budget.

The answer is read from the server's message as it arrived (``ModelResponse.server``), so what is
off the OpenAI format is seen, not smoothed away by the backend:

* readable departures (``tool_calls`` an object instead of a list, a call without its
  ``function`` wrapper, ``arguments`` an object or missing instead of a JSON string, ``content``
  not text) are used as meant and each reported as ``server_bad_answer``;
* unreadable ones (``tool_calls`` neither list nor object, a call that is not an object or has no
  string ``function.name``, ``arguments`` of another type) make the turn malformed *in the
  server's channel*: the agent is told its call could not be read, as for a malformed call, but
  nothing is charged to the model. Never a crash, never a silent drop.

What the model got wrong inside a readable call (arguments that are not JSON, not an object, an
empty name) stays the model's ``malformed_call``; a call to a tool the request did not list is
executed and classified by the engine (``invented_tool`` / ``other_side_tool``) wherever it came
from. Channel names are plain strings here (agents may not import the engine); the engine's
``Channel`` holds the same values (checked by ``tests/agents/test_server_answer.py``).
"""

from __future__ import annotations

import json
from typing import Any

from .base import STOP_TOKEN, TurnOutput
from .toolcall_parser import parse_hermes, parse_openai

SERVER_MISSED_CALL = "server_missed_call"
SERVER_BAD_ANSWER = "server_bad_answer"

#: (channel, tool, detail) of one server event
Event = tuple[str, str, str]


class _Unreadable(ValueError):
    """The server's tool calls cannot be read at all (the reason is the message)."""


def _type(value: Any) -> str:
    return type(value).__name__


def _content(value: Any) -> tuple[str, list[Event]]:
    """The message text. Content parts (a list) are joined as the OpenAI format allows."""
    if value is None:
        return "", []
    if isinstance(value, str):
        return value, []
    if isinstance(value, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in value), []
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text, [(SERVER_BAD_ANSWER, "", f"content is a {_type(value)}, not a string")]


def _entry(i: int, tc: Any) -> tuple[dict[str, Any], list[Event]]:
    """One call in the OpenAI shape ``{"function": {"name", "arguments"}}`` and its departures."""
    if not isinstance(tc, dict):
        raise _Unreadable(f"tool call #{i} is a {_type(tc)}, not an object")
    events: list[Event] = []
    fn = tc.get("function")
    if not isinstance(fn, dict):
        if "name" not in tc:
            raise _Unreadable(f"tool call #{i} has no function object")
        fn = tc
        events.append((SERVER_BAD_ANSWER, "", f"tool call #{i} has no function object (name at its top level)"))
    name = fn.get("name")
    if not isinstance(name, str):
        raise _Unreadable(f"tool call #{i} has no string function.name")
    args = fn.get("arguments")
    if args is None:
        events.append((SERVER_BAD_ANSWER, name, f"tool call #{i}: function.arguments missing"))
    elif isinstance(args, dict):
        events.append((SERVER_BAD_ANSWER, name, f"tool call #{i}: function.arguments is an object, not a JSON string"))
    elif not isinstance(args, str):
        raise _Unreadable(f"tool call #{i} ({name}): function.arguments is a {_type(args)}")
    return {"function": {"name": name, "arguments": args}}, events


def _entries(value: Any) -> tuple[list[dict[str, Any]], list[Event]]:
    """The server's calls in the OpenAI shape, and the departures from it that were read anyway."""
    if value is None or value == []:
        return [], []
    events: list[Event] = []
    if isinstance(value, dict):
        value = [value]
        events.append((SERVER_BAD_ANSWER, "", "tool_calls is an object, not a list"))
    elif not isinstance(value, list):
        raise _Unreadable(f"tool_calls is a {_type(value)}, not a list")
    calls = []
    for i, tc in enumerate(value):
        call, found = _entry(i, tc)
        calls.append(call)
        events.extend(found)
    return calls, events


def _raw(server: dict[str, Any]) -> str:
    return json.dumps(server, ensure_ascii=False, default=str)


def parse_server_answer(server: dict[str, Any], turn: int = 0, tools_offered: bool = True) -> TurnOutput:
    """The turn a server's answer stands for; ``server_events`` say what the server got wrong.

    ``tools_offered``: whether the request listed tools (a server parses calls only then, so a
    call found in the text of an answer to a request without tools is no miss). Never raises.
    """
    try:
        out = _parse(server, turn, tools_offered)
    except Exception as exc:  # pragma: no cover - defensive: parsing must never break an episode
        out = TurnOutput(malformed=f"server answer unreadable: {exc!r}"[:200], malformed_channel=SERVER_BAD_ANSWER)
        out.raw = _raw(server)
    out.server = server
    return out


def _parse(server: dict[str, Any], turn: int, tools_offered: bool) -> TurnOutput:
    text, events = _content(server.get("content"))
    try:
        calls, shape_events = _entries(server.get("tool_calls"))
    except _Unreadable as exc:
        return TurnOutput(
            malformed=str(exc), malformed_channel=SERVER_BAD_ANSWER, raw=_raw(server), stop=STOP_TOKEN in text
        )
    events.extend(shape_events)
    if calls:
        out = parse_openai(text, calls, turn=turn)
    else:
        out = parse_hermes(text, turn=turn)
        if tools_offered:
            events.extend(
                (SERVER_MISSED_CALL, c.name, "a well-formed call left in content; flatscore parsed and ran it")
                for c in out.tool_calls
            )
    out.server_events = events
    return out


__all__ = ["SERVER_BAD_ANSWER", "SERVER_MISSED_CALL", "parse_server_answer"]
