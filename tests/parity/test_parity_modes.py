"""Parity mode against default mode, each deliberate difference of docs/tau2-parity.md in turn.

These need only tau2's data (../shared/tau2) and, for the descriptions, its source
(../shared/tau2-bench); they skip, saying which, where absent. What tau2 itself answers is
checked by test_tau2_differential.py; here each mode is pinned to its own behaviour.
"""

from __future__ import annotations

import json

import pytest
from tau2_harness import TAU2_DATA, TAU2_SOURCE

from flatscore.domains import load_domain
from flatscore.domains.tasks import Action
from flatscore.domains.tau2_checkout import CheckoutError, describe, described_specs, read_tools
from flatscore.domains.tau2_parity import answer_call, tau2_text
from flatscore.engine.scoring import all_calls, successful_calls, tau2_action_match


def _domain(name: str):  # type: ignore[no-untyped-def]
    if not (TAU2_DATA / name / "tasks_train.json").exists():
        pytest.skip(f"tau2-bench data not found at {TAU2_DATA} (../shared/tau2 is absent on this machine)")
    return load_domain(name, TAU2_DATA / name)


def _gold_until(domain, task_id: str, tool: str, parity: bool):  # type: ignore[no-untyped-def]
    """The task's environment after its gold actions up to and including the first call of ``tool``."""
    task = domain.task(task_id)
    env = domain.environment_for(task)
    for action in task.actions:
        answer = answer_call(env, action.requestor, action.name, action.arguments, tau2_parity=parity)
        if action.name == tool:
            return env, action, answer
    raise AssertionError(f"task {task_id} has no {tool}")


def test_modify_items_bug_only_in_parity_mode() -> None:
    retail = _domain("retail")
    results = {}
    for parity in (False, True):
        env, action, answer = _gold_until(retail, "20", "modify_pending_order_items", parity)
        order = json.loads(answer.content)
        prices = {i["item_id"]: i["price"] for i in order["items"] if i["item_id"] in action.arguments["new_item_ids"]}
        results[parity] = prices
    assert len(results[False]) == len(results[True]) == 4
    assert len(set(results[False].values())) == 4  # each new item at its own price
    assert len(set(results[True].values())) == 1  # tau2: every one at the last new item's price
    last = action.arguments["new_item_ids"][-1]
    assert set(results[True].values()) == {results[False][last]}


def test_charge_is_unrounded_only_in_parity_mode() -> None:
    retail = _domain("retail")
    amounts = {}
    for parity in (False, True):
        _, _, answer = _gold_until(retail, "3", "modify_pending_order_items", parity)
        amounts[parity] = json.loads(answer.content)["payment_history"][-1]["amount"]
    assert amounts[False] == round(amounts[True], 2)
    assert amounts[True] != amounts[False]


def test_bad_arguments_get_pythons_typeerror_only_in_parity_mode() -> None:
    retail = _domain("retail")
    env = retail.fresh_environment()
    default = answer_call(env, "assistant", "get_order_details", {"id": "#W1"})
    parity = answer_call(env, "assistant", "get_order_details", {"id": "#W1"}, tau2_parity=True)
    assert default.error and parity.error
    assert default.content.startswith("Error: Invalid arguments for get_order_details")
    assert parity.content == "Error: RetailTools.get_order_details() got an unexpected keyword argument 'id'"
    missing = answer_call(env, "assistant", "get_order_details", {}, tau2_parity=True)
    assert (
        missing.content == "Error: RetailTools.get_order_details() missing 1 required positional argument: 'order_id'"
    )
    # a number for an id: tau2 looks it up as sent (not found), flatscore's schema refuses it
    assert answer_call(env, "assistant", "get_order_details", {"order_id": 5}, tau2_parity=True).content == (
        "Error: Order not found"
    )
    assert "Invalid arguments" in answer_call(env, "assistant", "get_order_details", {"order_id": 5}).content


def test_result_json_layout_per_mode() -> None:
    retail = _domain("retail")
    env = retail.fresh_environment()
    order_id = next(iter(retail.tasks()[0].actions[1].arguments.values()))
    default = answer_call(env, "assistant", "get_order_details", {"order_id": order_id}).content
    parity = answer_call(env, "assistant", "get_order_details", {"order_id": order_id}, tau2_parity=True).content
    assert default.startswith('{"order_id":"#W') and parity.startswith('{"order_id": "#W')
    assert json.loads(default) == json.loads(parity)


def test_tau2_text_strings_numbers_outside_records() -> None:
    assert tau2_text("plain") == "plain"
    assert tau2_text(3) == '"3"'
    assert tau2_text({"a": 1.5, "b": [2, True], "c": None}) == '{"a": "1.5", "b": ["2", "True"], "c": null}'


def test_status_bar_words_per_mode() -> None:
    telecom = _domain("telecom")
    task = telecom.tasks()[0]
    bars = {p: answer_call(telecom.environment_for(task), "user", "check_status_bar", {}, p).content for p in (0, 1)}
    assert "Battery" in bars[0] and "\U0001f50b" not in bars[0]
    assert "\U0001f50b" in bars[1] and "Battery" not in bars[1]


def test_invalid_network_mode_counts_as_error_only_in_default_mode() -> None:
    telecom = _domain("telecom")
    env = telecom.environment_for(telecom.tasks()[0])
    default = answer_call(env, "user", "set_network_mode_preference", {"mode": "6g"})
    parity = answer_call(env, "user", "set_network_mode_preference", {"mode": "6g"}, tau2_parity=True)
    assert default.error and not parity.error  # tau2 answers a text, so its budget does not move
    assert parity.content.startswith("Failed to set network mode: '6g'")


def test_action_check_per_mode() -> None:
    gold = Action(name="transfer_to_human_agents", arguments={"summary": "x"}, compare_args=[])
    assert tau2_action_match(gold, "transfer_to_human_agents", {"summary": "y", "extra": 1})
    strict = Action(name="get_order_details", arguments={"order_id": "#W1"})
    assert tau2_action_match(strict, "get_order_details", {})  # tau2 compares the keys the call sent: none
    assert not tau2_action_match(strict, "get_order_details", {"order_id": "#W1", "x": 1})
    trajectory = [
        {"role": "user", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": '{"k": 1}'}}]},
        {"role": "tool", "tool_call_id": "a", "content": "Error: no", "error": True},
    ]
    assert all_calls(trajectory) == [("f", {"k": 1})]  # tau2: any call, any party, any outcome
    assert successful_calls(trajectory) == []  # default: only calls that succeeded


def test_describe_reads_a_google_docstring() -> None:
    doc = """Do a thing.
        More about it.

        Args:
            first: The first one,
                   over two lines.
            second (int): The second.

        Returns:
            str: Something.
        """
    description, params = describe(doc)
    assert description == "Do a thing.\n\nMore about it."
    assert params == {"first": "The first one,\nover two lines.", "second": "The second."}


def test_checkout_descriptions_replace_flatscores() -> None:
    if not (TAU2_SOURCE / "src" / "tau2").is_dir():
        pytest.skip(f"tau2-bench source not found at {TAU2_SOURCE} (../shared/tau2-bench is absent on this machine)")
    telecom = _domain("telecom")
    specs = telecom.fresh_environment().tool_specs("user")
    shown = described_specs(specs, str(TAU2_SOURCE), "telecom", "user")
    assert list(shown) == [t.name for t in read_tools(str(TAU2_SOURCE), "telecom", "user")]
    mode = shown["set_network_mode_preference"].openai_schema()["function"]["parameters"]
    assert mode["$defs"]["NetworkModePreference"]["enum"][0] == "4g_5g_preferred"
    assert all(s.description != specs[n].description for n, s in shown.items())
    with pytest.raises(CheckoutError, match="no "):
        described_specs(specs, "/nonexistent", "telecom", "user")


def test_communicate_check_with_a_comma_per_mode() -> None:
    from flatscore.engine.records import Termination
    from flatscore.engine.scoring import Evaluator

    retail = _domain("retail")
    task = retail.tasks()[0]
    criteria = task.evaluation_criteria.model_copy(
        update={"communicate_info": ["1,234"], "reward_basis": ["COMMUNICATE"]}
    )
    task = task.model_copy(update={"evaluation_criteria": criteria})
    said = [{"role": "assistant", "content": "That comes to 1,234 dollars."}]
    rewards = {
        parity: Evaluator(retail, tau2_parity=parity).evaluate(
            task, retail.environment_for(task), said, Termination.AGENT_STOP
        )["reward"]
        for parity in (False, True)
    }
    assert rewards == {False: 1.0, True: 0.0}  # tau2 strips commas from the message, not from the wanted text
