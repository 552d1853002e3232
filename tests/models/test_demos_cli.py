"""``flatscore demos``: expert conversations of the train split, and extra synthetic databases."""

from __future__ import annotations

import json
import re

import pytest

from flatscore.cli import main
from flatscore.domains import domain_class, load_domain


@pytest.fixture(scope="module")
def retail_dir(tmp_path_factory):
    return domain_class("retail").generate(tmp_path_factory.mktemp("retail"), seed=0, n_tasks=30)


def _orders(text: str) -> set[str]:
    return set(re.findall(r"#W\d{7}", text))


def test_augmented_demos_bring_fresh_ids_and_never_the_eval_split(retail_dir, tmp_path):
    out = tmp_path / "demos.jsonl"
    assert (
        main(["demos", "--domain", f"retail={retail_dir}", "--split", "train", "--augment-dbs", "2", "--out", str(out)])
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    own = [r for r in rows if "source" not in r]
    extra = [r for r in rows if "source" in r]
    domain = load_domain("retail", retail_dir)
    train_ids = {t.id for t in domain.tasks("train")}
    assert own and {r["task_id"] for r in own} <= train_ids  # never the test split
    assert {r["source"] for r in extra} == {"synthetic seed 10001", "synthetic seed 10002"}
    # each extra database adds about as many conversations as the given data's train split
    assert len(extra) >= len(own)
    # the extra databases' orders are not the eval data's: their ids must be copied, not recalled
    db_orders = _orders((retail_dir / "db.json").read_text())
    extra_orders = set().union(*(_orders(json.dumps(r["messages"])) for r in extra))
    assert extra_orders and not extra_orders & db_orders


def test_negative_augment_count_is_rejected(retail_dir, tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert main(["demos", "--domain", f"retail={retail_dir}", "--augment-dbs", "-1", "--out", str(out)]) != 0
    assert "--augment-dbs" in capsys.readouterr().err and not out.exists()


def test_slips_go_to_the_extra_databases_only_and_are_marked_unlearnt(retail_dir, tmp_path):
    """``--slip-rate``: the extra databases' experts slip and recover; the eval data's own train
    conversations stay clean; each slip is a message marked ``"learn": false`` whose call failed."""
    out = tmp_path / "demos.jsonl"
    args = ["demos", "--domain", f"retail={retail_dir}", "--augment-dbs", "1", "--slip-rate", "0.4", "--out", str(out)]
    assert main(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    own = [r for r in rows if "source" not in r]
    extra = [r for r in rows if "source" in r]
    assert not any(m.get("learn") is False for r in own for m in r["messages"])
    slipped = [r for r in extra if any(m.get("learn") is False for m in r["messages"])]
    assert slipped and len(extra) >= len(own)  # slipped conversations still succeed and are kept
    for r in slipped:
        for i, m in enumerate(r["messages"]):
            if m.get("learn") is False:
                assert m["tool_calls"] and r["messages"][i + 1]["content"].startswith("Error")


def test_slip_rate_outside_zero_one_is_rejected(retail_dir, tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    assert main(["demos", "--domain", f"retail={retail_dir}", "--slip-rate", "1.5", "--out", str(out)]) != 0
    assert "--slip-rate" in capsys.readouterr().err and not out.exists()
