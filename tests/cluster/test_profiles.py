"""Snakemake profiles: structure, GPU requests only in the GPU profile, and a clean --lint."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "profiles"
GPU_RULES = ("serve_model", "quantize")  # episodes are HTTP clients of serve_model


def _load(name: str) -> dict:
    return yaml.safe_load((PROFILES / name / "config.yaml").read_text())


def test_slurm_profile() -> None:
    p = _load("slurm")
    assert p["executor"] == "slurm"
    for key in ("jobs", "retries", "latency-wait", "default-resources", "set-resources"):
        assert key in p, key
    assert p["slurm-status-command"] == "squeue"
    # Rules say `threads: workflow.cores`; under the slurm executor that is an error unless
    # `cores` is given (it does not cap concurrency on a cluster; `jobs` does).
    assert isinstance(p["cores"], int) and p["cores"] >= max(p["set-threads"].values())
    dr = p["default-resources"]
    assert dr["slurm_partition"].startswith("$") and dr["slurm_account"].startswith("$"), dr
    for rule in GPU_RULES:
        res = p["set-resources"][rule]
        assert res["gres"] == "gpu:1", (rule, res)
        assert {"mem_mb", "runtime", "cpus_per_task"} <= res.keys(), res
        assert p["set-threads"][rule] == res["cpus_per_task"]


def test_ci_profile_is_the_slurm_profile_without_gpus() -> None:
    gpu, ci = _load("slurm"), _load("slurm-ci")
    assert ci.keys() == gpu.keys()
    assert ci["set-resources"].keys() == gpu["set-resources"].keys()
    assert ci["set-threads"].keys() == gpu["set-threads"].keys()
    assert not any("gres" in r or "gpu" in r for r in ci["set-resources"].values())
    assert ci["slurm-status-command"] == "squeue"
    assert ci["cores"] == 2
    for rule, res in ci["set-resources"].items():
        assert res["cpus_per_task"] <= 2, f"{rule}: the CI node has 2 CPUs"
        assert ci["set-threads"].get(rule, res["cpus_per_task"]) == res["cpus_per_task"]
    # MinJobAge 300 s must stay >= 3 x the first status check delay, or the plugin falls back to
    # sacct, which hangs without accounting.
    assert 3 * ci["slurm-init-seconds-before-status-checks"] < 300


def test_local_profile() -> None:
    p = _load("local")
    assert "executor" not in p
    assert p["cores"] and "rerun-triggers" in p and "resources" in p


@pytest.mark.skipif(not (REPO / "Snakefile").exists(), reason="workflow not present (Snakefile)")
@pytest.mark.parametrize("profile", ["local", "slurm", "slurm-ci"])
def test_lint_is_clean(profile: str, tmp_path: Path) -> None:
    if profile != "local" and shutil.which("sinfo") is None:
        pytest.skip("the slurm executor plugin needs SLURM's client tools (sinfo) to load")
    env = dict(os.environ, FLATSCORE_SLURM_PARTITION="debug", FLATSCORE_SLURM_ACCOUNT="root")
    res = subprocess.run(
        [sys.executable, "-m", "snakemake", "--profile", str(PROFILES / profile), "--lint", "--nolock"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "Congratulations, your workflow is in a good condition" in out, out[-3000:]
