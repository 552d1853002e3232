"""parse_server_answer on vLLM's recorded answers (tests/data/vllm_answers) and off-format ones.

The recorded fixtures are what vLLM 0.32's own hermes parsing returned for crafted model outputs
(record.py beside them); the off-format answers below are hand-made (vLLM never sends them, other
servers or proxies may) and say so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flatscore.agents.server_answer import SERVER_BAD_ANSWER, SERVER_MISSED_CALL, parse_server_answer
from flatscore.backends.openai_backend import server_answer
from flatscore.engine.records import CHANNELS, SERVER_CHANNELS

ANSWERS = Path(__file__).resolve().parents[1] / "data" / "vllm_answers"


def recorded(mode: str) -> dict:
    """The server answer (as the backend keeps it) of one recorded vLLM response."""
    body = json.loads((ANSWERS / f"{mode}.json").read_text())["response"]
    choice = body["choices"][0]
    return server_answer(choice["message"], choice)


def test_channel_names_are_the_engines():
    assert {SERVER_MISSED_CALL, SERVER_BAD_ANSWER} == set(SERVER_CHANNELS) <= set(CHANNELS)


def test_well_formed_call_comes_from_tool_calls_with_no_event():
    out = parse_server_answer(recorded("well_formed"), turn=2)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("calculate", {"expression": "2 + 2"})]
    assert out.malformed is None and out.server_events == []
    assert out.server["finish_reason"] == "tool_calls"


def test_call_left_in_content_is_run_and_is_the_servers_miss():
    answer = recorded("call_left_in_content")
    assert "tool_calls" not in answer and "<tool_call>" in answer["content"]  # what vLLM really sent
    out = parse_server_answer(answer, turn=2)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("list_all_product_types", {})]
    assert [(channel, tool) for channel, tool, _ in out.server_events] == [
        (SERVER_MISSED_CALL, "list_all_product_types")
    ]


def test_no_miss_when_the_request_offered_no_tools():
    out = parse_server_answer(recorded("call_left_in_content"), tools_offered=False)
    assert out.tool_calls and out.server_events == []


@pytest.mark.parametrize("mode", ["broken_json_arguments", "broken_json_in_string_arguments", "truncated_call"])
def test_broken_calls_are_the_models_malformed_call(mode):
    out = parse_server_answer(recorded(mode))
    assert out.malformed is not None and out.malformed_channel == "malformed_call"
    assert out.tool_calls == [] and out.server_events == []


def test_truncated_call_keeps_finish_reason_length():
    assert recorded("truncated_call")["finish_reason"] == "length"


@pytest.mark.parametrize(
    ("mode", "name"), [("unlisted_tool", "delete_all_orders"), ("other_side_tool", "toggle_airplane_mode")]
)
def test_unlisted_tool_comes_through_as_a_call(mode, name):
    out = parse_server_answer(recorded(mode))
    assert [c.name for c in out.tool_calls] == [name] and out.server_events == []


def test_plain_message():
    out = parse_server_answer(recorded("plain_message"))
    assert out.content.startswith("Sure") and out.tool_calls == [] and out.server_events == []


CALL = {"id": "x", "type": "function", "function": {"name": "calculate", "arguments": '{"expression": "1"}'}}


@pytest.mark.parametrize(
    ("tool_calls", "detail"),
    [
        (CALL, "tool_calls is an object, not a list"),
        ([{"name": "calculate", "arguments": '{"expression": "1"}'}], "no function object"),
        ([{"function": {"name": "calculate", "arguments": {"expression": "1"}}}], "is an object, not a JSON string"),
        ([{"function": {"name": "calculate"}}], "function.arguments missing"),
    ],
)
def test_readable_off_format_answers_are_used_and_reported(tool_calls, detail):
    """Hand-made: departures from the OpenAI format that still say which call was meant."""
    out = parse_server_answer({"content": None, "tool_calls": tool_calls, "finish_reason": "tool_calls"})
    assert [c.name for c in out.tool_calls] == ["calculate"] and out.malformed is None
    assert [e[0] for e in out.server_events] == [SERVER_BAD_ANSWER] and detail in out.server_events[0][2]


@pytest.mark.parametrize(
    "tool_calls",
    [
        "<tool_call>{}</tool_call>",
        7,
        ["calculate"],
        [{"function": {"arguments": "{}"}}],
        [{"function": {"name": None, "arguments": "{}"}}],
        [{"id": "x"}],
        [{"function": {"name": "calculate", "arguments": [1]}}],
    ],
)
def test_unreadable_answers_are_malformed_in_the_servers_channel(tool_calls):
    """Hand-made: no call can be read; the turn is malformed, charged to the server, nothing raised."""
    server = {"content": "", "tool_calls": tool_calls, "finish_reason": "tool_calls"}
    out = parse_server_answer(server)
    assert out.malformed and out.malformed_channel == SERVER_BAD_ANSWER and out.tool_calls == []
    assert out.server is server and json.loads(out.raw) == server


def test_content_that_is_not_text_is_reported():
    out = parse_server_answer({"content": {"text": "hi"}, "finish_reason": "stop"})
    assert out.content and [e[0] for e in out.server_events] == [SERVER_BAD_ANSWER]


def test_double_encoded_arguments_mean_the_same_via_server_and_text():
    from flatscore.agents.toolcall_parser import parse_hermes

    text = '<tool_call>\n{"name": "calculate", "arguments": "{\\"expression\\": \\"2\\"}"}\n</tool_call>'
    via_server = parse_server_answer(
        {"tool_calls": [{"function": {"name": "calculate", "arguments": json.dumps('{"expression": "2"}')}}]}
    )
    assert [c.arguments for c in via_server.tool_calls] == [c.arguments for c in parse_hermes(text).tool_calls]
