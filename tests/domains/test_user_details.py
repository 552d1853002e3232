"""Retail tasks that tell the user their details in the form the identifying call takes.

A tiny model copies a repeated span well (its copy head continues 99.6% of random spans) but
looks a value up by meaning badly: from "I am Liam Wilson" it wrote a frequent first name in the
call. With ``user_details: json`` the user's words hold the call's arguments verbatim, so the call
is a span copy. The draws are the same as in prose: only the text the user is given differs.
"""

from __future__ import annotations

import json
import re

import pytest

from flatscore.domains import domain_class
from flatscore.domains.generated import GENERATOR_FILE, generated_user_details


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    root = tmp_path_factory.mktemp("details")
    retail = domain_class("retail")
    prose = retail.generate(root / "prose", seed=3, n_tasks=60)
    as_json = retail.generate(root / "json", seed=3, n_tasks=60, user_details="json")
    return prose, as_json


def test_json_details_are_the_calls_arguments_verbatim(both):
    """Every kind (60 tasks cycle through all 13): the identifying call's arguments, and each
    order id the prose names, stand in the user's details as the call writes them."""
    prose, as_json = both
    plain = json.loads((prose / "tasks.json").read_text())
    tasks = json.loads((as_json / "tasks.json").read_text())
    named = 0
    for said, task in zip(plain, tasks):
        known = task["user_scenario"]["instructions"]["known_info"]
        identify = task["evaluation_criteria"]["actions"][0]
        assert identify["name"] in ("find_user_id_by_email", "find_user_id_by_name_zip")
        assert f"Your details: {json.dumps(identify['arguments'])}." in known, known
        for order_id in re.findall(r"#W\d+", said["user_scenario"]["instructions"]["known_info"]):
            assert json.dumps({"order_id": order_id}) in known, known
            named += 1
        assert re.findall(r"#W\d+", known) == re.findall(r'"order_id": "(#W\d+)"', known)  # no id in prose
        assert "You are" not in known and "zip code is" not in known and "email is" not in known
    assert named >= 50
    assert generated_user_details(as_json) == "json"


def test_json_details_draw_the_same_tasks_as_prose(both):
    """Same database, split, task ids and ground truth; only known_info differs."""
    prose, as_json = both
    for name in ("db.json", "split_tasks.json", "policy.md"):
        assert (prose / name).read_bytes() == (as_json / name).read_bytes(), name
    plain = json.loads((prose / "tasks.json").read_text())
    quoted = json.loads((as_json / "tasks.json").read_text())
    assert len(plain) == len(quoted) == 60
    for a, b in zip(plain, quoted):
        assert a["user_scenario"]["instructions"]["known_info"] != b["user_scenario"]["instructions"]["known_info"]
        a["user_scenario"]["instructions"].pop("known_info")
        b["user_scenario"]["instructions"].pop("known_info")
        assert a == b
    assert "user_details" not in json.loads((prose / GENERATOR_FILE).read_text())  # prose folders keep their bytes
    assert generated_user_details(prose) == "prose"


def test_telecom_refuses_json_details_before_writing(tmp_path, capsys):
    from flatscore.cli import main

    with pytest.raises(
        ValueError, match="user_details: telecom's generator writes the user's details as one of \\['prose'\\]"
    ):
        domain_class("telecom").generate(tmp_path / "t", seed=0, n_tasks=20, user_details="json")
    assert not (tmp_path / "t").exists()
    assert main(["generate-domain", "--domain", "telecom", "--out", str(tmp_path / "c"), "--user-details", "json"]) == 2
    assert "flatscore: error: --user-details: telecom's generator" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_the_demonstrations_extra_databases_follow_the_datas_form(tmp_path):
    from flatscore.models.demo.demonstrations import build_demonstrations

    retail = domain_class("retail").generate(tmp_path / "r", seed=0, n_tasks=20, user_details="json")
    rows = build_demonstrations({"retail": retail}, "train", "compact", "diagnosing", augment_dbs=1)
    extra = [row for row in rows if row.get("source")]
    assert extra and len(extra) < len(rows)
    for row in rows:
        opening = next(m["content"] for m in row["messages"] if m["role"] == "user")
        assert "My details: {" in opening and "zip code is" not in opening, opening
