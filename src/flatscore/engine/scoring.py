"""Rewards as tau2-bench computes them, plus pass^k.

The reward is the product of the task's ``reward_basis`` components:

* ``DB``: the final agent+user database digest equals the gold one, obtained by replaying
  the task's ground-truth actions in a fresh environment;
* ``ENV_ASSERTION``: the task's assertions on the final state (telecom's device) hold;
* ``COMMUNICATE``: every ``communicate_info`` string occurs in some agent message
  (case-insensitive, commas ignored);
* ``ACTION``: every ground-truth action was made by its requestor with matching arguments
  (``compare_args`` restricts the comparison to those arguments), and succeeded. In tau2
  parity mode the check is tau2's: any call of that name, by either party, whatever its
  outcome, whose arguments agree on the keys compared (with no ``compare_args``, the keys
  the call itself sent: a call that sent none matches);
* ``NL_ASSERTION``: needs an LLM judge. Without one it is skipped and listed under
  ``skipped`` in the reward info, so results always say what they were scored on.

Any termination other than a user or agent stop scores 0.
"""

from __future__ import annotations

import json
from math import comb
from typing import Any, Callable, Iterable, Sequence

from ..domains.base import Domain
from ..domains.environment import Environment
from ..domains.tasks import Action, Task
from ..domains.tau2_parity import answer_call, tau2_answer
from .records import GRADED_TERMINATIONS, Termination

NLJudge = Callable[[Task, list[dict[str, Any]], list[str]], list[bool]]


def _norm(text: str) -> str:
    return text.lower().replace(",", "")


def _args_match(gold: Action, made: dict[str, Any]) -> bool:
    keys = gold.compare_args if gold.compare_args is not None else list(gold.arguments)
    return all(
        json.dumps(gold.arguments.get(k), sort_keys=True) == json.dumps(made.get(k), sort_keys=True) for k in keys
    )


def tau2_action_match(gold: Action, name: str, made: dict[str, Any]) -> bool:
    """tau2's ACTION check of one call: same name, and equal values on the compared keys."""
    if gold.name != name:
        return False
    keys = list(made) if gold.compare_args is None else gold.compare_args
    if not keys:
        return True
    return {k: v for k, v in made.items() if k in keys} == {k: v for k, v in gold.arguments.items() if k in keys}


def all_calls(trajectory: Iterable[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(name, arguments) of every call with object arguments, whatever its result (tau2's view)."""
    made = []
    for entry in trajectory:
        for call in entry.get("tool_calls") or []:
            try:
                args = json.loads(call["function"]["arguments"])
            except (TypeError, ValueError):
                continue
            if isinstance(args, dict):
                made.append((call["function"]["name"], args))
    return made


def successful_calls(trajectory: Iterable[dict[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(side, name, arguments) of every call whose result was not an error."""
    pending: dict[str, tuple[str, str, dict[str, Any]]] = {}
    made = []
    for entry in trajectory:
        if entry.get("tool_calls"):
            side = "assistant" if entry["role"] == "assistant" else "user"
            for call in entry["tool_calls"]:
                try:
                    args = json.loads(call["function"]["arguments"])
                except (TypeError, ValueError):
                    args = None
                if isinstance(args, dict):
                    pending[call["id"]] = (side, call["function"]["name"], args)
        elif entry.get("role") == "tool" and not entry.get("error") and entry.get("tool_call_id") in pending:
            made.append(pending.pop(entry["tool_call_id"]))
    return made


class Evaluator:
    """Scores episodes of one domain; gold digests are computed once per task and cached."""

    def __init__(self, domain: Domain, judge: NLJudge | None = None, tau2_parity: bool = False) -> None:
        self.domain = domain
        self.judge = judge
        self.tau2_parity = tau2_parity
        self._gold: dict[str, tuple[str, int]] = {}

    def _replay(self, task: Task) -> tuple[str, int]:
        """Replay the ground truth; like tau2, an action that errors leaves the state as it is."""
        if task.id not in self._gold:
            env = self.domain.environment_for(task)
            failed = 0
            for action in task.actions:
                # tau2's own data holds a few failing actions (e.g. a product id that does not exist)
                if self.tau2_parity:  # tau2 replays gold actions without its cross-side sync between them
                    answer = tau2_answer(env, action.requestor, action.name, action.arguments, sync=False)
                else:
                    answer = answer_call(env, action.requestor, action.name, action.arguments)
                failed += answer.error
            self._gold[task.id] = (env.state_hash(), failed)
        return self._gold[task.id]

    def gold_hash(self, task: Task) -> str:
        return self._replay(task)[0]

    def gold_errors(self, task: Task) -> int:
        """How many of the task's ground-truth actions themselves fail when replayed."""
        return self._replay(task)[1]

    def evaluate(
        self, task: Task, env: Environment, trajectory: Sequence[dict[str, Any]], termination: Termination
    ) -> dict[str, Any]:
        criteria = task.evaluation_criteria
        basis = list(criteria.reward_basis) if criteria else []
        info: dict[str, Any] = {"reward_basis": basis, "components": {}, "skipped": []}
        if termination.value not in GRADED_TERMINATIONS:
            info["reward"] = 0.0
            info["note"] = f"termination {termination.value} scores 0"
            return info
        reward = 1.0
        if self.tau2_parity:  # tau2 reports every check, whether or not the basis counts it
            info["db_match"] = env.state_hash() == self.gold_hash(task)
            info["env_assertions"] = env.check_assertions(criteria.env_assertions or []) if criteria else []
            calls = all_calls(trajectory)
            gold_actions = task.actions
            info["actions_matched"] = [any(tau2_action_match(g, n, a) for n, a in calls) for g in gold_actions]
        for component in basis:
            if component == "DB":
                value = float(env.state_hash() == self.gold_hash(task))
            elif component == "ENV_ASSERTION":
                checks = env.check_assertions(criteria.env_assertions or [])
                info["env_assertions"] = checks
                value = float(all(c["met"] for c in checks))
            elif component == "COMMUNICATE":
                said = [_norm(m.get("content") or "") for m in trajectory if m.get("role") == "assistant"]
                wanted = criteria.communicate_info or []
                # tau2 drops commas from the messages only, so a wanted string with a comma never matches
                sought = [w.lower() if self.tau2_parity else _norm(w) for w in wanted]
                found = [any(w in s for s in said) for w in sought]
                info["communicate"] = dict(zip(wanted, found))
                value = float(all(found))
            elif component == "DB" and self.tau2_parity:
                value = float(info["db_match"])
            elif component == "ENV_ASSERTION" and self.tau2_parity:
                value = float(all(c["met"] for c in info["env_assertions"]))
            elif component == "ACTION" and self.tau2_parity:
                value = float(all(info["actions_matched"]))
            elif component == "ACTION":
                made = successful_calls(trajectory)
                matched = [
                    any(
                        side == gold.requestor and name == gold.name and _args_match(gold, args)
                        for side, name, args in made
                    )
                    for gold in task.actions
                ]
                info["actions_matched"] = matched
                value = float(all(matched))
            elif component in ("NL_ASSERTION", "NL_ASSERTIONS"):
                if self.judge is None:
                    info["skipped"].append(component)
                    continue
                if not (criteria.nl_assertions or []):  # tau2's judge: nothing to assert is met
                    info["components"][component] = 1.0
                    continue
                try:
                    verdicts = self.judge(task, list(trajectory), list(criteria.nl_assertions or []))
                except Exception as exc:  # a judge that cannot answer leaves the component ungraded, said so
                    info["skipped"].append(component)
                    info["nl_judge_error"] = f"{type(exc).__name__}: {exc}"[:500]
                    continue
                details = getattr(self.judge, "last", None)
                if details:
                    info["nl_assertions"] = [
                        {"assertion": v.assertion, "met": v.met, "reasoning": v.reasoning} for v in details
                    ]
                value = float(all(verdicts))
            else:  # pragma: no cover - guarded by the task model's Literal
                raise ValueError(f"unknown reward component {component}")
            info["components"][component] = value
            reward *= value
        info["reward"] = reward
        return info


def pass_hat_k(successes_per_task: Sequence[tuple[int, int]], k: int) -> float:
    """tau-bench's pass^k: mean over tasks of C(c, k) / C(n, k), tasks with n >= k only."""
    values = [comb(c, k) / comb(n, k) for c, n in successes_per_task if n >= k]
    if not values:
        return float("nan")
    return sum(values) / len(values)
