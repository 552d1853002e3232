"""Shell scripts of the scale-out path: bash -n, and shellcheck where it is installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = [
    REPO / "benchmarks" / "gpu_smoke.sh",
    REPO / ".ci" / "slurm" / "setup.sh",
    REPO / ".ci" / "slurm" / "teardown.sh",
    REPO / ".ci" / "postgres" / "setup.sh",
    REPO / ".ci" / "postgres" / "teardown.sh",
    REPO / "envs" / "flatscore.post-deploy.sh",
    REPO / "envs" / "inference.post-deploy.sh",
]
IDS = [str(p.relative_to(REPO)) for p in SCRIPTS]


@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_bash_syntax(script: Path) -> None:
    assert script.is_file(), script
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_shellcheck(script: Path) -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    res = subprocess.run([shellcheck, "-x", str(script)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def test_gpu_smoke_says_it_needs_a_gpu() -> None:
    head = "".join((REPO / "benchmarks" / "gpu_smoke.sh").read_text().splitlines(keepends=True)[:30])
    assert "GPU" in head and "vLLM" in head
