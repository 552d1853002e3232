"""The expert's answer form: an asked-for value said alone (plain) or quoted from its field's key on."""

from __future__ import annotations

import pytest

from flatscore.agents.expert import ExpertAgent, quoted_value
from flatscore.domains import domain_class

ORDER = (
    '{"order_id":"#W1","items":[{"name":"Lamp","price":84.1},{"name":"Mug","price":12.5}],'
    '"fulfillments":[{"tracking_id":["857914367572"],"item_ids":["1"]}],'
    '"payment_history":[{"transaction_type":"payment","amount":84.1,"payment_method_id":"paypal_1"}]}'
)


def test_quoted_value_starts_at_the_last_key_holding_the_value():
    # the payment comes after an item of the same price: the payment's key is the one quoted
    assert quoted_value("84.1", ["Error: no such user", ORDER]) == '"amount":84.1'
    assert quoted_value("857914367572", [ORDER]) == '"tracking_id":["857914367572'
    assert quoted_value("12.5", [ORDER, "unrelated"]) == '"price":12.5'


def test_quoted_value_needs_the_whole_number_and_falls_back_to_the_value():
    assert quoted_value("84.12", [ORDER]) == "84.12"  # not a prefix of 84.1, and 84.1 is no prefix of it
    assert quoted_value("84", [ORDER]) == "84"  # 84.1 goes on with digits after the dot: no match
    assert quoted_value("57.0", []) == "57.0"


def test_an_unknown_answer_form_is_refused():
    with pytest.raises(ValueError, match=r"answer_form: expected one of \['plain', 'quoted'\], got 'quote'"):
        ExpertAgent("quote")


def test_quoted_demonstrations_differ_only_in_their_answers(tmp_path):
    """Same episodes, all still successes (only those become demonstrations), and only the closing
    message of those with an asked-for value changes: to a fragment of a tool result of the same
    conversation, from a field's key to the value."""
    from flatscore.models.demo.demonstrations import build_demonstrations

    data = {"retail": domain_class("retail").generate(tmp_path / "r", seed=0, n_tasks=60)}
    plain = build_demonstrations(data, "train", "compact", "diagnosing", augment_dbs=0)
    quoted = build_demonstrations(data, "train", "compact", "diagnosing", augment_dbs=0, answer_form="quoted")
    assert [r["task_id"] for r in plain] == [r["task_id"] for r in quoted]
    marker = "The information you asked for: "
    changed = 0
    for a, b in zip(plain, quoted):
        assert a["tools"] == b["tools"] and len(a["messages"]) == len(b["messages"])
        for i, (m, n) in enumerate(zip(a["messages"], b["messages"])):
            if m == n:
                continue
            assert m["role"] == n["role"] == "assistant" and marker in m["content"], (m, n)
            changed += 1
            said = m["content"].split(marker, 1)[1].split(". Is there anything else", 1)[0]
            fragment = n["content"].split(marker, 1)[1].split(". Is there anything else", 1)[0]
            assert fragment.startswith('"') and '":' in fragment and fragment.endswith(said), (fragment, said)
            tools = [t["content"] for t in b["messages"][:i] if t["role"] == "tool"]
            assert any(fragment in text for text in tools), fragment
    assert changed >= 3, "the 60 tasks hold totals and tracking numbers to answer"
    with pytest.raises(ValueError, match="answer_form: expected one of"):
        build_demonstrations(data, "train", "compact", "diagnosing", augment_dbs=0, answer_form="quote")


def test_the_schema_and_the_cli_take_exactly_the_experts_forms():
    """The schema's enum (which the CLI's choices are read from) is a copy of :data:`ANSWER_FORMS`
    (the CLI does not import the agents at start-up); neither may drift from it."""
    from pathlib import Path

    import yaml

    from flatscore.agents.expert import ANSWER_FORMS
    from flatscore.cli import build_parser

    schema = yaml.safe_load((Path(__file__).parents[2] / "workflow/schemas/config.schema.yaml").read_text())
    model = schema["properties"]["models"]["additionalProperties"]["properties"]
    assert model["answer_form"]["enum"] == list(ANSWER_FORMS)
    demos = ["demos", "--domain", "retail=data", "--out", "demos.jsonl"]
    assert build_parser().parse_args(demos).answer_form == model["answer_form"]["default"] == ANSWER_FORMS[0]
    for form in ANSWER_FORMS:
        assert build_parser().parse_args([*demos, "--answer-form", form]).answer_form == form
    with pytest.raises(SystemExit):
        build_parser().parse_args([*demos, "--answer-form", "quote"])
