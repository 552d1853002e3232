"""Made-up customer identities for retail's generated data and the demo model's extra databases.

With names from a list of 30 first and 25 last names, a tiny model lowers its loss as much by
guessing a frequent name as by copying the one the user gave, and learnt to write "Ethan Patel"
for every customer. Made-up names and zips leave copying as the only way.
"""

from __future__ import annotations

import json
import random

import pytest

from flatscore.domains import domain_class
from flatscore.domains.generated import GENERATOR_FILE
from flatscore.domains.retail.catalogue import CITIES, FIRST_NAMES, LAST_NAMES, N_USERS
from flatscore.domains.retail.db_builder import build_db


def test_open_identities_are_made_up_names_and_zips():
    db = build_db(random.Random(4), identities="open")
    users = list(db.users.values())
    firsts = {u.name.first_name for u in users}
    lasts = {u.name.last_name for u in users}
    # 60 users: nearly every name new, and (by chance only) rarely one of the list's
    assert len(firsts) >= 0.9 * N_USERS and len(lasts) >= 0.9 * N_USERS
    assert len(firsts & set(FIRST_NAMES)) <= 3 and len(lasts & set(LAST_NAMES)) <= 3
    prefixes = {prefix for _, _, prefix in CITIES}
    assert sum(u.address.zip[:3] in prefixes for u in users) <= 3
    assert all(len(u.address.zip) == 5 and u.address.zip.isdigit() for u in users)
    # emails and user ids follow the names, so they are made up too
    assert all(u.email.startswith(u.name.first_name.lower() + ".") for u in users)


def test_pool_identities_are_the_usual_data_and_leave_no_record(tmp_path):
    usual = domain_class("retail").generate(tmp_path / "a", seed=2, n_tasks=30)
    pool = domain_class("retail").generate(tmp_path / "b", seed=2, n_tasks=30, identities="pool")
    for name in ("db.json", "tasks.json", GENERATOR_FILE):
        assert (usual / name).read_bytes() == (pool / name).read_bytes(), name
    users = json.loads((usual / "db.json").read_text())["users"].values()
    assert all(u["name"]["first_name"] in FIRST_NAMES for u in users)
    made_up = domain_class("retail").generate(tmp_path / "c", seed=2, n_tasks=30, identities="open")
    assert json.loads((made_up / GENERATOR_FILE).read_text())["identities"] == "open"


def test_a_bad_shape_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(
        ValueError, match="identities: retail's generator draws names as one of \\['pool', 'open'\\], got 'random'"
    ):
        domain_class("retail").generate(tmp_path / "r", seed=0, n_tasks=20, identities="random")
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="telecom.s generator draws names as one of \\[.pool.\\], got .open."):
        domain_class("telecom").generate(tmp_path / "t", seed=0, n_tasks=20, identities="open")
    assert not (tmp_path / "t").exists()


def test_demonstrations_made_up_identities_reach_only_the_extra_retail_databases(tmp_path):
    from flatscore.models.demo.demonstrations import build_demonstrations

    retail = domain_class("retail").generate(tmp_path / "r", seed=0, n_tasks=20)
    telecom = domain_class("telecom").generate(tmp_path / "t", seed=0, n_tasks=20)
    data = {"retail": retail, "telecom": telecom}
    usual = build_demonstrations(data, "train", "compact", "diagnosing", augment_dbs=1)
    made_up = build_demonstrations(data, "train", "compact", "diagnosing", augment_dbs=1, augment_identities="open")
    assert len(usual) == len(made_up)
    same = [a == b for a, b in zip(usual, made_up)]
    for a, b, equal in zip(usual, made_up, same):
        # the evaluated data's own conversations and telecom's extra ones are untouched
        assert equal == (a["domain"] == "telecom" or not a.get("source")), (a["domain"], a.get("source"))
        assert b["domain"] == a["domain"] and b.get("source") == a.get("source")

    def looked_up_first_names(rows):
        calls = [tc for r in rows for m in r["messages"] for tc in m.get("tool_calls") or []]
        args = [json.loads(tc["function"]["arguments"]) for tc in calls]
        return [a["first_name"] for a in args if "first_name" in a]

    extra = [r for r in made_up if r["domain"] == "retail" and r.get("source")]
    names = looked_up_first_names(extra)
    assert names and sum(n not in FIRST_NAMES for n in names) >= 0.9 * len(names)
    with pytest.raises(ValueError, match="--augment-identities: expected one of"):
        build_demonstrations(data, "train", "compact", "diagnosing", augment_dbs=1, augment_identities="opne")


def test_generate_domain_cli_makes_up_identities_and_names_its_flag_when_refused(tmp_path, capsys):
    """``domains.retail.identities`` reaches the evaluated data through ``--identities``; on
    telecom the refusal names the flag, and nothing is written."""
    from flatscore.cli import main

    out = tmp_path / "r"
    assert (
        main(["generate-domain", "--domain", "retail", "--out", str(out), "--n-tasks", "20", "--identities", "open"])
        == 0
    )
    users = json.loads((out / "db.json").read_text())["users"].values()
    assert sum(u["name"]["first_name"] in FIRST_NAMES for u in users) <= 3
    assert "open identities" in capsys.readouterr().out
    assert main(["generate-domain", "--domain", "telecom", "--out", str(tmp_path / "t"), "--identities", "open"]) == 2
    assert (
        "flatscore: error: --identities: telecom's generator draws names as one of ['pool']" in capsys.readouterr().err
    )
    assert not (tmp_path / "t").exists()
