"""``flatscore episodes --user llm``: the LLM user plays against a stub OpenAI server.

The stub is the user model: it calls the user's phone tools itself (dual control as tau2 runs
it), and the device's state changes between two looks at the status bar. The user's failed
phone action lands in the user's channel, never the agent's; the user's identity enters the
cell's (and so MLflow's params), and the scripted user leaves the identity as it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from stub_openai import StubOpenAIServer

from flatscore.cli import main
from flatscore.tracking.cell_reader import scalar_params


def answer(message: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI chat completion whose one choice is ``message``."""
    return {
        "id": "stub",
        "object": "chat.completion",
        "model": "stub-user",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def call(name: str, n: int) -> dict[str, Any]:
    return answer(
        {
            "content": None,
            "tool_calls": [{"id": f"u{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}],
        }
    )


@pytest.fixture
def stub_user():
    server = StubOpenAIServer.answering(
        [
            call("check_status_bar", 1),
            call("toggle_airplane_mode", 2),
            call("check_status_bar", 3),
            call("reboot_the_moon", 4),  # no such phone action: the user's own failure
            answer({"content": "My phone is fine now, thank you. ###STOP###"}),
        ]
    )
    yield server
    server.close()


def run(out: Path, *extra: str) -> dict[str, Any]:
    argv = ["episodes", "--domain", "telecom", "--tasks", "first:1", "--no-progress", "--out", str(out), *extra]
    assert main(argv) == 0
    (record,) = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    return record


def test_llm_user_calls_its_phone_tools_and_the_device_changes(tmp_path, stub_user, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    record = run(tmp_path / "cell", "--user", "llm", "--user-base-url", stub_user.url, "--user-model", "stub-user")
    user_tools = [m for m in record["messages"] if m.get("role") == "tool" and m.get("side") == "user"]
    assert [m["name"] for m in user_tools] == [
        "check_status_bar",
        "toggle_airplane_mode",
        "check_status_bar",
        "reboot_the_moon",
    ]
    before, after = user_tools[0]["content"], user_tools[2]["content"]
    assert before != after and "airplane" in after.lower(), (before, after)
    assert not any(m["error"] for m in user_tools[:3]) and user_tools[3]["error"]
    # the user's failure is counted on the user's side (tau2 counts it toward the budget), never the agent's
    assert record["channels"]["user_tool_error"] == 1
    assert record["channels"]["invented_tool"] == record["channels"]["other_side_tool"] == 0
    assert record["termination"] == "user_stop"
    # the user model received its phone tools, and its requests were the user's (no agent policy)
    first = stub_user.requests[0]
    assert first["model"] == "stub-user" and "toggle_airplane_mode" in {t["function"]["name"] for t in first["tools"]}
    assert first["messages"][0]["role"] == "system" and "customer" in first["messages"][0]["content"]
    cell = json.loads((tmp_path / "cell" / "cell.json").read_text())
    assert cell["user"] == "llm_user" and cell["user_model"] == "stub-user" and cell["user_temperature"] == 0.0
    assert cell["user_prompt_sha256"] and "user_base_url" not in cell
    params = scalar_params(cell)  # what the cell's MLflow run is given
    assert (
        params["user_model"] == "stub-user" and params["user_temperature"] == "0.0" and "user_prompt_sha256" in params
    )


def test_user_settings_enter_the_identity_and_the_scripted_user_adds_nothing(tmp_path, stub_user):
    llm = ["--user", "llm", "--user-base-url", stub_user.url, "--user-model", "stub-user"]
    hashes = {}
    for name, extra in {
        "scripted": [],
        "llm": llm,
        "llm_warm": [*llm, "--user-temperature", "0.7"],
        "llm_other_url": ["--user", "llm", "--user-base-url", stub_user.url + "/", "--user-model", "stub-user"],
    }.items():
        run(tmp_path / name, *extra)
        hashes[name] = json.loads((tmp_path / name / "cell.json").read_text())
    assert "user_model" not in hashes["scripted"] and "user" not in hashes["scripted"]["identity"]
    assert hashes["scripted"]["cell_hash"] != hashes["llm"]["cell_hash"] != hashes["llm_warm"]["cell_hash"]
    # where the server listens is no part of the user (a shared server's port changes run to run)
    assert hashes["llm"]["cell_hash"] == hashes["llm_other_url"]["cell_hash"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--user", "llm", "--user-model", "m"], "--user llm: needs --user-base-url"),
        (["--user", "llm", "--user-base-url", "http://127.0.0.1:9"], "--user llm: needs --user-model"),
        (["--user-model", "m"], "--user-model: only the LLM user has a model"),
    ],
)
def test_bad_user_options_are_one_line(args, needle, tmp_path, capsys):
    assert main(["episodes", "--domain", "telecom", "--out", str(tmp_path / "x"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x").exists()


def test_a_users_malformed_output_is_the_users_and_uncounted(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = StubOpenAIServer.answering(
        [
            answer({"content": '<tool_call>{"name": "toggle_airplane_mode", "arguments": {</tool_call>'}),
            answer({"content": "Never mind. ###STOP###"}),
        ]
    )
    try:
        record = run(tmp_path / "cell", "--user", "llm", "--user-base-url", server.url, "--user-model", "stub-user")
    finally:
        server.close()
    (event,) = record["error_events"]
    assert (event["channel"], event["side"], event["counted"]) == ("user_tool_error", "user", False)
    assert record["errors_counted"] == 0 and record["channels"]["malformed_call"] == 0
    said = [m["content"] for m in record["messages"] if m["role"] == "user"]
    assert said[0].startswith("<tool_call>")  # its text went on as its message to the agent


@pytest.mark.parametrize("token", ["###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"])
def test_the_user_ends_the_call_on_each_of_tau2s_tokens(tmp_path, monkeypatch, token):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = StubOpenAIServer.answering([answer({"content": f"I have to go. {token}"})])
    try:
        record = run(tmp_path / "cell", "--user", "llm", "--user-base-url", server.url, "--user-model", "stub-user")
    finally:
        server.close()
    assert record["termination"] == "user_stop" and len(server.requests) == 1


def test_a_served_users_announcement_and_settings_enter_the_identity(tmp_path, stub_user, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    announce = tmp_path / "server.json"
    settings = {"server": "vllm", "tool_call_parser": "hermes", "server_dtype": "bfloat16"}
    announce.write_text(
        json.dumps({"base_url": stub_user.url, "kind": "vllm", "status": "ready", "settings": settings})
    )
    record = run(tmp_path / "cell", "--user", "llm", "--user-base-url-file", str(announce), "--user-model", "stub-user")
    assert record["termination"] == "user_stop" and stub_user.requests
    cell = json.loads((tmp_path / "cell" / "cell.json").read_text())
    assert cell["user_server_tool_call_parser"] == "hermes" and cell["user_server_server_dtype"] == "bfloat16"
    assert "server" not in cell  # the agent's server settings stay the agent's (here: none)
