"""The faults a telecom task can break the phone or line with, and how the ground truth undoes them.

Taken from tau2's telecom task families. A fault is a function that appends its set-up
(initialization actions) and its fixes (ground-truth actions) to the :class:`_Task` under
construction; keeping every fault in one table (``FAULTS``) with one canonical order
(``FAULT_ORDER``) is what lets a task combine several without the fixes undoing each other.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable

from .data_model import Customer, Line, Plan

_COUNTRIES = ["France", "Japan", "Mexico", "Italy", "Canada", "Spain", "Germany", "Brazil"]


@dataclass
class _Task:
    """One task under construction."""

    customer: Customer
    line: Line
    plan: Plan
    issue: str
    init: list[dict[str, Any]] = field(default_factory=list)
    fixes: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (requestor, name, args)
    assertions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    abroad_in: str | None = None
    unfixable: bool = False

    def user_init(self, func: str, **arguments: Any) -> None:
        self.init.append({"env_type": "user", "func_name": func, "arguments": arguments})

    def agent_init(self, func: str, **arguments: Any) -> None:
        self.init.append({"env_type": "assistant", "func_name": func, "arguments": arguments})

    def fix(self, requestor: str, name: str, **arguments: Any) -> None:
        self.fixes.append((requestor, name, arguments))

    @property
    def ids(self) -> dict[str, str]:
        return {"customer_id": self.customer.customer_id, "line_id": self.line.line_id}


# -- faults -------------------------------------------------------------------------------
# Each fault applies its set-up and appends its fixes; faults are applied in the canonical
# order of FAULT_ORDER, which is also the order in which tau2's ground truth undoes them.


def _airplane(t: _Task, rng: random.Random) -> None:
    t.user_init("turn_airplane_mode_on")
    t.fix("user", "toggle_airplane_mode")


def _bad_pref(t: _Task, rng: random.Random) -> None:
    mode = "2g_only" if t.issue == "mms_issue" else rng.choice(["2g_only", "3g_only", "4g_only"])
    t.user_init("set_network_mode_preference", mode=mode)
    t.fix("user", "set_network_mode_preference", mode="4g_5g_preferred")


def _bad_wifi_calling(t: _Task, rng: random.Random) -> None:
    t.user_init("set_wifi_calling", enabled=True, mms_over_wifi=True)
    t.fix("user", "toggle_wifi_calling")


def _break_apn_mms(t: _Task, rng: random.Random) -> None:
    t.user_init("break_apn_mms_setting")
    t.fix("user", "reset_apn_settings")
    t.fix("user", "reboot_device")


def _break_apn(t: _Task, rng: random.Random) -> None:
    t.user_init("break_apn_settings")
    t.fix("user", "reset_apn_settings")
    t.fix("user", "reboot_device")


def _perm(*permissions: str) -> Callable[[_Task, random.Random], None]:
    def apply(t: _Task, rng: random.Random) -> None:
        for permission in permissions:
            t.user_init("remove_app_permission", app_name="messaging", permission=permission)
        for permission in permissions:
            t.fix("user", "grant_app_permission", app_name="messaging", permission=permission)

    return apply


def _data_off(t: _Task, rng: random.Random) -> None:
    t.user_init("turn_data_off")
    t.fix("user", "toggle_data")


def _bad_vpn(t: _Task, rng: random.Random) -> None:
    t.user_init("break_vpn")
    t.fix("user", "disconnect_vpn")


def _data_saver(t: _Task, rng: random.Random) -> None:
    t.user_init("turn_data_saver_mode_on")
    t.fix("user", "toggle_data_saver_mode")


def _usage_exceeded(t: _Task, rng: random.Random) -> None:
    refuel = rng.choice([1.0, 1.5, 2.0])
    over = round(rng.uniform(0.1, refuel - 0.2), 1)
    t.agent_init("set_data_usage", **t.ids, data_used_gb=round(t.plan.data_limit_gb + over, 1))
    t.fix("assistant", "refuel_data", **t.ids, gb_amount=refuel)
    t.assertions.append(
        _assertion(
            "assistant", "assert_data_refueling_amount", **t.ids, expected_amount=t.line.data_refueling_gb + refuel
        )
    )
    t.notes.append(f"You are willing to refuel {refuel} GB of data if needed, but you do not want to change your plan.")


def _unseat_sim(t: _Task, rng: random.Random) -> None:
    t.user_init("unseat_sim_card")
    t.fix("user", "reseat_sim_card")


def _roaming(line_roaming: bool, phone_roaming: bool) -> Callable[[_Task, random.Random], None]:
    def apply(t: _Task, rng: random.Random) -> None:
        t.abroad_in = rng.choice(_COUNTRIES)
        t.user_init("set_user_location", abroad=True)
        t.user_init("turn_roaming_on" if phone_roaming else "turn_roaming_off")
        t.agent_init("enable_roaming" if line_roaming else "disable_roaming", **t.ids)
        if not line_roaming:
            t.fix("assistant", "enable_roaming", **t.ids)
        if not phone_roaming:
            t.fix("user", "toggle_roaming")

    return apply


def _suspension(contract_ended: bool) -> Callable[[_Task, random.Random], None]:
    def apply(t: _Task, rng: random.Random) -> None:
        bill_id = f"B9{rng.randrange(100000, 999999)}"
        t.agent_init("suspend_line_for_overdue_bill", **t.ids, new_bill_id=bill_id, contract_ended=contract_ended)
        t.notes.append("If the agent asks you to pay a bill, you accept.")
        if contract_ended:
            t.unfixable = True
            return
        t.fix("assistant", "send_payment_request", customer_id=t.customer.customer_id, bill_id=bill_id)
        t.fix("user", "make_payment")
        t.fix("assistant", "resume_line", **t.ids)
        t.fix("user", "reboot_device")
        t.assertions.append(_assertion("assistant", "assert_no_overdue_bill", overdue_bill_id=bill_id))

    return apply


def _lock_sim(t: _Task, rng: random.Random) -> None:
    t.user_init("lock_sim_card", mode="pin")
    t.unfixable = True


#: name -> (issues it belongs to, apply, exclusivity group or None)
FAULTS: dict[str, tuple[frozenset[str], Callable[[_Task, random.Random], None], str | None]] = {
    "airplane_mode_on": (frozenset({"mms_issue", "mobile_data_issue", "service_issue"}), _airplane, None),
    "bad_network_preference": (frozenset({"mms_issue", "mobile_data_issue"}), _bad_pref, None),
    "bad_wifi_calling": (frozenset({"mms_issue"}), _bad_wifi_calling, None),
    "break_apn_mms_setting": (frozenset({"mms_issue"}), _break_apn_mms, None),
    "break_apn_settings": (frozenset({"service_issue"}), _break_apn, None),
    "break_app_both_permissions": (frozenset({"mms_issue"}), _perm("sms", "storage"), "perm"),
    "break_app_sms_permission": (frozenset({"mms_issue"}), _perm("sms"), "perm"),
    "break_app_storage_permission": (frozenset({"mms_issue"}), _perm("storage"), "perm"),
    "data_mode_off": (frozenset({"mms_issue", "mobile_data_issue"}), _data_off, None),
    "bad_vpn": (frozenset({"mobile_data_issue"}), _bad_vpn, None),
    "data_saver_mode_on": (frozenset({"mobile_data_issue"}), _data_saver, None),
    "data_usage_exceeded": (frozenset({"mms_issue", "mobile_data_issue"}), _usage_exceeded, None),
    "overdue_bill_suspension": (frozenset({"service_issue"}), _suspension(False), "suspension"),
    "contract_end_suspension": (frozenset({"service_issue"}), _suspension(True), "suspension"),
    "lock_sim_card_pin": (frozenset({"service_issue"}), _lock_sim, None),
    "unseat_sim_card": (frozenset({"mms_issue", "service_issue"}), _unseat_sim, None),
    "user_abroad_roaming_disabled_off": (frozenset({"mms_issue", "mobile_data_issue"}), _roaming(False, False), "roam"),
    "user_abroad_roaming_disabled_on": (frozenset({"mms_issue", "mobile_data_issue"}), _roaming(False, True), "roam"),
    "user_abroad_roaming_enabled_off": (frozenset({"mms_issue", "mobile_data_issue"}), _roaming(True, False), "roam"),
}
UNFIXABLE = frozenset({"contract_end_suspension", "lock_sim_card_pin"})
#: the order of set-up and of ground-truth fixes (tau2's order)
FAULT_ORDER = [
    "airplane_mode_on",
    "bad_network_preference",
    "bad_wifi_calling",
    "break_apn_mms_setting",
    "break_apn_settings",
    "break_app_both_permissions",
    "break_app_sms_permission",
    "break_app_storage_permission",
    "data_mode_off",
    "bad_vpn",
    "data_saver_mode_on",
    "data_usage_exceeded",
    "overdue_bill_suspension",
    "contract_end_suspension",
    "lock_sim_card_pin",
    "unseat_sim_card",
    "user_abroad_roaming_disabled_off",
    "user_abroad_roaming_disabled_on",
    "user_abroad_roaming_enabled_off",
]


def _assertion(env_type: str, func_name: str, **arguments: Any) -> dict[str, Any]:
    return {"env_type": env_type, "func_name": func_name, "arguments": arguments, "assert_value": True, "message": None}
