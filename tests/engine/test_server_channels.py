"""Episodes through OpenAIBackend against a stub server that replays vLLM's recorded answers.

Each recorded answer (tests/data/vllm_answers, vLLM 0.32's own hermes parsing) is the agent's
first model answer in a real retail or telecom episode; later answers are plain messages and the
user stops. Checked per failure mode: the channel counts and their ``counted`` flags, the budget
counter, the server's answer verbatim in the turn's log entry (after the line went through the
store, i.e. redaction), that the episode was neither crashed nor dropped, and that the readers
(analysis parser, metrics, MLflow channel table, tau2 export) take the new lines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from stub_openai import StubOpenAIServer

from flatscore.agents.base import TurnOutput, UserSimulator, UserView
from flatscore.agents.llm import LLMAgent
from flatscore.analysis.episodes_parser import parse_episodes
from flatscore.backends.openai_backend import OpenAIBackend
from flatscore.domains import load_domain
from flatscore.engine.episode import EpisodeSettings
from flatscore.engine.metrics import summarize
from flatscore.engine.records import CHANNELS, canonical_without_timing
from flatscore.engine.runner import run_cell
from flatscore.engine.store import EpisodeStore
from flatscore.engine.tau2_export import tau2_messages
from flatscore.redact import REDACTED
from flatscore.tracking.cell_reader import channel_table_csv

ANSWERS = Path(__file__).resolve().parents[1] / "data" / "vllm_answers"


def body(mode: str) -> dict[str, Any]:
    return json.loads((ANSWERS / f"{mode}.json").read_text())["response"]


def with_message(message: dict[str, Any], finish_reason: str = "tool_calls") -> dict[str, Any]:
    """A hand-made body (not recorded): vLLM's plain answer with another message."""
    out = body("plain_message")
    out["choices"][0] = {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish_reason}
    return out


class AskThenThank(UserSimulator):
    """Asks once, then ends the conversation: the agent's answers decide everything else."""

    def respond(self, view: UserView):
        if False:  # pragma: no cover - a generator by contract
            yield
        said = sum(1 for m in view.messages if m["role"] == "assistant")
        return TurnOutput(content="I need help with my order." if said < 2 else "Thanks! ###STOP###")


def run_episode(tmp_path, synthetic_dirs, first: dict[str, Any], domain="retail", **settings) -> dict[str, Any]:
    """One episode whose first agent answer is ``first``; its record as read back from disk."""
    server = StubOpenAIServer.answering([first, body("plain_message")])
    backend = OpenAIBackend(server.url, "demo", api_key_env="", max_retries=0, timeout_s=10)
    dom = load_domain(domain, synthetic_dirs[domain])
    store = EpisodeStore(tmp_path / "episodes.jsonl")
    try:
        run_cell(
            dom,
            dom.tasks()[:1],
            LLMAgent(compact=True),
            AskThenThank(),
            EpisodeSettings(max_errors=5, max_steps=20, **settings),
            1,
            0,
            store,
            backends={"agent": backend},
            progress=False,
            infra_retries=0,
        )
    finally:
        backend.close()
        server.close()
    (record,) = list(store.records())
    assert record["termination"] == "user_stop" and record["scored"], "the episode must end normally"
    return record


def agent_entries(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in record["messages"] if m["role"] == "assistant" and "server" in m]


def verbatim(mode: str) -> dict[str, Any]:
    choice = body(mode)["choices"][0]
    kept = {k: choice["message"][k] for k in ("content", "tool_calls") if k in choice["message"]}
    return {**kept, "finish_reason": choice["finish_reason"]}


def nonzero(record: dict[str, Any]) -> dict[str, int]:
    return {c: n for c, n in record["channels"].items() if n}


def events(record: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(e["channel"], e["counted"]) for e in record["error_events"]]


#: mode -> (domain, channels counted in the episode, (channel, counted) events, agent tool calls run)
EXPECTED = {
    "well_formed": ("retail", {}, [], 1),
    "call_left_in_content": ("retail", {"server_missed_call": 1}, [("server_missed_call", False)], 1),
    "broken_json_arguments": ("retail", {"malformed_call": 1}, [("malformed_call", True)], 0),
    "broken_json_in_string_arguments": ("retail", {"malformed_call": 1}, [("malformed_call", True)], 0),
    "truncated_call": ("retail", {"malformed_call": 1}, [("malformed_call", True)], 0),
    "unlisted_tool": ("retail", {"invented_tool": 1}, [("invented_tool", True)], 1),
    "other_side_tool": ("telecom", {"other_side_tool": 1}, [("other_side_tool", True)], 1),
    "plain_message": ("retail", {}, [], 0),
}


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_each_recorded_vllm_answer_lands_in_its_channel(mode, tmp_path, synthetic_dirs):
    domain, channels, expected_events, calls = EXPECTED[mode]
    record = run_episode(tmp_path, synthetic_dirs, body(mode), domain=domain)
    assert nonzero(record) == channels
    assert events(record) == expected_events
    assert record["errors_counted"] == sum(counted for _, counted in expected_events)
    assert record["agent_tool_calls"] == calls
    first = agent_entries(record)[0]
    assert first["server"] == verbatim(mode)  # the answer as vLLM sent it, before any parsing
    assert "raw" not in first  # the server's answer replaces the parsed raw text
    if mode == "call_left_in_content":
        assert first["server_channels"] == ["server_missed_call"]
        assert "tool_calls" not in first["server"]  # vLLM leaves the key out
        results = [m for m in record["messages"] if m["role"] == "tool" and m.get("name") == "list_all_product_types"]
        assert len(results) == 1 and not results[0]["error"]  # the missed call ran
    # every entry of a server turn keeps its answer: a turn can be re-parsed offline
    assert len(agent_entries(record)) == sum(1 for m in record["messages"] if m["role"] == "assistant") - 1


def test_readers_take_server_lines(tmp_path, synthetic_dirs):
    record = run_episode(tmp_path, synthetic_dirs, body("call_left_in_content"))
    cols, ev, _ = parse_episodes(tmp_path / "episodes.jsonl", list(CHANNELS))
    assert cols["ch_server_missed_call"] == [1] and ev["channel"] == ["server_missed_call"] and ev["counted"] == [False]
    metrics = summarize([record])
    assert metrics["channel_server_missed_call"] == 1 and metrics["errors_counted"] == 0
    assert "server_missed_call" in channel_table_csv([record]).splitlines()[0]
    exported = tau2_messages(record["messages"])
    assert all("server" not in m for m in exported)
    assert [c["name"] for m in exported for c in m.get("tool_calls") or []] == ["list_all_product_types"]
    again = json.loads(json.dumps(record))
    for m in again["messages"]:
        for c in (m.get("server") or {}).get("tool_calls") or []:
            c["id"] = "another-random-id"
    assert canonical_without_timing(again) == canonical_without_timing(record)


def test_a_secret_in_a_server_answer_is_redacted(tmp_path, synthetic_dirs, monkeypatch):
    monkeypatch.setenv("PLANTED_API_KEY", "sk-planted-0123456789")
    leak = with_message({"content": "Your key is sk-planted-0123456789."}, finish_reason="stop")
    run_episode(tmp_path, synthetic_dirs, leak)
    line = (tmp_path / "episodes.jsonl").read_text()
    assert "sk-planted-0123456789" not in line and REDACTED in line
    entry = agent_entries(json.loads(line))[0]
    assert entry["server"]["content"] == f"Your key is {REDACTED}."


@pytest.mark.parametrize(
    ("message", "turn_ran"),
    [
        (
            {
                "content": None,
                "tool_calls": {
                    "type": "function",
                    "function": {"name": "calculate", "arguments": '{"expression": "1"}'},
                },
            },
            True,
        ),
        (
            {"content": None, "tool_calls": [{"function": {"name": "calculate", "arguments": {"expression": "1"}}}]},
            True,
        ),
        ({"content": None, "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}, False),
        ({"content": "", "tool_calls": "calculate(1)"}, False),
    ],
    ids=["tool_calls-object", "arguments-object", "no-function-name", "tool_calls-string"],
)
def test_off_format_answers_are_the_servers_and_never_crash(message, turn_ran, tmp_path, synthetic_dirs):
    """Hand-made answers (vLLM does not send these): read where they can be, always recorded."""
    record = run_episode(tmp_path, synthetic_dirs, with_message(message))
    assert nonzero(record) == {"server_bad_answer": 1}
    assert events(record) == [("server_bad_answer", False)] and record["errors_counted"] == 0
    assert record["agent_tool_calls"] == (1 if turn_ran else 0)
    first = agent_entries(record)[0]
    assert first["server"]["tool_calls"] == message["tool_calls"]
    if not turn_ran:  # the agent was told; the next answer went on
        assert first["parse_error"] and any(m.get("channel") == "server_bad_answer" for m in record["messages"])


def test_tau2_compat_reads_content_as_a_message(tmp_path, synthetic_dirs):
    """tau2 never parses content: the missed call is not run, a broken one is no error."""
    missed = run_episode(tmp_path / "a", synthetic_dirs, body("call_left_in_content"), tau2_compat=True)
    assert missed["agent_tool_calls"] == 0 and events(missed) == [("server_missed_call", False)]
    assert agent_entries(missed)[0]["content"] == body("call_left_in_content")["choices"][0]["message"]["content"]
    broken = run_episode(tmp_path / "b", synthetic_dirs, body("broken_json_arguments"), tau2_compat=True)
    assert broken["scored"] and events(broken) == [("malformed_call", False)] and broken["errors_counted"] == 0


def test_tau2_compat_drops_an_unreadable_server_answer(tmp_path, synthetic_dirs):
    server = StubOpenAIServer.answering([with_message({"content": "", "tool_calls": 7})])
    backend = OpenAIBackend(server.url, "demo", api_key_env="", max_retries=0, timeout_s=10)
    dom = load_domain("retail", synthetic_dirs["retail"])
    store = EpisodeStore(tmp_path / "episodes.jsonl")
    try:
        run_cell(
            dom,
            dom.tasks()[:1],
            LLMAgent(compact=True),
            AskThenThank(),
            EpisodeSettings(tau2_compat=True),
            1,
            0,
            store,
            backends={"agent": backend},
            progress=False,
        )
    finally:
        backend.close()
        server.close()
    (record,) = list(store.records())
    assert record["termination"] == "malformed_dropped" and not record["scored"]
    assert events(record) == [("server_bad_answer", False)]
