"""Copy-on-access databases: episodes share untouched records, and no mutation ever leaks.

The retail domain's fresh databases share the pristine records (validated once) until an
episode reaches one; these tests prove that what an episode changes stays its own, through
the tools, task set-up, every dict access path and copying, and that states, dumps and
digests are exactly those of a fully validated copy (the previous implementation).
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest

from flatscore.domains.cow import CopyOnAccessDict, peek_items, peek_values
from flatscore.domains.environment import Environment, state_digest
from flatscore.domains.retail import RetailDomain, RetailTools
from flatscore.domains.retail.data_model import RetailDB
from flatscore.engine.scoring import Evaluator


@pytest.fixture(scope="module")
def domain(tmp_path_factory: pytest.TempPathFactory) -> RetailDomain:
    return RetailDomain(RetailDomain.generate(tmp_path_factory.mktemp("cow") / "retail", seed=5))


def _full_env(domain: RetailDomain, task=None) -> Environment:  # type: ignore[no-untyped-def]
    """An environment over a fully validated database: what fresh_environment used to build."""
    env = Environment("retail", RetailTools(RetailDB.model_validate(domain._plain_db)), None, domain.policy)
    if task is not None:
        env.apply_initial_state(task.initial_state)
    return env


def _pending_order(domain: RetailDomain) -> str:
    return next(k for k, o in domain.pristine_db().orders.items() if o.status == "pending")


def test_fresh_db_equals_full_validation(domain: RetailDomain) -> None:
    full = RetailDB.model_validate(domain._plain_db)
    fresh = domain.fresh_db()
    assert fresh == full
    assert fresh.model_dump() == full.model_dump() == domain._plain_db
    assert fresh.model_dump_json() == full.model_dump_json()
    assert domain.fresh_environment().state_hash() == _full_env(domain).state_hash()


def test_tool_mutation_stays_in_its_episode(domain: RetailDomain) -> None:
    pristine_digest = state_digest(domain.pristine_db())
    order_id = _pending_order(domain)
    a, b = domain.fresh_environment(), domain.fresh_environment()
    before = b.state_hash()
    a.invoke("assistant", "cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
    assert a.agent_toolkit.db.orders[order_id].status == "cancelled"
    assert b.agent_toolkit.db.orders[order_id].status == "pending"
    assert domain.pristine_db().orders[order_id].status == "pending"
    assert domain._plain_db["orders"][order_id]["status"] == "pending"
    assert b.state_hash() == before == domain.fresh_environment().state_hash()
    assert state_digest(domain.pristine_db()) == pristine_digest
    assert a.state_hash() != before


def test_digest_cache_holds_only_pristine_records(domain: RetailDomain) -> None:
    """State digests cache per-record digests of shared records only: an episode's private
    (changed) record is digested afresh and never leaks into another episode's digest."""
    from flatscore.domains.environment import _sha256_of_plain, record_digests, to_plain

    order_id = _pending_order(domain)
    before = domain.fresh_environment().state_hash()
    a = domain.fresh_environment()
    a.invoke("assistant", "cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
    after = a.state_hash()  # digested while `a` holds its cancelled copy
    assert after != before
    assert domain.fresh_environment().state_hash() == before
    pristine_order = domain.pristine_db().orders[order_id]
    assert domain._pristine_digests["orders"][order_id] == _sha256_of_plain(to_plain(pristine_order))
    assert record_digests(a.agent_toolkit.db.orders)[order_id] != domain._pristine_digests["orders"][order_id]
    b = domain.fresh_environment()
    b.invoke("assistant", "cancel_pending_order", {"order_id": order_id, "reason": "no longer needed"})
    assert b.state_hash() == after  # the same change, the same digest
    c = domain.fresh_environment()
    _ = c.agent_toolkit.db.orders[order_id]  # claimed but unchanged: still the pristine state
    assert c.state_hash() == before


def test_every_task_replays_to_the_same_state_as_a_full_copy(domain: RetailDomain) -> None:
    """Gold replay (what scoring compares) gives the very digest the fully validated DB gave."""
    pristine_digest = state_digest(domain.pristine_db())
    evaluator = Evaluator(domain)
    for task in domain.tasks():
        full = _full_env(domain, task)
        for action in task.actions:
            try:
                full.invoke(action.requestor, action.name, action.arguments)
            except Exception:
                pass
        assert evaluator.gold_hash(task) == full.state_hash(), task.id
    assert state_digest(domain.pristine_db()) == pristine_digest


def test_initial_state_updates_are_private(domain: RetailDomain) -> None:
    from flatscore.domains.tasks import InitialState

    order_id = _pending_order(domain)
    state = InitialState.model_validate(
        {"initialization_data": {"agent_data": {"orders": {order_id: {"status": "processed"}}}}}
    )
    env = domain.fresh_environment()
    env.apply_initial_state(state)
    assert env.agent_toolkit.db.orders[order_id].status == "processed"
    assert domain.pristine_db().orders[order_id].status == "pending"
    assert domain.fresh_db().orders[order_id].status == "pending"


def test_deleted_and_added_records_are_private(domain: RetailDomain) -> None:
    db = domain.fresh_db()
    order_id = _pending_order(domain)
    del db.orders[order_id]
    db.orders["#new"] = domain.pristine_db().orders[order_id].model_copy(deep=True)
    assert order_id in domain.pristine_db().orders and "#new" not in domain.pristine_db().orders
    assert order_id in domain.fresh_db().orders


def _cow() -> tuple[CopyOnAccessDict, dict[str, list[int]]]:
    pristine = {"a": [1], "b": [2], "c": [3]}
    return CopyOnAccessDict(pristine, lambda key, value: list(value)), pristine


@pytest.mark.parametrize(
    "get",
    [
        lambda d: d["a"],
        lambda d: d.get("a"),
        lambda d: next(iter(d.values())),
        lambda d: next(v for k, v in d.items() if k == "a"),
        lambda d: d.setdefault("a", None),
        lambda d: dict(d)["a"],
        lambda d: {**d}["a"],
        lambda d: d.copy()["a"],
        lambda d: copy.copy(d)["a"],
        lambda d: (d | {})["a"],
        lambda d: [d[k] for k in d][0],
    ],
)
def test_every_access_path_hands_out_a_private_copy(get) -> None:  # type: ignore[no-untyped-def]
    cow, pristine = _cow()
    get(cow).append(99)
    assert pristine["a"] == [1]
    assert cow["a"] == [1, 99]  # the copy is kept: later accesses see the episode's change


def test_pop_deepcopy_and_pickle_are_independent() -> None:
    cow, pristine = _cow()
    cow.pop("a").append(99)
    assert pristine["a"] == [1] and "a" not in cow
    deep = copy.deepcopy(cow)
    deep["b"].append(99)
    restored = pickle.loads(pickle.dumps(cow))
    restored["c"].append(99)
    assert pristine == {"a": [1], "b": [2], "c": [3]}
    assert type(deep) is dict and type(restored) is dict


def test_peek_claims_nothing_and_sees_the_current_state() -> None:
    cow, pristine = _cow()
    cow["b"].append(5)
    assert dict(peek_items(cow)) == {"a": [1], "b": [2, 5], "c": [3]}
    assert list(peek_values(cow)) == [[1], [2, 5], [3]]
    assert cow.claimed() == {"b"}
    assert list(peek_items({"x": 1})) == [("x", 1)]


def test_lookups_do_not_copy_the_user_table(domain: RetailDomain) -> None:
    env = domain.fresh_environment()
    user = next(iter(domain.pristine_db().users.values()))
    assert env.invoke("assistant", "find_user_id_by_email", {"email": user.email}) == user.user_id
    env.invoke("assistant", "list_all_product_types", {})
    assert env.agent_toolkit.db.users.claimed() == frozenset()
    assert env.agent_toolkit.db.products.claimed() == frozenset()


def test_real_data_fresh_db_equals_full_validation(tau2_data) -> None:  # type: ignore[no-untyped-def]
    path: Path = tau2_data("retail")
    domain = RetailDomain(path)
    assert domain.fresh_db().model_dump_json() == RetailDB.model_validate(domain._plain_db).model_dump_json()
