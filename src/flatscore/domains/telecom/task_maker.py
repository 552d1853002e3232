"""One synthetic telecom task: an issue, 1-3 of its faults, a customer's line, the user's story.

The task's ground truth is the faults' fixes in canonical order and its env assertions check
the outcome the user wants; with an unfixable fault the ground truth is a transfer to a human
agent, as in tau2.
"""

from __future__ import annotations

import random
from typing import Any

from .data_model import LineStatus, TelecomDB
from .faults import FAULT_ORDER, FAULTS, UNFIXABLE, _assertion, _Task

_REASONS = {
    "mms_issue": "You cannot send picture messages (MMS) from your messaging app since this morning. "
    "You want it fixed so that an MMS message goes through.",
    "mobile_data_issue": "Your mobile data does not work well: pages do not load or load very slowly. "
    "You want fast mobile data again (an excellent speed test result).",
    "service_issue": "Your phone shows no service since a few hours. You want your phone to have service again.",
}
_GOALS = {
    "mms_issue": "You consider the issue solved when your phone says the messaging app can send MMS messages.",
    "mobile_data_issue": "You consider the issue solved when a speed test on your phone shows an excellent result.",
    "service_issue": "You consider the issue solved when the status bar shows that you have signal.",
}
_GROUNDING = (
    "Do what the agent asks, one step at a time, using your phone's tools, and report what they show. "
    "Never make up what your phone shows: base every answer about your phone on a tool result. "
    "If a change does not show the new status, check again with another tool. "
    "If you are not sure whether a step is needed, ask the agent."
)
ISSUE_WEIGHTS = {"mms_issue": 0.36, "mobile_data_issue": 0.36, "service_issue": 0.28}
N_FAULT_WEIGHTS = {1: 0.4, 2: 0.4, 3: 0.2}


def _pick_faults(rng: random.Random, issue: str) -> list[str]:
    pool = [name for name in FAULT_ORDER if issue in FAULTS[name][0]]
    k = rng.choices(list(N_FAULT_WEIGHTS), weights=list(N_FAULT_WEIGHTS.values()))[0]
    chosen: list[str] = []
    groups: set[str] = set()
    # unfixable faults are rarer: a transfer teaches little beyond itself
    weights = [0.35 if name in UNFIXABLE else 1.0 for name in pool]
    while len(chosen) < k:
        name = rng.choices(pool, weights=weights)[0]
        group = FAULTS[name][2]
        if name in chosen or (group is not None and group in groups):
            continue
        if name in UNFIXABLE and any(c in UNFIXABLE for c in chosen):
            continue
        chosen.append(name)
        if group is not None:
            groups.add(group)
    return sorted(chosen, key=FAULT_ORDER.index)


def _make_task(index: int, rng: random.Random, db: TelecomDB) -> dict[str, Any]:
    issue = rng.choices(list(ISSUE_WEIGHTS), weights=list(ISSUE_WEIGHTS.values()))[0]
    faults = _pick_faults(rng, issue)
    candidates = [
        (c, ln)
        for c in db.customers
        for ln in db.lines
        if ln.line_id in c.line_ids
        and ln.status == LineStatus.ACTIVE
        and ("data_usage_exceeded" not in faults or ln.plan_id != "P3005")
    ]
    customer, line = rng.choice(candidates)
    plan = next(p for p in db.plans if p.plan_id == line.plan_id)
    task = _Task(customer=customer, line=line, plan=plan, issue=issue)
    task.user_init("set_user_info", name=customer.full_name, phone_number=line.phone_number)
    for name in faults:
        FAULTS[name][1](task, rng)
    task.user_init("simulate_network_search")

    if task.unfixable:
        actions = [("assistant", "transfer_to_human_agents", {"summary": "The issue cannot be fixed with the tools."})]
        assertions = [_assertion("user", "assert_service_status", expected_status="no_service")]
        reward_basis = ["ENV_ASSERTION", "ACTION"]
    else:
        actions = task.fixes
        primary = {
            "mms_issue": [_assertion("user", "assert_can_send_mms", expected_status=True)],
            "mobile_data_issue": [
                _assertion("user", "assert_mobile_data_status", expected_status=True),
                _assertion("user", "assert_internet_speed", expected_speed=200, expected_desc="excellent"),
            ],
            "service_issue": [_assertion("user", "assert_service_status", expected_status="connected")],
        }[issue]
        assertions = primary + task.assertions
        reward_basis = ["ENV_ASSERTION"]

    known = f"You are {customer.full_name} with phone number {line.phone_number}."
    if task.abroad_in:
        known += f" You are currently abroad in {task.abroad_in}."
    instructions = " ".join([_GOALS[issue], *task.notes, _GROUNDING])
    task_id = f"[{issue}]{'|'.join(faults)}[PERSONA:None]#{index:03d}"
    ticket = f"{_REASONS[issue]} Customer name: {customer.full_name}, phone number: {line.phone_number}" + (
        f", currently abroad in {task.abroad_in}." if task.abroad_in else "."
    )
    return {
        "id": task_id,
        "description": {
            "purpose": f"Synthetic {issue.replace('_', ' ')}: {', '.join(faults)}.",
            "relevant_policies": None,
            "notes": None,
        },
        "user_scenario": {
            "persona": None,
            "instructions": {
                "domain": "telecom",
                "reason_for_call": _REASONS[issue],
                "known_info": known,
                "unknown_info": None,
                "task_instructions": instructions,
            },
        },
        "ticket": ticket,
        "initial_state": {"initialization_data": None, "initialization_actions": task.init, "message_history": None},
        "evaluation_criteria": {
            "actions": [
                {
                    "action_id": f"{name}_{i}",
                    "requestor": requestor,
                    "name": name,
                    "arguments": arguments,
                    "info": None,
                    "compare_args": [] if name == "transfer_to_human_agents" else None,
                }
                for i, (requestor, name, arguments) in enumerate(actions)
            ],
            "env_assertions": assertions,
            "communicate_info": None,
            "nl_assertions": None,
            "reward_basis": reward_basis,
        },
    }
