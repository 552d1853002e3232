"""Hermes / OpenAI tool-call parsing: never raises, valid calls round-trip, failures are malformed."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flatscore.agents.base import STOP_TOKEN
from flatscore.agents.toolcall_parser import format_hermes, parse_hermes, parse_openai

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
arguments = st.dictionaries(st.text(max_size=12), json_values, max_size=5)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True)


def test_plain_text_is_content():
    out = parse_hermes("Hello, how can I help?", turn=3)
    assert out.content == "Hello, how can I help?"
    assert out.tool_calls == [] and out.malformed is None and not out.stop


def test_text_then_two_calls():
    text = (
        'Let me check.\n<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1"}}\n</tool_call>'
        '\n<tool_call>{"name": "get_user", "arguments": "{\\"user_id\\": \\"u1\\"}"}</tool_call><|im_end|>'
    )
    out = parse_hermes(text, turn=7)
    assert out.malformed is None
    assert out.content == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [
        ("call_7_0", "get_order", {"order_id": "#W1"}),
        ("call_7_1", "get_user", {"user_id": "u1"}),
    ]
    assert out.raw == text


def test_end_markers_inside_arguments_are_kept():
    out = parse_hermes(format_hermes("f", {"s": "</s> and <|im_end|>"}) + "<|im_end|>")
    assert out.tool_calls[0].arguments == {"s": "</s> and <|im_end|>"}
    assert parse_hermes("Bye.<|im_end|>\n").content == "Bye."


def test_missing_arguments_is_empty_object():
    out = parse_hermes('<tool_call>{"name": "toggle_airplane_mode"}</tool_call>')
    assert out.malformed is None and out.tool_calls[0].arguments == {}


@pytest.mark.parametrize(
    "text,reason",
    [
        ('<tool_call>{"name": "x", "arguments": {}}', "unclosed"),
        ('<tool_call>{"name": "x", "arguments": {</tool_call>', "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', "no 'name'"),
        ('<tool_call>{"name": 5, "arguments": {}}</tool_call>', "name"),
        ('<tool_call>{"name": "x", "arguments": [1, 2]}</tool_call>', "object"),
        ('<tool_call>{"name": "x", "arguments": "[1]"}</tool_call>', "object"),
        ('<tool_call>{"name": "x", "arguments": "{bad"}</tool_call>', "not JSON"),
        ("<tool_call>[1, 2]</tool_call>", "object"),
        ("<tool_call></tool_call>", "empty"),
        ('{"name": "x"}</tool_call>', "without <tool_call>"),
        ('{"name": "x", "arguments": {}}', "without <tool_call> tags"),
        ('<tool_call>{"name": "a"}</tool_call><tool_call>{"name": ', "unclosed"),
    ],
)
def test_malformed_attempts(text, reason):
    out = parse_hermes(text, turn=1)
    assert out.malformed is not None and reason in out.malformed, out.malformed
    assert out.tool_calls == []
    assert out.raw == text


def test_stop_token_sets_stop():
    assert parse_hermes(f"Thanks, bye! {STOP_TOKEN}").stop
    assert parse_openai(f"done {STOP_TOKEN}", None).stop
    assert not parse_hermes("bye").stop


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text())
def test_garbage_never_raises(text):
    out = parse_hermes(text)
    assert out.malformed is None or isinstance(out.malformed, str)
    assert out.raw == text
    if out.malformed is None and not out.tool_calls:
        assert out.content is not None


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["<tool_call>", "</tool_call>", '{"name": ', '"x"', ', "arguments": ', "{", "}", '"', "é", "\n", STOP_TOKEN]
        ),
        max_size=20,
    )
)
def test_tag_soup_never_raises(parts):
    text = "".join(parts)
    out = parse_hermes(text)
    assert out.stop == (STOP_TOKEN in text)
    if out.tool_calls:
        assert out.malformed is None


@settings(max_examples=200, deadline=None)
@given(
    st.text(max_size=40).filter(
        lambda t: "<tool_call>" not in t and "</tool_call>" not in t and not t.lstrip().startswith("{")
    ),
    st.lists(st.tuples(names, arguments), min_size=1, max_size=3),
    st.integers(0, 50),
)
def test_valid_calls_round_trip(prefix, calls, turn):
    text = prefix + "\n" + "\n".join(format_hermes(n, a) for n, a in calls)
    out = parse_hermes(text, turn=turn)
    assert out.malformed is None
    assert [(c.name, c.arguments) for c in out.tool_calls] == calls
    assert [c.id for c in out.tool_calls] == [f"call_{turn}_{i}" for i in range(len(calls))]
    # and through the OpenAI form too
    openai = [c.to_openai() for c in out.tool_calls]
    back = parse_openai(None, openai, turn=turn)
    assert [(c.name, c.arguments) for c in back.tool_calls] == calls


@settings(max_examples=100, deadline=None)
@given(names, arguments)
def test_truncated_calls_are_malformed(name, args):
    text = format_hermes(name, args)
    for cut in sorted({len(text) // 3, len(text) // 2, len(text) - len("</tool_call>") - 1, len(text) - 1}):
        out = parse_hermes(text[:cut])
        assert out.tool_calls == []
        assert out.malformed is not None


def test_huge_arguments():
    big = {"blob": "x" * 2_000_000, "nested": [[[[{"a": "ü" * 1000}]]]]}
    out = parse_hermes(format_hermes("save", big))
    assert out.malformed is None and out.tool_calls[0].arguments == big
    deep = "<tool_call>" + '{"name": "x", "arguments": ' + "[" * 100_000 + "]" * 100_000 + "}</tool_call>"
    out = parse_hermes(deep)
    assert out.malformed is not None and out.tool_calls == []


def test_openai_tool_calls():
    calls = [
        {"id": "srv_1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "#W1"}'}},
        {"id": "srv_2", "type": "function", "function": {"name": "ping", "arguments": ""}},
    ]
    out = parse_openai("checking", calls, turn=2)
    assert out.malformed is None and out.content == "checking"
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [
        ("call_2_0", "get_order", {"order_id": "#W1"}),
        ("call_2_1", "ping", {}),
    ]


@pytest.mark.parametrize(
    "calls",
    [
        [{"function": {"name": "x", "arguments": "{not json"}}],
        [{"function": {"name": "x", "arguments": "[1]"}}],
        [{"function": {"arguments": "{}"}}],
        [{"function": {"name": 3, "arguments": "{}"}}],
        ["nonsense"],
        [{"function": "nonsense"}],
    ],
)
def test_openai_malformed(calls):
    out = parse_openai(None, calls, turn=0)
    assert out.malformed and out.tool_calls == []
    assert out.raw


def test_openai_without_calls_falls_back_to_hermes_text():
    out = parse_openai('<tool_call>{"name": "a", "arguments": {"k": 1}}</tool_call>', None, turn=4)
    assert out.tool_calls[0].name == "a" and out.tool_calls[0].arguments == {"k": 1}
    assert parse_openai("hi", [], turn=0).content == "hi"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(max_size=5), json_values, max_size=3) | json_values, max_size=3),
    st.one_of(st.none(), st.text()),
)
def test_openai_garbage_never_raises(calls, text):
    out = parse_openai(text, calls)  # type: ignore[arg-type]
    assert out.malformed is None or isinstance(out.malformed, str)


def test_reasons_are_short():
    text = '<tool_call>{"name": "x", "arguments": "' + "y" * 5000 + '"}</tool_call>'
    out = parse_hermes(text)
    assert out.malformed and len(out.malformed) <= 200
    assert json.dumps(out.malformed)
