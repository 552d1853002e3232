"""Telecom domain: tau2-bench's real tasks replay, the device model, tool errors, schemas, generator."""

from __future__ import annotations

import inspect
import json
import time
from pathlib import Path

import pytest

from flatscore.domains import load_domain
from flatscore.domains.environment import UnknownToolError
from flatscore.domains.tasks import EnvFunctionCall, Task
from flatscore.domains.telecom import TelecomDomain, TelecomEnvironment, TelecomTools, TelecomUserTools
from flatscore.domains.telecom.generator import FAULTS
from flatscore.domains.toolkit import ArgumentsError, ToolError

TAU2_TELECOM = Path(__file__).resolve().parents[2].parent / "shared" / "tau2" / "telecom"
needs_tau2 = pytest.mark.skipif(
    not (TAU2_TELECOM / "tasks_train.json").exists(),
    reason=f"tau2-bench telecom data not found at {TAU2_TELECOM} (the shared tau2 folder is absent)",
)


def _real_tasks() -> list[Task]:
    if not (TAU2_TELECOM / "tasks_train.json").exists():
        return []
    return TelecomDomain(TAU2_TELECOM).tasks()


def _mutating(env: TelecomEnvironment, task: Task) -> bool:
    return any(env.tool_specs(a.requestor)[a.name].mutates for a in task.actions)


def _replay_check(domain: TelecomDomain, task: Task) -> None:
    """Before: the fault is real. Replay raises nothing. After: every env assertion holds."""
    env = domain.environment_for(task)
    assertions = task.evaluation_criteria.env_assertions
    assert assertions, f"{task.id}: no env assertions"
    before = env.check_assertions(assertions)
    assert all(r["error"] is None for r in before), before
    if _mutating(env, task):
        assert not all(r["met"] for r in before), f"{task.id}: assertions already hold before any action"
    else:
        # ground truth is only a transfer: the fault cannot be fixed, the phone really has no
        # service, and the assertion (service stays down) holds throughout
        down = env.run_env_function(
            EnvFunctionCall(
                env_type="user", func_name="assert_service_status", arguments={"expected_status": "connected"}
            )
        )
        assert down is False, f"{task.id}: transfer-only task but the phone is connected"
    for action in task.actions:
        before_hash = env.state_hash()
        env.invoke(action.requestor, action.name, action.arguments)
        if env.state_hash() != before_hash:
            assert env.tool_specs(action.requestor)[action.name].mutates, (
                f"{action.name} changed state but is not mutates=True"
            )
    after = env.check_assertions(assertions)
    failed = [r for r in after if not r["met"]]
    assert not failed, f"{task.id}: assertions fail after replay: {failed}"


# -- real tau2-bench data -----------------------------------------------------------------


@needs_tau2
@pytest.mark.needs_tau2
@pytest.mark.parametrize("task", _real_tasks(), ids=lambda t: t.id)
def test_real_task_replay(task: Task) -> None:
    _replay_check(TelecomDomain(TAU2_TELECOM), task)


@needs_tau2
@pytest.mark.needs_tau2
def test_real_data_loads_like_tau2() -> None:
    domain = load_domain("telecom", TAU2_TELECOM)
    assert isinstance(domain, TelecomDomain) and domain.dual_control
    main = (TAU2_TELECOM / "main_policy.md").read_text()
    manual = (TAU2_TELECOM / "tech_support_manual.md").read_text()
    assert domain.policy.startswith("<main_policy>\n" + main)
    assert domain.policy.endswith(manual + "\n</tech_support_policy>")
    # fresh environments do not share state
    a, b = domain.fresh_environment(), domain.fresh_environment()
    a.invoke("user", "toggle_airplane_mode", {})
    a.invoke("assistant", "enable_roaming", {"customer_id": "C1001", "line_id": "L1001"})
    assert a.state_hash() != b.state_hash()
    assert b.state_hash() == domain.fresh_environment().state_hash()


# -- device model and tools (generated data: no tau2 needed) ------------------------------


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return TelecomDomain.generate(tmp_path_factory.mktemp("telecom"), seed=11)


@pytest.fixture()
def env(gen_dir: Path) -> TelecomEnvironment:
    domain = TelecomDomain(gen_dir)
    environment = domain.fresh_environment()
    db = environment.agent_toolkit.db
    customer = db.customers[0]
    line = next(ln for ln in db.lines if ln.line_id in customer.line_ids and ln.status.value == "Active")
    environment.run_env_function(
        EnvFunctionCall(
            env_type="user",
            func_name="set_user_info",
            arguments={"name": customer.full_name, "phone_number": line.phone_number},
        )
    )
    environment.customer, environment.line = customer, line  # type: ignore[attr-defined]
    return environment


def test_user_tools_reflect_state(env: TelecomEnvironment) -> None:
    bar = env.invoke("user", "check_status_bar", {})
    assert "Airplane Mode" not in bar and "5G" in bar
    out = env.invoke("user", "toggle_airplane_mode", {})
    assert "Airplane Mode is now ON" in out
    assert "Airplane Mode" in env.invoke("user", "check_status_bar", {})
    assert "Cellular Connection: no_service" in env.invoke("user", "check_network_status", {})
    assert "cannot send" in env.invoke("user", "can_send_mms", {})
    assert env.invoke("user", "run_speed_test", {}).startswith("Speed test failed")
    env.invoke("user", "toggle_airplane_mode", {})
    assert "Airplane Mode" not in env.invoke("user", "check_status_bar", {})
    assert "Excellent" in env.invoke("user", "run_speed_test", {})

    env.invoke("user", "toggle_data_saver_mode", {})
    assert "Data Saver" in env.invoke("user", "check_status_bar", {})
    assert "Excellent" not in env.invoke("user", "run_speed_test", {})
    env.invoke("user", "toggle_data_saver_mode", {})

    env.run_env_function(EnvFunctionCall(env_type="user", func_name="unseat_sim_card"))
    assert "No SIM card" in env.invoke("user", "check_sim_status", {})
    assert "No Signal" in env.invoke("user", "check_status_bar", {})
    env.invoke("user", "reseat_sim_card", {})
    assert "active and working" in env.invoke("user", "check_sim_status", {})

    env.invoke("user", "set_network_mode_preference", {"mode": "2g_only"})
    assert "2G" in env.invoke("user", "check_status_bar", {})
    assert "cannot send" in env.invoke("user", "can_send_mms", {})
    env.invoke("user", "set_network_mode_preference", {"mode": "4g_5g_preferred"})
    assert "can send" in env.invoke("user", "can_send_mms", {})

    env.invoke("user", "toggle_data", {})
    assert "Mobile Data Off" in env.invoke("user", "check_status_bar", {})
    assert "Mobile Data Enabled: No" in env.invoke("user", "check_network_status", {})

    out = env.invoke("user", "grant_app_permission", {"app_name": "nonexistent", "permission": "sms"})
    assert out.startswith("Error.")  # tau2 reports this in the result, not as an exception


def test_apn_reset_needs_reboot(env: TelecomEnvironment) -> None:
    env.run_env_function(EnvFunctionCall(env_type="user", func_name="break_apn_settings"))
    assert "no_service" in env.invoke("user", "check_network_status", {})
    env.invoke("user", "reset_apn_settings", {})
    assert "Cellular Connection: no_service" in env.invoke("user", "check_network_status", {})
    env.invoke("user", "reboot_device", {})
    assert "Cellular Connection: connected" in env.invoke("user", "check_network_status", {})


def test_cross_side_sync(env: TelecomEnvironment) -> None:
    cid, lid = env.customer.customer_id, env.line.line_id  # type: ignore[attr-defined]
    surroundings = env.user_toolkit.db.surroundings
    env.invoke("assistant", "disable_roaming", {"customer_id": cid, "line_id": lid})
    assert surroundings.roaming_allowed is False
    env.invoke("assistant", "enable_roaming", {"customer_id": cid, "line_id": lid})
    assert surroundings.roaming_allowed is True

    env.run_env_function(
        EnvFunctionCall(
            env_type="assistant",
            func_name="suspend_line_for_overdue_bill",
            arguments={"customer_id": cid, "line_id": lid, "new_bill_id": "BX1", "contract_ended": False},
        )
    )
    assert surroundings.line_active is False
    assert "No payment request" in env.invoke("user", "check_payment_request", {})
    env.invoke("assistant", "send_payment_request", {"customer_id": cid, "bill_id": "BX1"})
    assert "BX1" in env.invoke("user", "check_payment_request", {})
    with pytest.raises(ToolError):  # only one bill may await payment
        env.invoke("assistant", "send_payment_request", {"customer_id": cid, "bill_id": "BX1"})
    env.invoke("user", "make_payment", {})
    bill = env.agent_toolkit.get_details_by_id("BX1")
    assert bill.status.value == "Paid" and surroundings.payment_request is None
    env.invoke("assistant", "resume_line", {"customer_id": cid, "line_id": lid})
    assert surroundings.line_active is True


def test_agent_tool_errors(env: TelecomEnvironment) -> None:
    cid, lid = env.customer.customer_id, env.line.line_id  # type: ignore[attr-defined]
    with pytest.raises(ToolError):
        env.invoke("assistant", "get_customer_by_id", {"customer_id": "C0000"})
    with pytest.raises(ToolError):
        env.invoke("assistant", "get_customer_by_phone", {"phone_number": "000-000-0000"})
    with pytest.raises(ToolError):
        env.invoke("assistant", "get_details_by_id", {"id": "X12"})
    with pytest.raises(ToolError):
        env.invoke("assistant", "refuel_data", {"customer_id": cid, "line_id": lid, "gb_amount": -1})
    with pytest.raises(ToolError):
        env.invoke("assistant", "resume_line", {"customer_id": cid, "line_id": lid})  # line is active
    other = next(c for c in env.agent_toolkit.db.customers if c.customer_id != cid)
    with pytest.raises(ToolError):  # line of another customer
        env.invoke("assistant", "get_data_usage", {"customer_id": other.customer_id, "line_id": lid})
    assert env.invoke("assistant", "get_customer_by_phone", {"phone_number": env.line.phone_number}).customer_id == cid  # type: ignore[attr-defined]


def test_wrong_arguments_and_unknown_tools(env: TelecomEnvironment) -> None:
    cid, lid = env.customer.customer_id, env.line.line_id  # type: ignore[attr-defined]
    with pytest.raises(ArgumentsError):
        env.agent_toolkit.call("refuel_data", {"customer_id": cid, "line_id": lid, "gb_amount": "lots"})
    with pytest.raises(ArgumentsError):
        env.agent_toolkit.call("get_customer_by_id", {})
    with pytest.raises(ArgumentsError):
        env.agent_toolkit.call("get_customer_by_id", {"customer_id": cid, "extra": 1})
    with pytest.raises(ArgumentsError):
        env.user_toolkit.call("set_network_mode_preference", {"mode": "5g_only"})
    with pytest.raises(UnknownToolError):
        env.invoke("assistant", "toggle_airplane_mode", {})  # a user tool
    with pytest.raises(UnknownToolError):
        env.invoke("user", "refuel_data", {"customer_id": cid, "line_id": lid, "gb_amount": 1.0})
    with pytest.raises(UnknownToolError):
        env.invoke("user", "turn_airplane_mode_on", {})  # set-up function, not a tool


def test_tool_sets_and_schemas() -> None:
    agent, user = set(TelecomTools.tool_names()), set(TelecomUserTools.tool_names())
    assert agent and user and not agent & user
    # set-up and assertion functions exist but are not tools
    for name in (
        "set_data_usage",
        "suspend_line_for_overdue_bill",
        "assert_no_overdue_bill",
        "assert_data_refueling_amount",
    ):
        assert callable(getattr(TelecomTools, name)) and name not in agent
    for name in (
        "set_user_info",
        "turn_airplane_mode_on",
        "break_vpn",
        "lock_sim_card",
        "simulate_network_search",
        "assert_can_send_mms",
        "assert_internet_speed",
        "remove_app_permission",
    ):
        assert callable(getattr(TelecomUserTools, name)) and name not in user
    for kit in (TelecomTools, TelecomUserTools):
        for spec in kit.specs.values():
            params = {
                n: p for n, p in inspect.signature(getattr(kit, spec.method_name)).parameters.items() if n != "self"
            }
            fn = spec.openai_schema()["function"]
            assert set(fn["parameters"]["properties"]) == set(params), spec.name
            assert set(fn["parameters"]["required"]) == {
                n for n, p in params.items() if p.default is inspect.Parameter.empty
            }
            assert fn["description"] and len(fn["description"]) < 300
    modes = TelecomUserTools.specs["set_network_mode_preference"].openai_schema()["function"]["parameters"]
    assert set(modes["properties"]["mode"]["enum"]) == {"4g_5g_preferred", "4g_only", "3g_only", "2g_only"}
    reads = {"get_customer_by_id", "get_data_usage", "check_status_bar", "can_send_mms", "run_speed_test"}
    writes = {"refuel_data", "enable_roaming", "toggle_airplane_mode", "reboot_device", "make_payment"}
    specs = {**TelecomTools.specs, **TelecomUserTools.specs}
    assert not any(specs[n].mutates for n in reads) and all(specs[n].mutates for n in writes)


# -- generator ----------------------------------------------------------------------------

_FILES = ("db.json", "user_db.json", "policy.md", "tasks.json", "split_tasks.json")


def test_generator_deterministic_and_fast(tmp_path: Path, gen_dir: Path) -> None:
    start = time.perf_counter()
    again = TelecomDomain.generate(tmp_path / "again", seed=11)
    assert time.perf_counter() - start < 2.0
    for name in _FILES:
        assert (again / name).read_bytes() == (gen_dir / name).read_bytes(), name
    other = TelecomDomain.generate(tmp_path / "other", seed=12)
    assert (other / "tasks.json").read_bytes() != (gen_dir / "tasks.json").read_bytes()


def test_generator_parameters(tmp_path: Path) -> None:
    small = TelecomDomain(TelecomDomain.generate(tmp_path / "small", seed=3, n_tasks=10, eval_fraction=0.5))
    assert len(small.tasks()) == 10 and len(small.tasks("test")) == 5
    with pytest.raises(ValueError):
        TelecomDomain.generate(tmp_path / "bad", seed=3, eval_fraction=1.5)


def test_customer_lookup_by_name(env: TelecomEnvironment) -> None:
    customer = env.customer  # type: ignore[attr-defined]
    found = env.invoke(
        "assistant", "get_customer_by_name", {"full_name": customer.full_name.upper(), "dob": customer.date_of_birth}
    )
    assert [c.customer_id for c in found] == [customer.customer_id]
    assert env.invoke("assistant", "get_customer_by_name", {"full_name": customer.full_name, "dob": "1900-01-01"}) == []


def test_generated_layout_and_split(gen_dir: Path) -> None:
    domain = TelecomDomain(gen_dir)
    tasks = domain.tasks()
    ids = [t.id for t in tasks]
    assert len(tasks) >= 100 and len(set(ids)) == len(ids)
    split = json.loads((gen_dir / "split_tasks.json").read_text())
    train, test = set(split["train"]), set(split["test"])
    assert train and test and not train & test and train | test == set(ids)
    assert abs(len(test) / len(ids) - 0.3) < 0.02
    assert {t.id for t in domain.tasks("test")} == test
    assert domain.policy == (gen_dir / "policy.md").read_text()
    db = domain.fresh_environment().agent_toolkit.db
    phones = {ln.phone_number: ln.line_id for ln in db.lines}
    families = set()
    for task in tasks:
        family, rest = task.id[1:].split("]", 1)
        faults = rest.split("[PERSONA")[0].split("|")
        families.add(family)
        assert 1 <= len(faults) <= 3 and all(family in FAULTS[f][0] for f in faults), task.id
        known = task.instructions.known_info or ""
        setup = task.initial_state.initialization_actions[0]
        assert setup.func_name == "set_user_info"
        assert setup.arguments["name"] in known and setup.arguments["phone_number"] in known
        assert setup.arguments["phone_number"] in phones
    assert families == {"mms_issue", "mobile_data_issue", "service_issue"}


def test_generated_task_replay(gen_dir: Path) -> None:
    domain = TelecomDomain(gen_dir)
    for task in domain.tasks():
        _replay_check(domain, task)
