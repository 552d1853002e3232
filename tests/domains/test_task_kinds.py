"""Retail task kinds: a synthetic study may draw only some of the generator's kinds.

The embedded default's tiny model is evaluated on the kinds it can learn in its training time;
the demonstrations' extra databases must then draw the same kinds, or it trains on tasks it is
never asked.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest
import yaml

from flatscore.domains import domain_class
from flatscore.domains.generated import GENERATOR_FILE, generated_task_kinds
from flatscore.domains.retail.task_maker import TASK_KINDS

SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
#: The tool call each kind ends in (its ``notes`` in tasks.json), for the kinds used below.
KIND_NOTE = {
    "cancel": "kind: cancel_pending_order",
    "tracking": "kind: info_tracking",
    "order_total": "kind: info_order_total",
}


def _kinds_of(folder: Path) -> collections.Counter:
    tasks = json.loads((folder / "tasks.json").read_text())
    return collections.Counter(t["description"]["notes"] for t in tasks)


def test_only_the_named_kinds_are_drawn_in_turn_and_the_record_says_which(tmp_path):
    chosen = ["tracking", "cancel", "order_total"]
    folder = domain_class("retail").generate(tmp_path / "r", seed=3, n_tasks=30, task_kinds=chosen)
    counts = _kinds_of(folder)
    assert counts == {KIND_NOTE[k]: 10 for k in chosen}  # round-robin: 10 of each, nothing else
    assert generated_task_kinds(folder) == ["cancel", "order_total", "tracking"]  # the generator's order


def test_every_kind_is_the_data_of_no_list(tmp_path):
    """Naming all kinds draws what null draws (null is recorded as null: 'every kind')."""
    everything = domain_class("retail").generate(tmp_path / "a", seed=1, n_tasks=40)
    listed = domain_class("retail").generate(tmp_path / "b", seed=1, n_tasks=40, task_kinds=list(TASK_KINDS))
    for name in ("tasks.json", "db.json", "split_tasks.json"):
        assert (everything / name).read_bytes() == (listed / name).read_bytes(), name
    assert len(_kinds_of(everything)) == len(TASK_KINDS)
    assert generated_task_kinds(everything) is None
    (everything / GENERATOR_FILE).unlink()  # as in tau2-bench's own folders
    assert generated_task_kinds(everything) is None


@pytest.mark.parametrize(
    "kinds, message",
    [
        (["cancel", "refund"], r"unknown retail task kind\(s\) \['refund'\]"),
        ([], "non-empty list"),
        (["cancel", "cancel"], r"\['cancel'\] named more than once"),
    ],
)
def test_a_bad_list_is_refused_before_anything_is_written(tmp_path, kinds, message):
    with pytest.raises(ValueError, match=message):
        domain_class("retail").generate(tmp_path / "r", seed=0, n_tasks=20, task_kinds=kinds)
    assert not (tmp_path / "r").exists()


def test_telecom_refuses_task_kinds(tmp_path):
    with pytest.raises(ValueError, match="only retail"):
        domain_class("telecom").generate(tmp_path / "t", seed=0, n_tasks=20, task_kinds=["cancel"])
    assert not (tmp_path / "t").exists()


def test_demonstration_databases_draw_the_eval_datas_kinds(tmp_path):
    from flatscore.models.demo.demonstrations import build_demonstrations

    folder = domain_class("retail").generate(tmp_path / "r", seed=0, n_tasks=20, task_kinds=["tracking"])
    rows = build_demonstrations({"retail": folder}, "train", "compact", "diagnosing", augment_dbs=1)
    extra = [r for r in rows if r.get("source")]
    assert extra
    calls = {tc["function"]["name"] for r in extra for m in r["messages"] for tc in m.get("tool_calls") or []}
    # a tracking task identifies the user and reads the order; no write tool is ever called
    assert "get_order_details" in calls
    assert not {c for c in calls if c.startswith(("cancel_", "modify_", "return_", "exchange_"))}


def test_the_schema_lists_exactly_the_generators_kinds():
    """The config schema's enum is a copy the schema needs; it must not drift from the generator."""
    schema = yaml.safe_load(SCHEMA.read_text())
    domain = schema["properties"]["domains"]["additionalProperties"]
    assert domain["properties"]["task_kinds"]["items"]["enum"] == list(TASK_KINDS)
