"""Seeded synthetic telecom data in tau2-bench's layout.

Writes ``db.json`` (customers, lines, plans, devices, bills), ``user_db.json`` (the phone),
``policy.md``, ``tasks.json`` and ``split_tasks.json``. Each task breaks the user's phone or
line with 1-3 faults taken from tau2's telecom task families (``mms_issue``,
``mobile_data_issue``, ``service_issue``); its initialization actions apply the faults, its
ground-truth actions (user or assistant) undo them in a fixed order, and its env assertions
check the outcome the user wants. Unfixable faults (a PIN-locked SIM, a line suspended after
its contract ended) make the ground truth a transfer to a human agent, as in tau2.

Everything comes from one ``random.Random(seed)``: the same seed gives byte-identical files.
"""

from __future__ import annotations

import datetime
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .data_model import (
    AccountStatus,
    Address,
    Bill,
    BillStatus,
    Customer,
    Device,
    DeviceType,
    Line,
    LineItem,
    LineStatus,
    PaymentMethod,
    PaymentMethodType,
    Plan,
    TelecomDB,
)
from .user_data_model import TelecomUserDB

POLICY_FILE = Path(__file__).with_name("policy.md")

_FIRST = [
    "Alice",
    "Brian",
    "Carmen",
    "David",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jonas",
    "Keisha",
    "Liam",
    "Maya",
    "Nikhil",
    "Olga",
    "Pedro",
    "Quinn",
    "Rosa",
    "Samir",
    "Tara",
    "Umar",
    "Vera",
    "Wes",
    "Yara",
    "Zoe",
]
_LAST = [
    "Alvarez",
    "Brooks",
    "Chen",
    "Dubois",
    "Evans",
    "Fischer",
    "Garcia",
    "Hughes",
    "Ito",
    "Jensen",
    "Kowalski",
    "Lopez",
    "Moreau",
    "Nguyen",
    "Okafor",
    "Patel",
    "Rossi",
    "Silva",
    "Tanaka",
    "Usman",
    "Vargas",
    "Weber",
]
_STREETS = ["Maple Ave", "Cedar St", "Lake Rd", "Hill St", "Park Blvd", "Elm Ct", "Bay Dr", "Mill Ln"]
_CITIES = [
    ("Portland", "OR", "97201"),
    ("Madison", "WI", "53703"),
    ("Tucson", "AZ", "85701"),
    ("Raleigh", "NC", "27601"),
    ("Boise", "ID", "83702"),
    ("Albany", "NY", "12207"),
]
_COUNTRIES = ["France", "Japan", "Mexico", "Italy", "Canada", "Spain", "Germany", "Brazil"]
_PHONE_MODELS = [
    ("phone", "Nova 12"),
    ("phone", "Pixel 8"),
    ("phone", "Galaxy A54"),
    ("phone", "iPhone 15"),
    ("tablet", "Tab S9"),
    ("phone", "Moto G"),
]

_PLANS = [
    Plan(plan_id="P3001", name="Starter", data_limit_gb=4.0, price_per_month=35.0, data_refueling_price_per_gb=6.0),
    Plan(plan_id="P3002", name="Plus", data_limit_gb=10.0, price_per_month=50.0, data_refueling_price_per_gb=4.0),
    Plan(plan_id="P3003", name="Max", data_limit_gb=20.0, price_per_month=70.0, data_refueling_price_per_gb=2.5),
    Plan(
        plan_id="P3004", name="Family Pack", data_limit_gb=30.0, price_per_month=110.0, data_refueling_price_per_gb=3.0
    ),
    Plan(plan_id="P3005", name="Unlimited", data_limit_gb=999.0, price_per_month=90.0, data_refueling_price_per_gb=0.5),
]

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
ISSUE_WEIGHTS = {"mms_issue": 0.36, "mobile_data_issue": 0.36, "service_issue": 0.28}
N_FAULT_WEIGHTS = {1: 0.4, 2: 0.4, 3: 0.2}


def _assertion(env_type: str, func_name: str, **arguments: Any) -> dict[str, Any]:
    return {"env_type": env_type, "func_name": func_name, "arguments": arguments, "assert_value": True, "message": None}


# -- database -----------------------------------------------------------------------------


def _date(rng: random.Random, start: datetime.date, span_days: int) -> datetime.date:
    return start + datetime.timedelta(days=rng.randrange(span_days))


def build_database(rng: random.Random, n_customers: int = 24) -> TelecomDB:
    """Customers with 1-3 lines each, a device per line, and a few past bills."""
    db = TelecomDB(plans=[p.model_copy() for p in _PLANS])
    names = rng.sample([(f, last) for f in _FIRST for last in _LAST], n_customers)
    numbers = rng.sample(range(2000000, 9999999), 3 * n_customers + 5)
    line_no, bill_no = 4001, 7001
    for index, (first, last) in enumerate(names):
        cid = f"C{5001 + index}"
        lines: list[Line] = []
        for _ in range(rng.choice([1, 1, 2, 2, 3])):
            n = numbers.pop()
            phone = f"555-{n // 10000:03d}-{n % 10000:04d}"
            did = f"D{line_no + 2000}"
            kind, model = rng.choice(_PHONE_MODELS)
            db.devices.append(
                Device(
                    device_id=did,
                    device_type=DeviceType(kind),
                    model=model,
                    imei=f"35{rng.randrange(10**12, 10**13)}",
                    is_esim_capable=rng.random() < 0.7,
                    activated=True,
                    activation_date=datetime.datetime.combine(
                        _date(rng, datetime.date(2024, 3, 1), 300), datetime.time(10, 0)
                    ),
                )
            )
            plan = rng.choice(_PLANS)
            suspended = rng.random() < 0.08
            line = Line(
                line_id=f"L{line_no}",
                phone_number=phone,
                status=LineStatus.SUSPENDED if suspended else LineStatus.ACTIVE,
                plan_id=plan.plan_id,
                device_id=did,
                data_used_gb=0.0 if suspended else round(rng.uniform(0.1, 0.8) * min(plan.data_limit_gb, 25.0), 1),
                data_refueling_gb=0.0,
                roaming_enabled=rng.random() < 0.4,
                contract_end_date=_date(rng, datetime.date(2025, 9, 1), 700),
                last_plan_change_date=_date(rng, datetime.date(2024, 6, 1), 200),
                suspension_start_date=datetime.date(2025, 2, 1) if suspended else None,
            )
            lines.append(line)
            db.lines.append(line)
            line_no += 1
        if all(line.status != LineStatus.ACTIVE for line in lines):
            lines[0].status, lines[0].suspension_start_date = LineStatus.ACTIVE, None
        street = f"{rng.randrange(10, 999)} {rng.choice(_STREETS)}"
        city, state, zip_code = rng.choice(_CITIES)
        customer = Customer(
            customer_id=cid,
            full_name=f"{first} {last}",
            date_of_birth=_date(rng, datetime.date(1955, 1, 1), 365 * 45).isoformat(),
            email=f"{first.lower()}.{last.lower()}@example.com",
            phone_number=lines[0].phone_number,
            address=Address(street=street, city=city, state=state, zip_code=zip_code),
            account_status=AccountStatus.ACTIVE,
            payment_methods=[
                PaymentMethod(
                    method_type=rng.choice(list(PaymentMethodType)),
                    account_number_last_4=f"{rng.randrange(10000):04d}",
                    expiration_date=f"{rng.randrange(1, 13):02d}/{rng.randrange(2026, 2030)}",
                )
            ],
            line_ids=[line.line_id for line in lines],
            created_at=datetime.datetime.combine(_date(rng, datetime.date(2023, 1, 1), 600), datetime.time(9, 30)),
            goodwill_credit_used_this_year=rng.choice([0.0, 0.0, 10.0, 25.0]),
        )
        monthly = sum(next(p for p in _PLANS if p.plan_id == line.plan_id).price_per_month for line in lines)
        for month, status in ((1, BillStatus.PAID), (2, BillStatus.ISSUED)):
            bid = f"B{bill_no}"
            bill_no += 1
            start = datetime.date(2025, month, 1)
            db.bills.append(
                Bill(
                    bill_id=bid,
                    customer_id=cid,
                    period_start=start,
                    period_end=(start + datetime.timedelta(days=32)).replace(day=1) - datetime.timedelta(days=1),
                    issue_date=start + datetime.timedelta(days=4),
                    total_due=monthly,
                    due_date=start + datetime.timedelta(days=18),
                    status=status,
                    line_items=[
                        LineItem(
                            description=f"{next(p for p in _PLANS if p.plan_id == ln.plan_id).name} - Line {ln.phone_number}",
                            amount=next(p for p in _PLANS if p.plan_id == ln.plan_id).price_per_month,
                            date=start + datetime.timedelta(days=4),
                            item_type="Plan Charge",
                        )
                        for ln in lines
                    ],
                )
            )
            customer.bill_ids.append(bid)
        db.customers.append(customer)
    return db


# -- tasks --------------------------------------------------------------------------------


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


def _dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def generate(out_dir: Path, seed: int, n_tasks: int = 120, eval_fraction: float = 0.3) -> Path:
    """Write a synthetic telecom data folder; returns ``out_dir``."""
    if n_tasks < 1:
        raise ValueError("n_tasks must be at least 1")
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError("eval_fraction must be in [0, 1)")
    rng = random.Random(seed)
    db = build_database(rng)
    tasks = [_make_task(i, rng, db) for i in range(n_tasks)]
    ids = [t["id"] for t in tasks]
    shuffled = ids[:]
    rng.shuffle(shuffled)
    n_test = round(n_tasks * eval_fraction)
    test = set(shuffled[:n_test])
    split = {"train": [i for i in ids if i not in test], "test": [i for i in ids if i in test]}

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _dump(out_dir / "db.json", db.model_dump(mode="json"))
    _dump(out_dir / "user_db.json", TelecomUserDB().model_dump(mode="json"))
    (out_dir / "policy.md").write_text(POLICY_FILE.read_text())
    _dump(out_dir / "tasks.json", tasks)
    _dump(out_dir / "split_tasks.json", split)
    return out_dir
