"""Security: the UI binds localhost; tool arguments are never eval'd nor opened as paths; chat
templates render sandboxed; a planted API key never reaches results or the MLflow store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flatscore.agents.base import Agent, ToolCall, TurnOutput

PLANTED = "sk-test-PLANTED"


def test_mlflow_ui_binds_localhost_by_default(tmp_path):
    from flatscore.cli import build_parser
    from flatscore.tracking import resolve_tracking_uri, ui_command

    argv = ui_command(resolve_tracking_uri(None, tmp_path))
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "0.0.0.0" not in argv
    args = build_parser().parse_args(["ui"])
    assert args.host == "127.0.0.1"


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    from flatscore.agents.expert import ExpertAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.domains import domain_class, load_domain
    from flatscore.engine.episode import Episode, EpisodeSettings
    from flatscore.engine.scoring import Evaluator

    root = tmp_path_factory.mktemp("sec")
    out = {}
    for name in ("retail", "telecom"):
        domain = load_domain(name, domain_class(name).generate(root / name, seed=0, n_tasks=20))
        out[name] = (
            domain,
            Episode(
                domain,
                domain.tasks()[0],
                ExpertAgent(),
                ScriptedUser(),
                EpisodeSettings(max_errors=10**6),
                0,
                0,
                Evaluator(domain),
            ),
        )
    return out


CALC_PAYLOADS = [
    '__import__("os").system("touch PWNED")',
    "__import__('os').getcwd()",
    "().__class__.__mro__[1].__subclasses__()",
    "open('/etc/passwd').read()",
    "eval('1+1')",
    "(lambda: 1)()",
    "[x for x in (1,)]",
    "globals()",
    "9**9**9**9",
    "1" * 10000 + "+1",
]


def test_calculate_never_evaluates_code(episodes, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, ep = episodes["retail"]
    ok = ep._execute("assistant", ToolCall("c", "calculate", {"expression": "(2 + 3) * 4"}))
    assert ok["error"] is False and "20" in ok["content"]
    for payload in CALC_PAYLOADS:
        entry = ep._execute("assistant", ToolCall("c", "calculate", {"expression": payload}))
        assert entry["error"] is True and entry["channel"] == "tool_error", (payload, entry)
        assert "exception" not in entry, (payload, entry)
    assert not (tmp_path / "PWNED").exists()
    print(f"\nFIGURE calculate: {len(CALC_PAYLOADS)} code payloads -> tool_error, none evaluated")


PATHS = [
    "../../etc/passwd",
    "/etc/passwd",
    "../../../../../../etc/shadow",
    "~/.ssh/id_rsa",
    "file:///etc/passwd",
    "..\\..\\windows\\win.ini",
    "/proc/self/environ",
]
_AUDIT = {"on": False, "opens": []}


def _audit(event: str, args) -> None:
    if _AUDIT["on"] and event in ("open", "os.listdir", "os.scandir", "shutil.copyfile", "os.remove"):
        path = str(args[0]) if args else ""
        if any(marker in path for marker in ("passwd", "shadow", "id_rsa", "win.ini", "environ")):
            _AUDIT["opens"].append((event, path))


sys.addaudithook(_audit)  # audit hooks cannot be removed: this one only records while switched on


class _PathAgent(Agent):
    """Calls every tool with every string parameter set to a path, once; then stops."""

    name = "path-agent"

    def __init__(self, tools_by_turn: list[list[ToolCall]]) -> None:
        self.turns = tools_by_turn

    def respond(self, view):
        if False:  # pragma: no cover
            yield
        index = sum(1 for m in view.messages if m["role"] == "assistant" and m.get("tool_calls"))
        if index < len(self.turns):
            return TurnOutput(tool_calls=self.turns[index])
        return TurnOutput(content="Done. ###STOP###", stop=True)


def _path_calls(env, side: str) -> list[list[ToolCall]]:
    turns = []
    for name, spec in env.tool_specs(side).items():
        props = ((spec.openai_schema().get("function") or {}).get("parameters") or {}).get("properties") or {}
        for path in PATHS:
            args = {k: path if (v.get("type") in (None, "string")) else v.get("default", 1) for k, v in props.items()}
            turns.append([ToolCall(f"c{len(turns)}", name, args)])
    return turns


def test_path_like_arguments_never_open_files(episodes):
    from flatscore.agents.users import ScriptedUser
    from flatscore.engine.episode import Episode, EpisodeSettings
    from flatscore.engine.runner import drive
    from flatscore.engine.scoring import Evaluator

    _AUDIT["on"] = True  # the hook sees opens at all (else the 0 below would prove nothing)
    try:
        open(Path(episodes["retail"][0].data_dir) / "tasks.json").close()
        with open("/etc/passwd"):
            pass
    except OSError:
        pass
    finally:
        _AUDIT["on"] = False
    assert _AUDIT["opens"] == [("open", "/etc/passwd")], _AUDIT["opens"]
    _AUDIT["opens"].clear()
    calls = 0
    records = []
    for dname, (domain, probe) in episodes.items():
        turns = _path_calls(probe.env, "assistant")
        calls += len(turns)
        episode = Episode(
            domain,
            domain.tasks()[0],
            _PathAgent(turns),
            ScriptedUser(),
            EpisodeSettings(max_errors=10**6, max_steps=10**5),
            0,
            0,
            Evaluator(domain),
        )
        _AUDIT["on"] = True
        try:
            drive([episode], None, records.append)
            # the user's side too (telecom phone tools)
            for [call] in _path_calls(probe.env, "user"):
                probe._execute("user", call)
                calls += 1
        finally:
            _AUDIT["on"] = False
    assert _AUDIT["opens"] == [], _AUDIT["opens"]
    assert all(r.termination in ("agent_stop", "user_stop", "max_steps") for r in records)
    assert sum(r.agent_tool_calls for r in records) > 0
    print(f"\nFIGURE path arguments: {calls} tool calls with {len(PATHS)} path payloads, 0 file opens")


def test_chat_template_renders_sandboxed(tmp_path):
    pytest.importorskip("transformers")
    from jinja2.exceptions import SecurityError

    from flatscore.models.demo.build import build_untrained_demo

    model_dir = build_untrained_demo(tmp_path / "demo", size="tiny")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    messages = [{"role": "user", "content": "hi"}]
    assert isinstance(tok.apply_chat_template(messages, tokenize=False), str)  # the real template renders
    for template in [
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ messages.__class__.__init__.__globals__ }}",
        "{{ cycler.__init__.__globals__.os }}",
    ]:
        with pytest.raises(SecurityError):
            tok.apply_chat_template(messages, chat_template=template, tokenize=False)


def test_planted_api_key_never_reaches_results_or_store(tmp_path):
    """`flatscore episodes --log-mlflow` through the openai backend with OPENAI_API_KEY planted: the key is
    sent to the server (Authorization) but appears nowhere in the results folder or the sqlite store."""
    import os

    from flatscore.backends.serve import ManagedServer
    from flatscore.backends.testing import fake_server_command, write_fake_server
    from flatscore.domains import domain_class

    data = domain_class("retail").generate(tmp_path / "data", seed=1, n_tasks=20)
    results = tmp_path / "results"
    script = write_fake_server(tmp_path / "fake.py")
    log = tmp_path / "requests.log"
    env = {**os.environ, "OPENAI_API_KEY": PLANTED, "FLATSCORE_TEST_SECRET": PLANTED + "-2"}
    with ManagedServer(
        fake_server_command(script, log), log_path=tmp_path / "srv.log", startup_timeout_s=60, stop_grace_s=2
    ) as srv:
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
                "--tasks",
                "first:2",
                "--budget",
                "2",
                "--max-steps",
                "12",
                "--agent",
                "llm",
                "--backend",
                "openai",
                "--base-url",
                srv.base_url,
                "--model",
                "fake",
                "--no-progress",
                "--log-mlflow",
                "--experiment",
                "sec",
                "--out",
                str(results / "cells" / "c"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MLflow: logged run" in result.stdout, result.stdout[-2000:]
    assert "auth=yes" in log.read_text()  # the key was really in use during the run
    files = [p for p in results.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in files) and any(p.name == "episodes.jsonl" for p in files)
    hits = [str(p) for p in files if PLANTED.encode() in p.read_bytes()]
    assert hits == [], hits
    assert PLANTED not in result.stdout + result.stderr
    print(f"\nFIGURE secrets: {len(files)} files under results/ (incl. mlflow.db) searched, 0 hits")
