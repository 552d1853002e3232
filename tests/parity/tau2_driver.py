"""The tau2 side of the differential harness: runs inside tau2-bench's own venv (Python 3.12).

It reads one JSON request on stdin and writes one JSON answer on stdout. A request names a
domain, the tau2 data folder (``TAU2_DATA_DIR`` layout) and cases; a case is a task id plus
a sequence of tool calls (requestor, name, arguments). For each case the driver sets the
task's initial state in tau2's own environment, answers each call with
``Environment.get_response`` (what tau2 shows a model: content and error flag), and, where
asked, grades the sequence as a finished conversation with tau2's own ``evaluate_simulation``.

Nothing here re-implements tau2: every answer comes from tau2's code. This file is never
imported by flatscore; the tests start it as a subprocess with tau2's interpreter.
"""

from __future__ import annotations

import hashlib
import json
import sys
import uuid
from typing import Any


def _digest(value: Any) -> str:
    """The agent DB as one hash of its canonical JSON (the harness computes the same of flatscore's)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _run_case(domain: str, case: dict[str, Any], tasks: dict[str, Any], grade: bool) -> dict[str, Any]:
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.registry import registry

    task = tasks[case["task_id"]]
    env = registry.get_env_constructor(domain)()
    state = task.initial_state
    env.set_state(
        initialization_data=state.initialization_data if state else None,
        initialization_actions=state.initialization_actions if state else None,
        message_history=(state.message_history or []) if state else [],
    )
    results = []
    messages: list[Any] = []
    for index, call in enumerate(case["calls"]):
        tool_call = ToolCall(
            id=f"call_{index}", name=call["name"], arguments=call["arguments"], requestor=call["requestor"]
        )
        cls = UserMessage if call["requestor"] == "user" else AssistantMessage
        messages.append(cls(role=call["requestor"], content=None, tool_calls=[tool_call]))
        answer = env.get_response(tool_call)
        messages.append(answer)
        results.append({"content": answer.content, "error": answer.error})
    out: dict[str, Any] = {
        "results": results,
        "agent_db": _digest(env.tools.db.model_dump(mode="json")),
    }
    if grade:
        simulation = SimulationRun(
            id=str(uuid.uuid4()),
            task_id=task.id,
            start_time="",
            end_time="",
            duration=0.0,
            termination_reason=TerminationReason.AGENT_STOP,
            messages=messages,
        )
        out.update(_grade(simulation, task, domain))
    return out


def _grade(simulation: Any, task: Any, domain: str) -> dict[str, Any]:
    """tau2's reward with its NL-assertion judge left out (it needs an LLM): the environment part by
    ``evaluate_simulation``, the ACTION and COMMUNICATE parts by the evaluators it calls, and the
    reward as their product over the task's basis (what ``evaluate_simulation`` does for ALL)."""
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator

    basis = [b.value for b in task.evaluation_criteria.reward_basis]
    if simulation.termination_reason.value not in ("agent_stop", "user_stop"):
        return {"reward": 0.0, "db_match": None, "env_assertions": [], "action_checks": [], "skipped": []}
    env = evaluate_simulation(simulation, task, EvaluationType.ENV, solo_mode=False, domain=domain)
    action = ActionEvaluator.calculate_reward(task=task, full_trajectory=simulation.messages)
    communicate = CommunicateEvaluator.calculate_reward(task=task, full_trajectory=simulation.messages)
    reward = 1.0
    if {"DB", "ENV_ASSERTION"} & set(basis):
        reward *= env.reward
    if "ACTION" in basis:
        reward *= action.reward
    if "COMMUNICATE" in basis:
        reward *= communicate.reward
    return {
        "reward": reward,
        "db_match": env.db_check.db_match if env.db_check else None,
        "env_assertions": [c.met for c in env.env_assertions or []],
        "action_checks": [c.action_match for c in action.action_checks or []],
        "skipped": [b for b in basis if b == "NL_ASSERTION"],
    }


def _schemas(domain: str) -> dict[str, list[dict[str, Any]]]:
    """The tool schemas tau2 shows each party (``Tool.openai_schema``), in tau2's order."""
    from tau2.registry import registry

    env = registry.get_env_constructor(domain)()
    kits = {"assistant": env.tools, "user": env.user_tools}
    return {side: [t.openai_schema for t in kit.get_tools().values()] if kit else [] for side, kit in kits.items()}


def main() -> None:
    answer_stream = sys.stdout
    sys.stdout = sys.stderr  # tau2 and its libraries print; only the answer goes to the real stdout
    from loguru import logger

    logger.remove()  # tau2 logs every response at debug level; the answer is the JSON on stdout
    request = json.load(sys.stdin)
    from tau2.data_model.tasks import Task

    domain = request["domain"]
    if "regrade" in request:  # a results file flatscore exported: tau2 loads and grades it itself
        from tau2.data_model.simulation import Results

        with open(request["regrade"]) as fh:
            results = Results.model_validate_json(fh.read())
        by_id = {t.id: t for t in results.tasks}
        graded = [_grade(sim, by_id[sim.task_id], domain) for sim in results.simulations]
        json.dump({"regraded": [{"id": s.id, **g} for s, g in zip(results.simulations, graded)]}, answer_stream)
        return
    with open(request["tasks_file"]) as fh:
        tasks = {t["id"]: Task.model_validate(t) for t in json.load(fh)}
    answers = []
    for case in request["cases"]:
        try:
            answers.append(_run_case(domain, case, tasks, bool(case.get("grade", True))))
        except Exception as exc:  # a case tau2 itself cannot run is reported, not fatal
            answers.append({"crash": f"{type(exc).__name__}: {exc}"})
    import pydantic

    versions = {"python": sys.version.split()[0], "pydantic": pydantic.VERSION}
    json.dump({**versions, "answers": answers, "schemas": _schemas(domain)}, answer_stream)


if __name__ == "__main__":
    main()
