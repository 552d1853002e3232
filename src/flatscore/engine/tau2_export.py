"""A cell's episodes written as tau2-bench's results JSON, so that tau2's own evaluator regrades them.

tau2's ``Results`` file holds run information, the tasks (as tau2's task files spell them) and
one simulation per episode: its messages (assistant and user turns, tool calls with their
requestor, tool results with their error flag), its termination reason and its reward. An
exported parity-mode cell regrades, with ``tau2 evaluate-trajs``, to the rewards flatscore gave
(``tests/parity`` checks it); a default-mode cell exports too, but tau2 then grades what
flatscore's default tools answered, so its rewards are tau2's view of that trajectory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flatscore.atomic_write import write_json_atomic
from flatscore.domains.base import Domain
from flatscore.engine.cell_folder import CELL_FILE, EPISODES_FILE, read_episode_records, read_json

#: flatscore's terminations that tau2 names otherwise (tau2 crashes on malformed agent output)
_TERMINATION = {"malformed_dropped": "agent_error"}


def _tool_call(call: dict[str, Any], requestor: str) -> dict[str, Any] | None:
    try:
        arguments = json.loads(call["function"]["arguments"])
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(arguments, dict):
        return None
    return {"id": call["id"], "name": call["function"]["name"], "arguments": arguments, "requestor": requestor}


def tau2_messages(trajectory: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An episode's trajectory as tau2's message list.

    A call whose arguments are not a JSON object (tau2 cannot hold it) is left out with its
    result; flatscore's own feedback on a malformed call (default mode) has no tau2 form and is
    left out too.
    """
    messages: list[dict[str, Any]] = []
    kept_calls: set[str] = set()
    for turn, entry in enumerate(trajectory):
        role = entry.get("role")
        if role in ("assistant", "user"):
            calls = [_tool_call(c, role) for c in entry.get("tool_calls") or []]
            kept = [c for c in calls if c is not None]
            kept_calls.update(c["id"] for c in kept)
            content = entry.get("content") or None
            if not kept and content is None:
                continue
            messages.append({"role": role, "content": content, "tool_calls": kept or None, "turn_idx": turn})
        elif role == "tool" and entry.get("tool_call_id") in kept_calls:
            messages.append(
                {
                    "role": "tool",
                    "id": entry["tool_call_id"],
                    "content": entry.get("content"),
                    "requestor": entry.get("side", "assistant"),
                    "error": bool(entry.get("error")),
                    "turn_idx": turn,
                }
            )
    return messages


def tau2_results(cell_dir: Path, domain: Domain) -> dict[str, Any]:
    """The cell's episodes, its tasks and its settings, in tau2's ``Results`` layout."""
    cell = read_json(cell_dir / CELL_FILE)
    records = list(read_episode_records(cell_dir / EPISODES_FILE))
    wanted = {r["task_id"] for r in records}
    raw_tasks = [t for t in json.loads(domain.task_file().read_text()) if t["id"] in wanted]
    simulations = []
    for record in records:
        seconds = float((record.get("timing") or {}).get("wall_seconds", 0.0))
        simulations.append(
            {
                "id": f"{cell.get('hash', cell_dir.name)}:{record['task_id']}#{record['trial']}",
                "task_id": record["task_id"],
                "timestamp": "",
                "start_time": "",
                "end_time": "",
                "duration": seconds,
                "termination_reason": _TERMINATION.get(record["termination"], record["termination"]),
                "reward_info": {"reward": record["reward"], "info": {"flatscore": record.get("reward_info")}},
                "messages": tau2_messages(record.get("messages") or []),
                "trial": record["trial"],
                "seed": record.get("seed"),
            }
        )
    return {
        "timestamp": "",
        "info": {
            "git_commit": str(cell.get("code_version", "")),
            "num_trials": int(cell.get("trials", 1)),
            "max_steps": int(cell.get("max_steps", 200)),
            "max_errors": int(cell.get("budget", 10)),
            "user_info": {"implementation": "flatscore"},
            "agent_info": {"implementation": "flatscore", "llm": cell.get("model")},
            "environment_info": {"domain_name": domain.name, "policy": domain.policy},
            "seed": cell.get("seed"),
        },
        "tasks": raw_tasks,
        "simulations": simulations,
    }


def export_tau2_results(cell_dir: Path, domain: Domain, out: Path) -> int:
    """Write the cell as tau2's results JSON at ``out``; returns how many episodes it holds."""
    results = tau2_results(cell_dir, domain)
    write_json_atomic(out, results)
    return len(results["simulations"])
