"""A telecom expert that diagnoses before it fixes: the demonstrations a model can learn from.

The plain expert replays the ground-truth fixes straight away ("Please do this on your phone:
reset_apn_settings()"), which is right but unlearnable: nothing in the conversation says *why*
that fix, so a model trained on it can only guess (the demo model did, and asked for fixes at
random). This agent still knows the answer (it is an oracle, and it is scored), but it shows its
evidence first, the way tau2's troubleshooting policy asks a human agent to work:

1. walk a fixed list of checks on the user's phone for the reported issue (no service / mobile
   data / MMS), and right after each check apply the ground-truth fixes of the faults it shows;
2. then identify the customer from the phone number the user gave and find the line with that
   number (``get_customer_by_phone``, then ``get_details_by_id`` per line until the numbers match);
3. then the account checks (roaming on the line, data usage, bills), each followed by its fixes.

Between 1 and 2 the user checks the goal on their phone (status bar, speed test, MMS); where the
phone fixes were all the task needed, that shows the issue gone and the agent closes: a task
whose faults all sit on the phone is solved without copying any identifier.

So every fix follows the observation that calls for it, and the list of checks depends only on
the issue the user reports: both are things a small model can pick up from the conversation.
The phone comes first because its checks and fixes need no identifiers: a model that cannot yet
copy a phone number or a line id from the conversation can still fix the phone, and then makes
its copying errors on the account tools, where the error budget sees them.
Faults whose fix no check below reveals are fixed at the end, so the agent stays correct on
tau2's own tasks too. Other domains get the plain expert's behaviour.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..domains.tasks import Action, Task
from .base import AgentView, ToolCall, Turn, TurnOutput
from .expert import TRANSFER_MESSAGE, ExpertAgent, closing_message
from .user_requests import format_user_request

ISSUES = ("service_issue", "mobile_data_issue", "mms_issue")


#: One check of the diagnosis: who runs it, the tool, whether it needs the customer/line ids,
#: the issues it belongs to and the ground-truth fixes (first actions of a fault) it reveals.
@dataclass(frozen=True)
class Check:
    requestor: str
    name: str
    issues: frozenset[str]
    reveals: frozenset[str]
    arguments: tuple[tuple[str, str], ...] = ()
    needs: tuple[str, ...] = ()


_ALL = frozenset(ISSUES)
_DATA_MMS = frozenset({"mobile_data_issue", "mms_issue"})
CHECKS: tuple[Check, ...] = (
    # -- on the user's phone (no identifiers needed) --
    Check(
        "user",
        "check_network_status",
        _ALL,
        frozenset({"toggle_airplane_mode", "toggle_data", "reseat_sim_card", "toggle_roaming"}),
    ),
    Check("user", "check_network_mode_preference", _DATA_MMS, frozenset({"set_network_mode_preference"})),
    Check("user", "check_wifi_calling_status", frozenset({"mms_issue"}), frozenset({"toggle_wifi_calling"})),
    Check("user", "check_apn_settings", frozenset({"mms_issue", "service_issue"}), frozenset({"reset_apn_settings"})),
    Check(
        "user",
        "check_app_permissions",
        frozenset({"mms_issue"}),
        frozenset({"grant_app_permission"}),
        arguments=(("app_name", "messaging"),),
    ),
    Check("user", "check_vpn_status", frozenset({"mobile_data_issue"}), frozenset({"disconnect_vpn"})),
    Check(
        "user", "check_data_restriction_status", frozenset({"mobile_data_issue"}), frozenset({"toggle_data_saver_mode"})
    ),
    # -- on the account, after the lookup --
    # The line's record is on screen after the lookup: roaming on the line.
    Check("assistant", "", _DATA_MMS, frozenset({"enable_roaming"}), needs=("line_id",)),
    Check("assistant", "get_data_usage", _DATA_MMS, frozenset({"refuel_data"}), needs=("customer_id", "line_id")),
    Check(
        "assistant",
        "get_bills_for_customer",
        frozenset({"service_issue"}),
        frozenset({"send_payment_request"}),
        needs=("customer_id",),
    ),
)
#: What the user runs on their phone to see whether their issue is gone (the task's goal, as they
#: would check it), after the phone checks and before the account is looked up.
VERIFY = {"service_issue": "check_status_bar", "mobile_data_issue": "run_speed_test", "mms_issue": "can_send_mms"}
PHONE_CHECKS = tuple(c for c in CHECKS if c.requestor == "user")
ACCOUNT_CHECKS = tuple(c for c in CHECKS if c.requestor != "user")
#: A ground-truth action whose name is here starts a fault's fix; any other action (reboot,
#: payment, resume) continues the fix before it.
FIX_HEADS = frozenset().union(*(c.reveals for c in CHECKS)) | {"transfer_to_human_agents"}
#: Where an unfixable task's transfer goes: after the check that shows the cause.
TRANSFER_AFTER = {"lock_sim_card_pin": "check_network_status", "contract_end_suspension": "get_bills_for_customer"}

_PHONE = re.compile(r"\b\d{3}-\d{3}-\d{4}\b")


def task_issue(task: Task) -> str | None:
    """The issue a telecom task is about: from tau2's id (``[mms_issue]...``), else its reason for calling."""
    for issue in ISSUES:
        if task.id.startswith(f"[{issue}]"):
            return issue
    reason = ""
    if task.user_scenario and task.user_scenario.instructions is not None:
        reason = str(getattr(task.user_scenario.instructions, "reason_for_call", "") or "").lower()
    if "mms" in reason or "picture" in reason:
        return "mms_issue"
    if "data" in reason or "internet" in reason:
        return "mobile_data_issue"
    if "service" in reason or "signal" in reason:
        return "service_issue"
    return None


def fix_groups(actions: list[Action]) -> list[list[Action]]:
    """The ground-truth actions cut into one list per fault: each starts with a fix head."""
    groups: list[list[Action]] = []
    for action in actions:
        if action.name in FIX_HEADS or not groups:
            groups.append([action])
        else:
            groups[-1].append(action)
    return groups


def _ends_in_transfer(plan: list[Action]) -> bool:
    return bool(plan) and plan[-1].name == "transfer_to_human_agents"


def diagnosis_plan(task: Task, ids: dict[str, str] | None, placed: set[int]) -> list[Action]:
    """The phone checks (``ids`` None) or the account checks (``ids`` from the lookup) for the task's
    issue, each followed by the fixes it reveals; the account phase ends with any unplaced fixes.
    ``placed`` (indices into the task's fix groups) is updated, so no fix is applied twice."""
    issue = task_issue(task)
    groups = fix_groups(task.actions)
    faults = set(task.id.split("]", 1)[1].split("[", 1)[0].split("|")) if "]" in task.id else set()
    transfer_after = next((TRANSFER_AFTER[f] for f in faults if f in TRANSFER_AFTER), None)
    plan: list[Action] = []
    for check in PHONE_CHECKS if ids is None else ACCOUNT_CHECKS:
        if issue not in check.issues or any(k not in (ids or {}) for k in check.needs):
            continue
        if check.name:
            args = {k: v for k, v in check.arguments} | {k: (ids or {})[k] for k in check.needs}
            plan.append(
                Action(action_id=f"check_{check.name}", requestor=check.requestor, name=check.name, arguments=args)
            )
        for i, group in enumerate(groups):
            head = group[0].name
            if i in placed:
                continue
            if head in check.reveals or (head == "transfer_to_human_agents" and transfer_after == check.name):
                plan.extend(group)
                placed.add(i)
        if _ends_in_transfer(plan):
            return plan
    if ids is not None:
        for i, group in enumerate(groups):
            if i not in placed:
                plan.extend(group)
                placed.add(i)
    return plan


@dataclass
class _Diagnosis:
    phone: str | None = None
    customer: dict[str, Any] | None = None
    line_id: str | None = None
    tried_lines: list[str] = field(default_factory=list)
    lookup_done: bool = False
    placed: set[int] = field(default_factory=set)
    phone_plan: list[Action] | None = None
    verified: bool = False
    solved_on_phone: bool = False
    account_plan: list[Action] | None = None
    position: int = 0


def _tool_results(view: AgentView, name: str) -> list[dict[str, Any]]:
    """Parsed JSON results of the agent's earlier calls to ``name`` (errors and non-JSON skipped)."""
    names: dict[str, str] = {}
    out = []
    for m in view.messages:
        for tc in m.get("tool_calls") or []:
            names[tc.get("id", "")] = tc.get("function", tc).get("name", "")
        if m.get("role") == "tool" and names.get(m.get("tool_call_id", "")) == name:
            try:
                value = json.loads(m.get("content") or "")
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


class DiagnosingExpertAgent(ExpertAgent):
    """Telecom: look the line up, check, then fix what the check shows (see the module docstring)."""

    name = "diagnosing_expert"

    def __init__(self, answer_form: str = "plain") -> None:
        super().__init__(answer_form)
        self._diagnoses: dict[str, _Diagnosis] = {}

    def end_episode(self, episode_id: str) -> None:
        super().end_episode(episode_id)
        self._diagnoses.pop(episode_id, None)

    def respond(self, view: AgentView) -> Turn:
        assert view.task is not None, "the expert is an oracle: the engine must pass the task"
        if view.domain != "telecom" or task_issue(view.task) is None:
            return (yield from super().respond(view))
        d = self._diagnoses.setdefault(view.episode_id, _Diagnosis())
        if d.phone_plan is None:
            d.phone_plan = diagnosis_plan(view.task, None, d.placed)
        if d.account_plan is None and d.position < len(d.phone_plan):
            return self._do(d, d.phone_plan, view)
        if _ends_in_transfer(d.phone_plan):
            return TurnOutput(content=TRANSFER_MESSAGE)
        if not d.verified:
            # The user checks the goal on the phone; where the phone fixes were all the task needed
            # that check shows the issue gone and the call ends without any id being copied.
            d.verified = True
            d.solved_on_phone = len(d.placed) == len(fix_groups(view.task.actions))
            return TurnOutput(content=format_user_request(VERIFY[task_issue(view.task)], {}))
        if d.solved_on_phone:
            return TurnOutput(content=closing_message(view, self.answer_form))
        if not d.lookup_done:
            call = self._lookup_step(view, d)
            if call is not None:
                return TurnOutput(tool_calls=[ToolCall(id=f"call_{view.turn}_0", name=call[0], arguments=call[1])])
        if d.account_plan is None:
            ids = {}
            if d.customer is not None:
                ids["customer_id"] = str(d.customer.get("customer_id"))
            if d.line_id is not None:
                ids["line_id"] = d.line_id
            d.account_plan = diagnosis_plan(view.task, ids, d.placed)
            d.position = 0
        if d.position < len(d.account_plan):
            return self._do(d, d.account_plan, view)
        return TurnOutput(
            content=TRANSFER_MESSAGE if _ends_in_transfer(d.account_plan) else closing_message(view, self.answer_form)
        )
        yield  # pragma: no cover - a generator by contract

    @staticmethod
    def _do(d: _Diagnosis, plan: list[Action], view: AgentView) -> TurnOutput:
        action = plan[d.position]
        d.position += 1
        if action.requestor == "user":
            return TurnOutput(content=format_user_request(action.name, action.arguments))
        return TurnOutput(
            tool_calls=[ToolCall(id=f"call_{view.turn}_0", name=action.name, arguments=dict(action.arguments))]
        )

    def _lookup_step(self, view: AgentView, d: _Diagnosis) -> tuple[str, dict[str, Any]] | None:
        """The next lookup call, or None once the customer and line are known (or cannot be)."""
        if d.phone is None:
            text = " ".join(str(m.get("content") or "") for m in view.messages if m.get("role") == "user")
            found = _PHONE.search(text)
            if found is None:
                d.lookup_done = True
                return None
            d.phone = found.group(0)
            return "get_customer_by_phone", {"phone_number": d.phone}
        if d.customer is None:
            customers = _tool_results(view, "get_customer_by_phone")
            if not customers:
                d.lookup_done = True
                return None
            d.customer = customers[-1]
        for line in _tool_results(view, "get_details_by_id"):
            if _digits(str(line.get("phone_number", ""))) == _digits(d.phone):
                d.line_id = str(line.get("line_id"))
                d.lookup_done = True
                return None
        remaining = [lid for lid in d.customer.get("line_ids") or [] if lid not in d.tried_lines]
        if not remaining:
            d.lookup_done = True
            return None
        d.tried_lines.append(remaining[0])
        return "get_details_by_id", {"id": remaining[0]}
