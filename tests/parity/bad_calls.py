"""Bad calls for the differential harness, made from each train task's own gold actions.

Each task gives one case: its gold actions bent in every way a model bends them (an id that
does not exist, an argument renamed, dropped, added or of the wrong type, a null, a tool name
one letter off, the other party's tool), then the task's write actions made twice (the second
is a state change the domain forbids: cancelling a cancelled order, modifying twice...). The
cases are a pure function of the task data: no randomness, the same calls on every run.
"""

from __future__ import annotations

import json
from typing import Any

from tau2_harness import TAU2_DATA


def _retype(value: Any) -> Any:
    """The value as a model gets the type wrong: numbers as strings, ids as numbers, lists flattened."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        digits = value.lstrip("#W")
        return int(digits) if digits.isdigit() else [value]
    if isinstance(value, list):
        return value[0] if value else ""
    return json.dumps(value)


def _bent(call: dict[str, Any], other_side_tool: str | None) -> list[dict[str, Any]]:
    name, args, who = call["name"], dict(call["arguments"]), call["requestor"]
    out: list[dict[str, Any]] = []

    def add(new_name: str, new_args: dict[str, Any], requestor: str = who) -> None:
        out.append({"requestor": requestor, "name": new_name, "arguments": new_args})

    keys = list(args)
    if keys:
        first, last = keys[0], keys[-1]
        string_keys = [k for k in keys if isinstance(args[k], str)]
        if string_keys:
            k = string_keys[0]
            add(name, {**args, k: args[k] + "0"})  # an id (or value) that does not exist
        add(
            name,
            {
                ("id" if first.endswith("_id") else first + "_value") if i == 0 else k: v
                for i, (k, v) in enumerate(args.items())
            },
        )
        add(name, {k: v for k, v in args.items() if k != last})  # a required argument missing
        for k in keys:  # each argument of the wrong type in turn
            add(name, {**args, k: _retype(args[k])})
        add(name, {**args, last: None})
    add(name, {**args, "note": "as the customer asked"})  # an argument the tool does not take
    add(name[:-1] if len(name) > 3 else name + "x", args)  # a tool that does not exist
    add(name, args, requestor="user" if who == "assistant" else "assistant")  # the other party calls it
    if other_side_tool is not None:
        add(other_side_tool, {})
    return out


def bad_call_cases(domain_name: str, every: int = 1) -> list[dict[str, Any]]:
    """One case per train task (every ``every``-th): its bent gold actions, then its write actions twice over."""
    from flatscore.domains import load_domain

    domain = load_domain(domain_name, TAU2_DATA / domain_name)
    env = domain.fresh_environment()
    agent_specs = env.tool_specs("assistant")
    user_tools = sorted(env.tool_specs("user"))
    cases = []
    for n, task in enumerate(domain.tasks()[::every]):
        gold = [{"requestor": a.requestor, "name": a.name, "arguments": a.arguments} for a in task.actions]
        calls: list[dict[str, Any]] = []
        for i, call in enumerate(gold):
            other = user_tools[(n + i) % len(user_tools)] if user_tools and call["requestor"] == "assistant" else None
            calls.extend(_bent(call, other))
        writes = [c for c in gold if c["name"] in agent_specs and agent_specs[c["name"]].mutates]
        calls.extend(writes + writes)
        if calls:
            cases.append({"task_id": task.id, "calls": calls})
    return cases
