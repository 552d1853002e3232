"""Retail domain: tau2-bench tool semantics, real-data replay, schemas and the synthetic generator."""

from __future__ import annotations

import hashlib
import inspect
import json
import typing
from pathlib import Path

import pytest

from flatscore.domains import load_domain
from flatscore.domains.retail import RetailDomain, RetailTools
from flatscore.domains.retail.data_model import GiftCard
from flatscore.domains.toolkit import ArgumentsError, ToolError, render_result

TAU2_RETAIL = Path(__file__).resolve().parents[2].parent / "shared" / "tau2" / "retail"

TAU2_TOOLS = {
    "calculate",
    "cancel_pending_order",
    "exchange_delivered_order_items",
    "find_user_id_by_email",
    "find_user_id_by_name_zip",
    "get_item_details",
    "get_order_details",
    "get_product_details",
    "get_user_details",
    "list_all_product_types",
    "modify_pending_order_address",
    "modify_pending_order_items",
    "modify_pending_order_payment",
    "modify_user_address",
    "return_delivered_order_items",
    "transfer_to_human_agents",
}
WRITE_TOOLS = {
    "cancel_pending_order",
    "exchange_delivered_order_items",
    "modify_pending_order_address",
    "modify_pending_order_items",
    "modify_pending_order_payment",
    "modify_user_address",
    "return_delivered_order_items",
}


# ------------------------------------------------------------------------------------------
# fixtures
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return RetailDomain.generate(tmp_path_factory.mktemp("retail") / "seed11", seed=11)


@pytest.fixture(scope="module")
def gen_domain(gen_dir: Path) -> RetailDomain:
    return RetailDomain(gen_dir)


@pytest.fixture
def env(gen_domain: RetailDomain):
    return gen_domain.fresh_environment()


def _db(env) -> typing.Any:
    return env.agent_toolkit.db


def _order_where(env, predicate):
    for order in _db(env).orders.values():
        if predicate(order):
            return order
    pytest.fail("generated world lacks an order of the needed kind")


def _real_domain() -> RetailDomain:
    if not (TAU2_RETAIL / "db.json").is_file():
        pytest.skip(f"tau2-bench retail data not present at {TAU2_RETAIL}")
    return RetailDomain(TAU2_RETAIL)


# ------------------------------------------------------------------------------------------
# real tau2 data
# ------------------------------------------------------------------------------------------
def _justified(error: ToolError, name: str, args: dict, raw: dict) -> bool:
    """Whether a ToolError raised while replaying tau2's ground truth is what the raw data implies.

    tau2's ground-truth trajectories deliberately contain failing calls (a mistyped email, an
    order id without 'W', a zip the user misremembers, the example product id of a docstring),
    and tau2 itself turns such errors into an error message for the agent. Each failure must be
    explained by an independent look at the raw db.json.
    """
    msg = str(error)
    if msg == "User not found" and name == "find_user_id_by_email":
        return all(u["email"].lower() != args["email"].lower() for u in raw["users"].values())
    if msg == "User not found" and name == "find_user_id_by_name_zip":
        return not any(
            u["name"]["first_name"].lower() == args["first_name"].lower()
            and u["name"]["last_name"].lower() == args["last_name"].lower()
            and u["address"]["zip"] == args["zip"]
            for u in raw["users"].values()
        )
    if msg == "Order not found":
        return args["order_id"] not in raw["orders"]
    if msg == "Product not found":
        return args["product_id"] not in raw["products"]
    if msg.startswith("Insufficient gift card balance"):
        order = raw["orders"][args["order_id"]]
        price = {i["item_id"]: i["price"] for i in order["items"]}
        variants = {vid: v for p in raw["products"].values() for vid, v in p["variants"].items()}
        diff = sum(variants[n]["price"] - price[o] for o, n in zip(args["item_ids"], args["new_item_ids"]))
        card = raw["users"][order["user_id"]]["payment_methods"][args["payment_method_id"]]
        return card["source"] == "gift_card" and card["balance"] < round(diff, 2)
    return False


@pytest.mark.needs_tau2
def test_real_tasks_replay_through_tools() -> None:
    domain = _real_domain()
    raw = json.loads((TAU2_RETAIL / "db.json").read_text())
    tasks = domain.tasks()
    assert tasks, "tasks_train.json holds no tasks"
    pristine = domain.fresh_environment().state_hash()
    clean_tasks = 0
    communicate_total = communicate_found = 0
    for task in tasks:
        env = domain.environment_for(task)
        writes = [a for a in task.actions if env.agent_toolkit.specs[a.name].mutates]
        before = None
        if writes:  # hashing tau2's 1000-order DB is the slow part: reuse the pristine hash
            before = pristine if task.initial_state is None else env.state_hash()
        texts: list[str] = []
        wrote = False
        failed = False
        for action in task.actions:
            try:
                result = env.invoke(action.requestor, action.name, action.arguments)
            except ToolError as exc:  # anything else (ArgumentsError, KeyError, TypeError) fails the test
                assert _justified(exc, action.name, action.arguments, raw), (task.id, action.name, str(exc))
                failed = True
                continue
            texts.append(render_result(result))
            wrote = wrote or action.name in WRITE_TOOLS
        clean_tasks += not failed
        if wrote:
            assert env.state_hash() != before, f"task {task.id}: writes succeeded but the DB did not change"
        for info in task.evaluation_criteria.communicate_info or []:
            communicate_total += 1
            communicate_found += any(info in text for text in texts)
    # Almost all of tau2's ground truth replays without a single error.
    assert clean_tasks >= 0.8 * len(tasks)
    # tau2's communicate_info strings are what the *agent* must say; many are derived by the
    # agent (sums, differences, counts, the cheapest option, '481.50' with a trailing zero) and
    # so appear in no tool result. What holds is that the literal ones (prices, totals,
    # tracking ids, options) do show up verbatim in our rendering, which is a majority.
    assert communicate_total > 0
    assert communicate_found >= 0.5 * communicate_total, (communicate_found, communicate_total)


@pytest.mark.needs_tau2
def test_real_domain_loads_via_registry_and_copies_are_independent() -> None:
    _real_domain()
    domain = load_domain("retail", TAU2_RETAIL)
    assert isinstance(domain, RetailDomain)
    assert "retail" in domain.policy.lower()
    a, b = domain.fresh_environment(), domain.fresh_environment()
    order_id = next(o.order_id for o in a.agent_toolkit.db.orders.values() if o.status == "pending")
    pristine = b.state_hash()
    a.invoke("assistant", "cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
    assert a.agent_toolkit.db.orders[order_id].status == "cancelled"
    assert b.agent_toolkit.db.orders[order_id].status == "pending"
    assert b.state_hash() == pristine == domain.fresh_environment().state_hash()


# ------------------------------------------------------------------------------------------
# tool semantics and errors
# ------------------------------------------------------------------------------------------
def test_order_errors(env) -> None:
    delivered = _order_where(env, lambda o: o.status == "delivered")
    pending = _order_where(env, lambda o: o.status == "pending")
    with pytest.raises(ToolError, match="^Non-pending order cannot be cancelled$"):
        env.invoke("assistant", "cancel_pending_order", {"order_id": delivered.order_id, "reason": "no longer needed"})
    with pytest.raises(ToolError, match="^Order not found$"):
        env.invoke("assistant", "get_order_details", {"order_id": "W0000000"})
    with pytest.raises(ToolError, match="^Non-delivered order cannot be returned$"):
        env.invoke(
            "assistant",
            "return_delivered_order_items",
            {
                "order_id": pending.order_id,
                "item_ids": [pending.items[0].item_id],
                "payment_method_id": pending.payment_history[0].payment_method_id,
            },
        )
    with pytest.raises(ToolError, match="^Non-delivered order cannot be exchanged$"):
        env.invoke(
            "assistant",
            "exchange_delivered_order_items",
            {
                "order_id": pending.order_id,
                "item_ids": [],
                "new_item_ids": [],
                "payment_method_id": pending.payment_history[0].payment_method_id,
            },
        )
    with pytest.raises(ToolError, match="^Some item not found$"):
        env.invoke(
            "assistant",
            "return_delivered_order_items",
            {
                "order_id": delivered.order_id,
                "item_ids": ["0000000000"],
                "payment_method_id": delivered.payment_history[0].payment_method_id,
            },
        )
    with pytest.raises(ToolError, match="^Payment method not found$"):
        env.invoke(
            "assistant", "modify_pending_order_payment", {"order_id": pending.order_id, "payment_method_id": "paypal_0"}
        )
    with pytest.raises(ToolError, match="^The new payment method should be different from the current one$"):
        env.invoke(
            "assistant",
            "modify_pending_order_payment",
            {"order_id": pending.order_id, "payment_method_id": pending.payment_history[0].payment_method_id},
        )
    with pytest.raises(ToolError, match="^User not found$"):
        env.invoke("assistant", "find_user_id_by_email", {"email": "nobody@example.com"})
    with pytest.raises(ToolError, match="^Item not found$"):
        env.invoke("assistant", "get_item_details", {"item_id": "123"})
    with pytest.raises(ToolError, match="^Product not found$"):
        env.invoke("assistant", "get_product_details", {"product_id": "123"})


def test_wrong_arguments_are_argument_errors(env) -> None:
    kit = env.agent_toolkit
    order = _order_where(env, lambda o: o.status == "pending")
    pm = order.payment_history[0].payment_method_id
    bad_calls = [
        ("get_order_details", {"order_id": 1234567}),
        ("get_order_details", {}),
        ("get_order_details", {"order_id": order.order_id, "extra": 1}),
        ("return_delivered_order_items", {"order_id": order.order_id, "item_ids": "123", "payment_method_id": pm}),
        ("cancel_pending_order", {"order_id": order.order_id, "reason": "changed my mind"}),
    ]
    for name, args in bad_calls:
        with pytest.raises(ArgumentsError):
            kit.call(name, args)
    assert order.status == "pending"


def test_return_refund_rules(env) -> None:
    db = _db(env)

    def has_other_card(o):
        user = db.users[o.user_id]
        return o.status == "delivered" and any(
            not isinstance(m, GiftCard) and pid != o.payment_history[0].payment_method_id
            for pid, m in user.payment_methods.items()
        )

    order = _order_where(env, has_other_card)
    user = db.users[order.user_id]
    other = next(
        pid
        for pid, m in user.payment_methods.items()
        if not isinstance(m, GiftCard) and pid != order.payment_history[0].payment_method_id
    )
    item_ids = [i.item_id for i in order.items]
    with pytest.raises(ToolError, match="^Payment method should be the original payment method$"):
        env.invoke(
            "assistant",
            "return_delivered_order_items",
            {"order_id": order.order_id, "item_ids": item_ids, "payment_method_id": other},
        )
    result = env.invoke(
        "assistant",
        "return_delivered_order_items",
        {
            "order_id": order.order_id,
            "item_ids": item_ids[::-1],
            "payment_method_id": order.payment_history[0].payment_method_id,
        },
    )
    assert result.status == "return requested"
    assert result.return_items == sorted(item_ids)
    assert db.orders[order.order_id].status == "return requested"


def test_cancel_refunds_gift_card_at_once(env) -> None:
    db = _db(env)
    order = _order_where(
        env,
        lambda o: (
            o.status == "pending"
            and isinstance(db.users[o.user_id].payment_methods[o.payment_history[0].payment_method_id], GiftCard)
        ),
    )
    card = db.users[order.user_id].payment_methods[order.payment_history[0].payment_method_id]
    balance, amount = card.balance, order.payment_history[0].amount
    result = env.invoke(
        "assistant", "cancel_pending_order", {"order_id": order.order_id, "reason": "ordered by mistake"}
    )
    assert result.status == "cancelled" and result.cancel_reason == "ordered by mistake"
    assert [p.transaction_type for p in result.payment_history] == ["payment", "refund"]
    assert result.payment_history[1].amount == amount
    assert card.balance == round(balance + amount, 2)
    with pytest.raises(ToolError, match="^Non-pending order cannot be cancelled$"):
        env.invoke("assistant", "cancel_pending_order", {"order_id": order.order_id, "reason": "ordered by mistake"})


def test_modify_payment_moves_gift_card_balance(env) -> None:
    db = _db(env)

    def fits(o):
        user = db.users[o.user_id]
        return o.status == "pending" and any(
            isinstance(m, GiftCard)
            and pid != o.payment_history[0].payment_method_id
            and m.balance >= o.payment_history[0].amount
            for pid, m in user.payment_methods.items()
        )

    order = _order_where(env, fits)
    user = db.users[order.user_id]
    card_id, card = next(
        (pid, m)
        for pid, m in user.payment_methods.items()
        if isinstance(m, GiftCard) and pid != order.payment_history[0].payment_method_id
    )
    old_id, amount, balance = order.payment_history[0].payment_method_id, order.payment_history[0].amount, card.balance
    result = env.invoke(
        "assistant", "modify_pending_order_payment", {"order_id": order.order_id, "payment_method_id": card_id}
    )
    assert [(p.transaction_type, p.payment_method_id) for p in result.payment_history] == [
        ("payment", old_id),
        ("payment", card_id),
        ("refund", old_id),
    ]
    assert card.balance == round(balance - amount, 2)
    assert result.status == "pending"
    with pytest.raises(ToolError, match="^There should be exactly one payment for a pending order$"):
        env.invoke(
            "assistant", "modify_pending_order_payment", {"order_id": order.order_id, "payment_method_id": old_id}
        )


def _swappable_order(env, status: str, n_items: int):
    db = _db(env)

    def alternatives(item):
        return [v for v in db.products[item.product_id].variants.values() if v.available and v.item_id != item.item_id]

    for order in db.orders.values():
        if (
            order.status == status
            and len(order.items) >= n_items
            and all(alternatives(i) for i in order.items[:n_items])
        ):
            items = order.items[:n_items]
            return order, items, [alternatives(i)[0] for i in items]
    pytest.fail(f"no {status} order with {n_items} swappable items")


def test_modify_items_updates_each_item_and_locks_order(env) -> None:
    db = _db(env)
    order, items, targets = _swappable_order(env, "pending", 2)
    user = db.users[order.user_id]
    diff = round(sum(t.price - i.price for i, t in zip(items, targets)), 2)
    pid = next((p for p, m in user.payment_methods.items() if not isinstance(m, GiftCard) or m.balance >= diff), None)
    if pid is None:
        pytest.skip("no payment method of the owner covers the difference")
    old_ids = [i.item_id for i in items]
    with pytest.raises(ToolError, match="^The number of items to be exchanged should match$"):
        env.invoke(
            "assistant",
            "modify_pending_order_items",
            {"order_id": order.order_id, "item_ids": old_ids, "new_item_ids": old_ids[:1], "payment_method_id": pid},
        )
    with pytest.raises(ToolError, match="^The new item id should be different from the old item id$"):
        env.invoke(
            "assistant",
            "modify_pending_order_items",
            {
                "order_id": order.order_id,
                "item_ids": old_ids[:1],
                "new_item_ids": old_ids[:1],
                "payment_method_id": pid,
            },
        )
    result = env.invoke(
        "assistant",
        "modify_pending_order_items",
        {
            "order_id": order.order_id,
            "item_ids": old_ids,
            "new_item_ids": [t.item_id for t in targets],
            "payment_method_id": pid,
        },
    )
    assert result.status == "pending (item modified)"
    for item, target in zip(result.items[:2], targets):
        assert (item.item_id, item.price, item.options) == (target.item_id, target.price, target.options)
    last = result.payment_history[-1]
    assert last.transaction_type == ("payment" if diff > 0 else "refund") and last.amount == abs(diff)
    with pytest.raises(ToolError, match="^Non-pending order cannot be modified$"):
        env.invoke(
            "assistant",
            "modify_pending_order_items",
            {
                "order_id": order.order_id,
                "item_ids": [targets[0].item_id],
                "new_item_ids": [old_ids[0]],
                "payment_method_id": pid,
            },
        )
    with pytest.raises(ToolError, match="^Non-pending order cannot be cancelled$"):
        env.invoke("assistant", "cancel_pending_order", {"order_id": order.order_id, "reason": "no longer needed"})
    # the address of an item-modified order can still change ('pending' in the status)
    moved = env.invoke(
        "assistant",
        "modify_pending_order_address",
        {
            "order_id": order.order_id,
            "address1": "1 Test Road",
            "address2": "",
            "city": "Reno",
            "state": "NV",
            "country": "USA",
            "zip": "89501",
        },
    )
    assert moved.address.city == "Reno"


def test_exchange_records_request_and_difference(env) -> None:
    db = _db(env)
    order, items, targets = _swappable_order(env, "delivered", 1)
    pid = order.payment_history[0].payment_method_id
    method = db.users[order.user_id].payment_methods[pid]
    diff = round(targets[0].price - items[0].price, 2)
    if isinstance(method, GiftCard) and method.balance < diff:
        pytest.skip("original gift card cannot cover the difference")
    with pytest.raises(ToolError, match=r"^Number of 0000000000 not found\.$"):
        env.invoke(
            "assistant",
            "exchange_delivered_order_items",
            {
                "order_id": order.order_id,
                "item_ids": ["0000000000"],
                "new_item_ids": [targets[0].item_id],
                "payment_method_id": pid,
            },
        )
    result = env.invoke(
        "assistant",
        "exchange_delivered_order_items",
        {
            "order_id": order.order_id,
            "item_ids": [items[0].item_id],
            "new_item_ids": [targets[0].item_id],
            "payment_method_id": pid,
        },
    )
    assert result.status == "exchange requested"
    assert result.exchange_items == [items[0].item_id] and result.exchange_new_items == [targets[0].item_id]
    assert result.exchange_price_difference == diff and result.exchange_payment_method_id == pid
    assert result.items[0].item_id == items[0].item_id  # the order's items stay as delivered


def test_lookups_and_generic_tools(env) -> None:
    db = _db(env)
    user = next(iter(db.users.values()))
    assert env.invoke("assistant", "find_user_id_by_email", {"email": user.email.upper()}) == user.user_id
    assert (
        env.invoke(
            "assistant",
            "find_user_id_by_name_zip",
            {
                "first_name": user.name.first_name.lower(),
                "last_name": user.name.last_name.upper(),
                "zip": user.address.zip,
            },
        )
        == user.user_id
    )
    with pytest.raises(ToolError, match="^User not found$"):
        env.invoke(
            "assistant",
            "find_user_id_by_name_zip",
            {"first_name": user.name.first_name, "last_name": user.name.last_name, "zip": "00000"},
        )
    listing = json.loads(env.invoke("assistant", "list_all_product_types", {}))
    assert listing == {p.name: pid for pid, p in db.products.items()}
    assert list(listing) == sorted(listing)
    product = next(iter(db.products.values()))
    variant = next(iter(product.variants.values()))
    assert env.invoke("assistant", "get_item_details", {"item_id": variant.item_id}) == variant
    assert env.invoke("assistant", "calculate", {"expression": "2 + 3 * 4"}) == "14.0"
    assert env.invoke("assistant", "calculate", {"expression": "(10 - 2.555) / 2"}) == str(round((10 - 2.555) / 2, 2))
    with pytest.raises(ToolError, match="^Invalid characters in expression$"):
        env.invoke("assistant", "calculate", {"expression": "__import__('os')"})
    with pytest.raises(ToolError):
        env.invoke("assistant", "calculate", {"expression": "1 / 0"})
    with pytest.raises(ToolError):
        env.invoke("assistant", "calculate", {"expression": "2 +"})
    assert env.invoke("assistant", "transfer_to_human_agents", {"summary": "wants a human"}) == "Transfer successful"


def test_results_are_snapshots(env) -> None:
    order = _order_where(env, lambda o: "pending" in o.status)
    seen = env.invoke("assistant", "get_order_details", {"order_id": order.order_id})
    env.invoke(
        "assistant",
        "modify_pending_order_address",
        {
            "order_id": order.order_id,
            "address1": "9 New Street",
            "address2": "Apt 2",
            "city": "Reno",
            "state": "NV",
            "country": "USA",
            "zip": "89501",
        },
    )
    assert seen.address.address1 != "9 New Street"
    assert _db(env).orders[order.order_id].address.address1 == "9 New Street"


# ------------------------------------------------------------------------------------------
# schemas
# ------------------------------------------------------------------------------------------
def test_tool_set_and_mutation_flags() -> None:
    assert set(RetailTools.specs) == TAU2_TOOLS
    assert {n for n, s in RetailTools.specs.items() if s.mutates} == WRITE_TOOLS
    assert all(s.side == "assistant" for s in RetailTools.specs.values())


def test_schemas_follow_signatures() -> None:
    for name, spec in RetailTools.specs.items():
        params = inspect.signature(getattr(RetailTools, name)).parameters
        args = [p for p in params if p != "self"]
        schema = spec.openai_schema()
        fn = schema["function"]
        assert fn["name"] == name
        assert 0 < len(fn["description"]) <= 400, name
        props = fn["parameters"]["properties"]
        assert list(props) == args, name
        required = [p for p in args if params[p].default is inspect.Parameter.empty]
        assert sorted(fn["parameters"]["required"]) == sorted(required), name
        hints = typing.get_type_hints(getattr(RetailTools, name))
        for arg in args:
            if hints[arg] == list[str]:
                assert props[arg]["type"] == "array" and props[arg]["items"]["type"] == "string", (name, arg)
            elif hints[arg] is str:
                assert props[arg]["type"] == "string", (name, arg)
    reason = RetailTools.specs["cancel_pending_order"].openai_schema()["function"]["parameters"]["properties"]["reason"]
    assert sorted(reason["enum"]) == ["no longer needed", "ordered by mistake"]


# ------------------------------------------------------------------------------------------
# generator
# ------------------------------------------------------------------------------------------
FILES = ("db.json", "policy.md", "tasks.json", "split_tasks.json")


def _digests(folder: Path) -> dict[str, str]:
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


def test_generator_is_deterministic(tmp_path: Path, gen_dir: Path) -> None:
    """Same seed, same bytes; another seed, other data. (Its speed is no test's business: a
    timed assertion failed here at 7.3 s against 4 s beside a training run.)"""
    again = RetailDomain.generate(tmp_path / "again", seed=11)
    other = RetailDomain.generate(tmp_path / "other", seed=12)
    assert _digests(again) == _digests(gen_dir)
    differs = _digests(other)
    assert differs["db.json"] != _digests(gen_dir)["db.json"]
    assert differs["tasks.json"] != _digests(gen_dir)["tasks.json"]


def test_generated_world_shape(gen_dir: Path, gen_domain: RetailDomain) -> None:
    raw = json.loads((gen_dir / "db.json").read_text())
    assert 40 <= len(raw["users"]) <= 100 and 10 <= len(raw["products"]) <= 40 and 100 <= len(raw["orders"]) <= 250
    statuses = {o["status"] for o in raw["orders"].values()}
    assert {"pending", "processed", "delivered", "cancelled"} <= statuses
    for order_id, order in raw["orders"].items():
        assert order_id.startswith("#W") and order_id in raw["users"][order["user_id"]]["orders"]
        assert abs(order["payment_history"][0]["amount"] - sum(i["price"] for i in order["items"])) < 0.01
        for item in order["items"]:
            assert item["item_id"] in raw["products"][item["product_id"]]["variants"]
    assert (gen_dir / "policy.md").read_text() == gen_domain.policy


def test_generated_split(gen_dir: Path, gen_domain: RetailDomain) -> None:
    tasks = gen_domain.tasks()
    assert len(tasks) >= 100
    ids = [t.id for t in tasks]
    assert len(set(ids)) == len(ids)
    split = json.loads((gen_dir / "split_tasks.json").read_text())
    train, test = set(split["train"]), set(split["test"])
    assert not train & test and train | test == set(ids)
    assert len(test) == round(0.3 * len(ids))
    assert {t.id for t in gen_domain.tasks("test")} == test


def test_generated_n_tasks_and_fraction(tmp_path: Path) -> None:
    folder = RetailDomain.generate(tmp_path / "small", seed=3, n_tasks=20, eval_fraction=0.5)
    split = json.loads((folder / "split_tasks.json").read_text())
    assert len(json.loads((folder / "tasks.json").read_text())) == 20
    assert len(split["test"]) == 10 and len(split["train"]) == 10


def test_generated_tasks_replay_and_change_state(gen_domain: RetailDomain) -> None:
    raw_users = {u.user_id: u for u in gen_domain.fresh_db().users.values()}
    kinds: set[str] = set()
    for task in gen_domain.tasks():
        ins = task.instructions
        actions = task.actions
        assert ins.domain == "retail" and ins.reason_for_call and ins.known_info
        assert actions and actions[0].name in ("find_user_id_by_email", "find_user_id_by_name_zip")
        for value in actions[0].arguments.values():
            assert value in ins.known_info, (task.id, value)
        env = gen_domain.environment_for(task)
        texts = []
        user_id = None
        for index, action in enumerate(actions):
            assert action.requestor == "assistant"
            before = env.state_hash() if action.name in WRITE_TOOLS else None
            result = env.invoke("assistant", action.name, action.arguments)  # must not raise
            texts.append(render_result(result))
            if index == 0:
                user_id = result
                assert user_id in raw_users
            if before is not None:
                assert env.state_hash() != before, (task.id, action.name)
                kinds.add(action.name)
                if "order_id" in action.arguments:
                    assert action.arguments["order_id"] in ins.known_info
                    assert env.agent_toolkit.db.orders[action.arguments["order_id"]].user_id == user_id
            else:
                kinds.add(action.name)
        info = task.evaluation_criteria.communicate_info or []
        basis = task.evaluation_criteria.reward_basis
        assert basis == (["DB", "COMMUNICATE"] if info else ["DB"])
        if info:
            kinds.add("COMMUNICATE")
        for s in info:
            assert any(s in text for text in texts), (task.id, s)
    expected = {
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
        "modify_user_address",
        "calculate",
        "COMMUNICATE",
        "get_product_details",
        "get_user_details",
        "find_user_id_by_email",
        "find_user_id_by_name_zip",
    }
    assert expected <= kinds, expected - kinds
