"""Planted trajectories for the synthetic study: a known first divergence and a known amplification.

With ``SyntheticStudy.divergence_turn`` set, every record carries a scripted trajectory (user
request, agent tool call, tool result, ...) that depends only on (task, trial), so a full and a
quantized episode of the same (task, trial) are identical, except that quantized episodes of
even trials call a wrong tool at the planted turn and get an error in the planted channel right
after it. Full precision itself errs in that channel (late, after the divergence window) at the
planted share of tasks: there, and only there, the quantized error amplifies an existing one.
"""

from __future__ import annotations

import json
from typing import Any

GREETING = "Hi! How can I help you today?"


def diverges(precision: str, trial: int) -> bool:
    """Quantized episodes of even trials diverge; odd trials and full precision never do."""
    return precision != "full" and trial % 2 == 0


def full_errs(task: int, n_tasks: int, share: float) -> bool:
    """Whether full precision errs in the planted channel at this task (the first ``share`` of tasks)."""
    return task < round(share * n_tasks)


def planted_messages(
    task: int, trial: int, turn: int, channel: str, diverge: bool, full_error: bool
) -> list[dict[str, Any]]:
    """The scripted trajectory of one episode; ``turn`` must be an agent tool call (turn % 3 == 2)."""
    if turn % 3 != 2:
        raise ValueError(f"divergence_turn must be an agent tool call position (turn % 3 == 2), got {turn}")
    length = turn + 10
    messages: list[dict[str, Any]] = [{"role": "assistant", "content": GREETING}]
    off = False  # past the divergence: the quantized side says other things
    for i in range(1, length):
        tag = f"{'q' if off else 'f'}{task}-{trial}-{i}"
        if i % 3 == 1:
            messages.append({"role": "user", "content": f"request {tag}"})
        elif i % 3 == 2:
            name = "wrong_tool" if diverge and i == turn else f"tool_{(task + i) % 10}"
            args = json.dumps({"order": tag})
            call = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": args}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call], "raw": tag})
            off = off or (diverge and i == turn)
        elif diverge and i == turn + 1:
            messages.append(
                {"role": "tool", "side": "assistant", "name": "wrong_tool", "content": "Error", "error": True}
                | {"channel": channel}
            )
        elif full_error and not off and i == turn + 7:
            messages.append({"role": "tool", "side": "assistant", "name": "tool_0", "content": "Error"})
            messages[-1].update(error=True, channel=channel)
        else:
            messages.append({"role": "tool", "side": "assistant", "name": f"tool_{(task + i - 1) % 10}"})
            messages[-1].update(content=f"ok {tag}", error=False)
    return messages
