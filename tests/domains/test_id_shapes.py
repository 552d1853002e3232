"""Id shapes of generated data: tau2-bench's, or short ids the embedded demo model can copy."""

from __future__ import annotations

import json
import re

import pytest

from flatscore.domains import domain_class, load_domain
from flatscore.domains.generated import GENERATOR_FILE, generated_ids
from flatscore.engine.scoring import Evaluator


def _db(path):
    return json.loads((path / "db.json").read_text())


def test_short_retail_ids_are_three_digits_and_orders_hold_at_most_two_items(tmp_path):
    path = domain_class("retail").generate(tmp_path / "r", seed=0, n_tasks=40, ids="short")
    db = _db(path)
    items = [i for p in db["products"].values() for i in p["variants"]]
    assert items and all(re.fullmatch(r"[1-9]\d\d", i) for i in items)
    assert all(re.fullmatch(r"[1-9]\d\d", p) for p in db["products"])
    assert all(re.fullmatch(r"#W[1-9]\d\d", o) for o in db["orders"])
    assert all(re.fullmatch(r"[a-z]+_[a-z]+_\d{3}", u) for u in db["users"])
    methods = [m for u in db["users"].values() for m in u["payment_methods"]]
    assert all(re.fullmatch(r"(credit_card|paypal|gift_card)_[1-9]\d\d", m) for m in methods)
    assert max(len(o["items"]) for o in db["orders"].values()) <= 2
    assert len(set(items) | set(db["products"])) == len(items) + len(db["products"])  # ids stay unique


def test_short_telecom_ids_are_three_digits(tmp_path):
    path = domain_class("telecom").generate(tmp_path / "t", seed=0, n_tasks=40, ids="short")
    db = _db(path)
    assert all(re.fullmatch(r"C\d{3}", c["customer_id"]) for c in db["customers"])
    assert all(re.fullmatch(r"L\d{3}", line["line_id"]) for line in db["lines"])


@pytest.mark.parametrize("name", ["retail", "telecom"])
def test_short_ids_keep_every_task_solvable_by_its_gold_actions(tmp_path, name):
    """The generator replays each task's actions before keeping it: with short ids every kept
    task's gold actions still reach the task's expected final state (reward 1)."""
    from flatscore.agents.expert import ExpertAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.engine.episode import Episode, EpisodeSettings
    from flatscore.engine.runner import drive

    domain = load_domain(name, domain_class(name).generate(tmp_path / name, seed=2, n_tasks=30, ids="short"))
    evaluator = Evaluator(domain)
    episodes = [
        Episode(domain, task, ExpertAgent(), ScriptedUser(), EpisodeSettings(), seed=0, trial=0, evaluator=evaluator)
        for task in domain.tasks()
    ]
    finished = []
    drive(episodes, None, finished.append)
    assert len(finished) == 30 and sum(r.reward == 1.0 for r in finished) == 30


def test_the_record_says_the_shapes_and_tau2_data_has_none(tmp_path):
    """Extra demonstration databases follow the eval data's shapes through this record."""
    short = domain_class("retail").generate(tmp_path / "s", seed=0, n_tasks=20, ids="short")
    plain = domain_class("retail").generate(tmp_path / "p", seed=0, n_tasks=20)
    assert generated_ids(short) == "short" and generated_ids(plain) == "tau2"
    (plain / GENERATOR_FILE).unlink()  # as in tau2-bench's own data folders
    assert generated_ids(plain) == "tau2"
    with pytest.raises(ValueError, match="ids: expected one of"):
        domain_class("retail").generate(tmp_path / "bad", seed=0, n_tasks=20, ids="long")


def test_demonstration_databases_follow_the_eval_datas_shapes(tmp_path):
    """The demo model must learn to copy ids of the length it meets at evaluation."""
    from flatscore.models.demo.demonstrations import build_demonstrations

    short = domain_class("retail").generate(tmp_path / "s", seed=0, n_tasks=20, ids="short")
    rows = build_demonstrations({"retail": short}, "train", "compact", "diagnosing", augment_dbs=1)
    extra = [r for r in rows if r.get("source")]
    assert extra
    calls = [tc for r in extra for m in r["messages"] for tc in m.get("tool_calls") or []]
    order_ids = [json.loads(tc["function"]["arguments"]).get("order_id") for tc in calls]
    assert any(order_ids) and all(re.fullmatch(r"#W[1-9]\d\d", o) for o in order_ids if o)
