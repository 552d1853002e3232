"""Arms vLLM's CPU build cannot serve are refused before any job runs, in one line naming the key.

Each refusal is a server that would have failed (or crawled) inside a job, after a minute of start-up
and after the model was quantized; the measurements behind them are in flatscore.serving_checks.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from flatscore.serving_checks import serving_problems

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"


def _cpu_vllm(precisions: list[str], **quantization: str) -> dict:
    """A study served by vLLM's CPU build, with the schema's defaults filled in (as the workflow has them)."""
    config = {
        "study": "s",
        "results": "results",
        "domains": {"retail": {"source": "synthetic"}},
        "models": {"demo": {"kind": "demo", "serving": {"dtype": "bfloat16"}}},
        "precisions": precisions,
        "quantization": {p: {"scheme": s} for p, s in quantization.items()},
        "budgets": [10],
        "repair": [False],
        "trials": 1,
        "seed": 0,
        "backend": {"kind": "openai", "serve": "vllm", "vllm": {"device": "cpu"}},
    }
    validate(config, str(SCHEMA))
    return config


def test_a_cpu_study_vllm_can_serve_passes():
    """full, int8 as W8A8 and int4, all served in bfloat16: what the CPU build loads and runs fast."""
    assert serving_problems(_cpu_vllm(["full", "int8", "int4"], int8="w8a8")) == []


def test_int8_w8a16_is_refused_with_w8a8_named():
    config = _cpu_vllm(["full", "int8"])  # the schema's int8 default is w8a16
    assert config["quantization"]["int8"]["scheme"] == "w8a16"
    [problem] = serving_problems(config)
    assert problem.startswith("config: quantization.int8.scheme: w8a16 has no kernel in vLLM's CPU build")
    assert "use quantization.int8.scheme: w8a8" in problem


def test_int4_outside_bfloat16_is_refused_per_model():
    config = _cpu_vllm(["full", "int4"])
    config["models"]["other"] = copy.deepcopy(config["models"]["demo"]) | {"serving": {"dtype": "auto"}}
    [problem] = serving_problems(config)
    assert problem.startswith("config: models.other.serving.dtype: auto, but vLLM's CPU build runs int4")
    assert "set models.other.serving.dtype: bfloat16 so that every arm of the comparison runs in bfloat16" in problem


def test_fp8_is_refused_on_the_cpu_and_allowed_on_a_gpu():
    config = _cpu_vllm(["full", "fp8"])
    [problem] = serving_problems(config)
    assert problem.startswith("config: precisions: fp8 loads in vLLM's CPU build but runs at under 1 token/s")
    assert "backend.vllm.device: gpu" in problem and "backend.kind: transformers" in problem
    config["backend"]["vllm"]["device"] = "gpu"
    config["quantization"]["int8"]["scheme"] = "w8a16"
    assert serving_problems(config) == []


@pytest.mark.parametrize(
    "backend",
    [
        {"kind": "transformers", "serve": None},
        {"kind": "openai", "serve": "transformers"},
        {"kind": "openai", "serve": "vllm", "base_url": "http://127.0.0.1:8000", "vllm": {"device": "cpu"}},
    ],
    ids=["in-process", "transformers-serve", "external-server"],
)
def test_only_a_vllm_cpu_server_the_workflow_starts_is_checked(backend):
    config = _cpu_vllm(["full", "int8", "int4", "fp8"])
    config["models"]["demo"]["serving"]["dtype"] = "float32"
    config["backend"] = backend
    assert serving_problems(config) == []


def test_a_named_checkpoint_is_out_of_scope():
    """A pre-quantized checkpoint says nothing about its scheme: only what the workflow quantizes is checked."""
    config = _cpu_vllm(["full", "int8", "int4", "fp8"])
    config["models"]["demo"]["serving"]["dtype"] = "auto"
    assert len(serving_problems(config)) == 3
    config["models"]["demo"]["quantized"] = {"int8": "org/m-int8", "int4": "org/m-int4", "fp8": "org/m-fp8"}
    assert serving_problems(config) == []


def _dry_run(tmp_path: Path, config: dict) -> str:
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
        + ["--configfile", str(tmp_path / "config.yaml"), "-n", "--cores", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-2000:]
    assert len(out.splitlines()) < 10, out
    assert not (tmp_path / "results").exists()
    return out


def test_snakemake_refuses_fp8_on_a_cpu_vllm_server_before_any_job(tmp_path):
    config = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config["precisions"] = ["full", "fp8"]
    config["backend"] = {"kind": "openai", "serve": "vllm", "vllm": {"device": "cpu"}}
    out = _dry_run(tmp_path, config)
    assert re.search(r"^config: precisions: fp8 loads in vLLM's CPU build but runs at under 1 token/s", out, re.M), out


def test_snakemake_refuses_a_scheme_of_another_precision_before_any_job(tmp_path):
    """Each precision allows its own schemes only (the schema): w8a8 is an int8 scheme, not an int4 one."""
    config = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config["quantization"]["int4"]["scheme"] = "w8a8"
    out = _dry_run(tmp_path, config)
    assert re.search(r"^config: quantization\.int4\.scheme: 'w8a8' is not one of \['w4a16'\]", out, re.M), out
