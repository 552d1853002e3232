"""Inference server faults, end to end: an episode cell through the `openai` backend against a
real local HTTP server process whose answers the test scripts.

The server (stdlib, below) plays the expert: for each task it replays the expert agent's own
turns (tool calls as OpenAI ``tool_calls`` for some tasks, as Hermes ``<tool_call>`` text for
others), so a healthy request path completes the episode *correctly* (reward 1). On chosen
(task, turn) pairs it fails on purpose — HTTP 500, a malformed JSON body, a hang past the
client timeout, a 400 — for the first N hits of that request (retries of one request carry
the same ``X-Request-Id``, so N counts backend retries and run_cell's episode retries alike).

Each episode must end either completed exactly as the expert did, or as
``infrastructure_error``: retried by run_cell, unscored, excluded from success_rate, counted
in ``n_infrastructure_failures`` — never scored as a model error and never dropped.
Builds on tests/backends (which test the backend's retry/timeout in isolation).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from flatscore.backends.serve import ManagedServer

SERVER = r"""
import argparse, json, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--script", required=True)   # {task_id: [assistant messages of the expert]}
ap.add_argument("--faults", required=True)   # [{task, turn, mode, times}]
ap.add_argument("--log", required=True)
a = ap.parse_args()
script = json.load(open(a.script))
faults = json.load(open(a.faults))
lock = threading.Lock()
hits = {}

def log(entry):
    with lock, open(a.log, "a") as f:
        f.write(json.dumps(entry) + "\n")

class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def _send(self, code, payload):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path == "/health":
            return self._send(200, {"status": "ok"})
        self._send(404, {"error": "not found"})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        rid = self.headers.get("X-Request-Id", "?")
        task = rid.split("#", 1)[0]
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        with lock:
            hits[rid] = hits.get(rid, 0) + 1
            n = hits[rid]
        mode = "ok"
        for f in faults:
            if f["task"] == task and f["turn"] == turn and (f["times"] < 0 or n <= f["times"]):
                mode = f["mode"]
        log({"rid": rid, "task": task, "turn": turn, "hit": n, "mode": mode})
        if mode == "500":
            return self._send(500, {"error": "injected"})
        if mode == "400":
            return self._send(400, {"error": "injected bad request"})
        if mode == "overflow":  # vLLM's words for a prompt past the model's context window
            return self._send(400, {"error": {"message": "This model's maximum context length is 1024 tokens. "
                "However, your prompt contains 1031 input tokens, which exceeds this limit even without any "
                "output tokens. Please reduce the length of the input prompt.", "code": 400}})
        if mode == "badjson":
            return self._send(200, b'{"choices": [{"message": {"content": "trunc')
        if mode == "hang":
            time.sleep(30)
            return self._send(500, {"error": "too late"})
        turns = script[task]
        message = dict(turns[turn]) if turn < len(turns) else {"role": "assistant", "content": "Goodbye. ###STOP###"}
        message.setdefault("content", "")
        payload = {"id": rid, "object": "chat.completion",
                   "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 20, "completion_tokens": 5}}
        self._send(200, payload)

srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
srv.daemon_threads = True
srv.serve_forever()
"""

N_TASKS = 6


@pytest.fixture(scope="module")
def retail(tmp_path_factory):
    from flatscore.domains import domain_class, load_domain

    path = domain_class("retail").generate(tmp_path_factory.mktemp("srv_data") / "retail", seed=2)
    return path, load_domain("retail", path)


def _expert_script(domain, tasks, base_seed: int, hermes_text_for: set[str]) -> tuple[dict, dict]:
    """The expert's agent-side turns per task (what the server replays) and its records."""
    from flatscore.agents.expert import ExpertAgent
    from flatscore.agents.toolcall_parser import format_hermes
    from flatscore.agents.users import ScriptedUser
    from flatscore.engine.episode import Episode, EpisodeSettings
    from flatscore.engine.runner import drive
    from flatscore.engine.scoring import Evaluator
    from flatscore.engine.seeding import episode_seed

    evaluator = Evaluator(domain)
    episodes = [
        Episode(
            domain, t, ExpertAgent(), ScriptedUser(), EpisodeSettings(), episode_seed(base_seed, t.id, 0), 0, evaluator
        )
        for t in tasks
    ]
    records = {}
    drive(episodes, None, lambda r: records.__setitem__(r.task_id, r))
    script = {}
    for ep in episodes:
        turns = []
        for m in ep.agent_history:
            if m["role"] != "assistant":
                continue
            m = {
                "role": "assistant",
                "content": m.get("content") or "",
                **({"tool_calls": m["tool_calls"]} if m.get("tool_calls") else {}),
            }
            if ep.task.id in hermes_text_for and m.get("tool_calls"):
                text = "\n".join(
                    format_hermes(c["function"]["name"], json.loads(c["function"]["arguments"]))
                    for c in m.pop("tool_calls")
                )
                m["content"] = (m["content"] + "\n" if m["content"] else "") + text
            turns.append(m)
        script[ep.task.id] = turns
    return script, records


def _start(tmp_path: Path, script: dict, faults: list[dict]) -> tuple[ManagedServer, Path]:
    (tmp_path / "server.py").write_text(SERVER)
    (tmp_path / "script.json").write_text(json.dumps(script))
    (tmp_path / "faults.json").write_text(json.dumps(faults))
    log = tmp_path / "requests.jsonl"
    cmd = [
        sys.executable,
        str(tmp_path / "server.py"),
        "--port",
        "{port}",
        "--script",
        str(tmp_path / "script.json"),
        "--faults",
        str(tmp_path / "faults.json"),
        "--log",
        str(log),
    ]
    return ManagedServer(cmd, log_path=tmp_path / "server.log", startup_timeout_s=60, stop_grace_s=2), log


def _check_outcomes(records: list[dict], expert: dict, always_failing: set[str], text_tasks: set[str]) -> None:
    """Tasks in ``text_tasks`` got their calls as Hermes text with no ``tool_calls``, as from a
    server whose tool-call parser missed them: each such call is a ``server_missed_call``, never
    counted, and the model made no error."""
    from flatscore.engine.records import MODEL_CHANNELS

    by_task = Counter(r["task_id"] for r in records)
    assert all(n == 1 for n in by_task.values()) and set(by_task) == set(expert), "an episode dropped or doubled"
    for r in records:
        if r["task_id"] in always_failing:
            assert r["termination"] == "infrastructure_error" and r["scored"] is False, r["task_id"]
            assert r["reward_info"].get("infrastructure_error")
            assert not any(r["channels"].values()), "an infrastructure failure was counted as a model error"
        else:
            ref = expert[r["task_id"]]
            assert r["termination"] == ref.termination and r["scored"] is True, (r["task_id"], r["termination"])
            assert r["reward"] == ref.reward == 1.0, r["task_id"]
            assert not any(r["channels"][c] for c in MODEL_CHANNELS), r["channels"]
            missed = r["agent_tool_calls"] if r["task_id"] in text_tasks else 0
            assert r["channels"]["server_missed_call"] == missed and r["errors_counted"] == 0, r["channels"]


def test_cell_through_openai_backend_with_injected_faults(retail, tmp_path):
    from flatscore.agents.llm import LLMAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.backends.openai_backend import OpenAIBackend
    from flatscore.engine.episode import EpisodeSettings
    from flatscore.engine.metrics import summarize
    from flatscore.engine.runner import run_cell
    from flatscore.engine.store import EpisodeStore

    _, domain = retail
    tasks = domain.tasks("test")[:N_TASKS]
    ids = [t.id for t in tasks]
    text_tasks = set(ids[::2])
    script, expert = _expert_script(domain, tasks, 0, hermes_text_for=text_tasks)
    faults = [
        {"task": ids[0], "turn": 1, "mode": "500", "times": 1},  # absorbed by the backend's retry
        {"task": ids[1], "turn": 2, "mode": "badjson", "times": 3},  # 3 bad bodies: episode fails once, rerun ok
        {"task": ids[2], "turn": 1, "mode": "hang", "times": 2},  # 2 timeouts, then an answer
        {"task": ids[3], "turn": 2, "mode": "hang", "times": -1},  # hangs for good: infrastructure_error
        {"task": ids[4], "turn": 1, "mode": "400", "times": -1},  # the server refuses for good
    ]
    server, log = _start(tmp_path, script, faults)
    store = EpisodeStore(tmp_path / "cell" / "episodes.jsonl")
    attempts: Counter = Counter()

    class CountingAgent(LLMAgent):  # every episode attempt ends here, failed or not
        def end_episode(self, episode_id: str) -> None:
            attempts[episode_id] += 1
            super().end_episode(episode_id)

    agent = CountingAgent()
    t0 = time.time()
    with server:
        backend = OpenAIBackend(
            server.base_url, "scripted-expert", max_retries=2, backoff_s=0.02, timeout_s=1.0, max_in_flight=1
        )
        try:
            run_cell(
                domain,
                tasks,
                agent,
                ScriptedUser(),
                EpisodeSettings(max_errors=3),
                1,
                0,
                store,
                backends={"agent": backend},
                cell_hash="srv",
                infra_retries=2,
                progress=False,
            )
        finally:
            backend.close()
    elapsed = time.time() - t0
    records = list(store.records())
    _check_outcomes(records, expert, always_failing={ids[3], ids[4]}, text_tasks=text_tasks)

    hits = [json.loads(line) for line in log.read_text().splitlines()]
    per_rid = Counter(h["rid"] for h in hits)
    failing_rids = {h["rid"]: h["task"] for h in hits if h["task"] in (ids[3], ids[4]) and h["mode"] != "ok"}
    # hang: 3 run_cell attempts x 3 backend attempts; 400: not retried by the backend, 3 run_cell attempts
    assert sorted(per_rid[r] for r in failing_rids) == [3, 9]
    assert max(h["hit"] for h in hits if h["task"] == ids[1]) == 4  # 3 bad bodies, then the good one
    assert max(h["hit"] for h in hits if h["task"] == ids[2] and h["turn"] == 1) == 3

    # reruns: ids[1] once (bad bodies), ids[3] and ids[4] twice each (infra_retries=2)
    assert sum(attempts.values()) - N_TASKS == 5, attempts
    metrics = summarize(records, 1)
    assert metrics["n_episodes"] == N_TASKS and metrics["n_infrastructure_failures"] == 2
    assert metrics["n_scored"] == N_TASKS - 2 and metrics["success_rate"] == 1.0
    assert metrics["termination_infrastructure_error"] == 2
    print(
        f"\nFIGURE server faults (engine): {len(hits)} requests for {N_TASKS} episodes, "
        f"backend retries {backend.retries}, injected faults {sum(h['mode'] != 'ok' for h in hits)}, "
        f"episode attempts {sum(attempts.values())} (reruns by run_cell {sum(attempts.values()) - N_TASKS}), "
        f"completed correctly {metrics['n_scored']}, infrastructure_error {metrics['n_infrastructure_failures']}, "
        f"{elapsed:.1f}s"
    )


def test_flatscore_episodes_cli_with_openai_backend_and_faults(retail, tmp_path):
    """The same through the command line (`--agent llm --backend openai --base-url`)."""
    data, domain = retail
    tasks = domain.tasks("test")[:4]
    ids = [t.id for t in tasks]
    text_tasks = {ids[1]}
    script, expert = _expert_script(domain, tasks, 3, hermes_text_for=text_tasks)
    faults = [
        {"task": ids[0], "turn": 1, "mode": "500", "times": 2},  # two 500s, backend retries (0.5 s, 1 s)
        {"task": ids[2], "turn": 2, "mode": "400", "times": 1},  # 400 once: episode fails, run_cell reruns it
        {"task": ids[3], "turn": 1, "mode": "400", "times": -1},  # 400 for good
    ]
    server, log = _start(tmp_path, script, faults)
    out = tmp_path / "cell"
    with server:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "flatscore.cli",
                "episodes",
                "--domain",
                "retail",
                "--data",
                str(data),
                "--split",
                "test",
                "--tasks",
                ",".join(ids),
                "--agent",
                "llm",
                "--backend",
                "openai",
                "--base-url",
                server.base_url,
                "--model",
                "scripted-expert",
                "--seed",
                "3",
                "--no-progress",
                "--out",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    _check_outcomes(records, expert, always_failing={ids[3]}, text_tasks=text_tasks)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["n_episodes"] == 4 and metrics["n_infrastructure_failures"] == 1 and metrics["n_scored"] == 3
    assert metrics["success_rate"] == 1.0
    hits = [json.loads(line) for line in log.read_text().splitlines()]
    assert sum(1 for h in hits if h["task"] == ids[3] and h["mode"] == "400") == 3  # 1 + infra_retries
    assert "unscored" in result.stdout
    cell = json.loads((out / "cell.json").read_text())  # what the arm ran on, named in the cell
    assert cell["arm_backend"] == "openai (external server)"
    assert (cell["arm_scheme"], cell["arm_dtype"]) == ("none", "unknown")
    print(
        f"\nFIGURE server faults (CLI): {len(hits)} requests, {sum(h['mode'] != 'ok' for h in hits)} injected faults, "
        f"n_scored {metrics['n_scored']}, n_infrastructure_failures {metrics['n_infrastructure_failures']}"
    )


def test_a_prompt_past_the_context_window_fails_the_episode_once_and_is_scored(retail, tmp_path):
    """vLLM refuses a prompt longer than the model's context (HTTP 400): the episode ends as
    ``context_overflow``, scored as a failure, asked once (no backend or run_cell retry), and the
    other episodes of the cell are untouched."""
    from flatscore.agents.llm import LLMAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.backends.openai_backend import OpenAIBackend
    from flatscore.engine.episode import EpisodeSettings
    from flatscore.engine.metrics import summarize
    from flatscore.engine.runner import run_cell
    from flatscore.engine.store import EpisodeStore

    _, domain = retail
    tasks = domain.tasks("test")[:3]
    ids = [t.id for t in tasks]
    script, expert = _expert_script(domain, tasks, 0, hermes_text_for=set())
    server, log = _start(tmp_path, script, [{"task": ids[1], "turn": 2, "mode": "overflow", "times": -1}])
    store = EpisodeStore(tmp_path / "cell" / "episodes.jsonl")
    with server:
        backend = OpenAIBackend(server.base_url, "scripted-expert", max_retries=2, backoff_s=0.02, max_in_flight=1)
        try:
            run_cell(
                domain,
                tasks,
                LLMAgent(),
                ScriptedUser(),
                EpisodeSettings(max_errors=3),
                1,
                0,
                store,
                backends={"agent": backend},
                cell_hash="ovf",
                infra_retries=2,
                progress=False,
            )
        finally:
            backend.close()
    records = {r["task_id"]: r for r in store.records()}
    overflowed = records[ids[1]]
    assert overflowed["termination"] == "context_overflow" and overflowed["scored"] is True
    assert overflowed["reward"] == 0.0 and "maximum context length" in overflowed["reward_info"]["context_overflow"]
    assert not any(overflowed["channels"].values()), "the model's context limit is not an error channel"
    hits = [json.loads(line) for line in log.read_text().splitlines()]
    assert sum(1 for h in hits if h["task"] == ids[1] and h["mode"] == "overflow") == 1, "retried"
    for task_id in (ids[0], ids[2]):
        assert records[task_id]["reward"] == expert[task_id].reward == 1.0
    metrics = summarize(list(records.values()), 1)
    assert metrics["n_context_overflow"] == 1 and metrics["n_scored"] == 3
    assert metrics["success_rate"] == pytest.approx(2 / 3)
