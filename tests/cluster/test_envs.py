"""Conda environment files for --sdm conda: they parse, and their pins are pyproject.toml's."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ENVS = REPO / "envs"
NAME = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _split(req: str) -> tuple[str, str, str]:
    m = NAME.match(req.strip())
    assert m, req
    return _norm(m.group(1)), m.group(2) or "", m.group(3).replace(" ", "")


def _pyproject() -> dict[str, tuple[str, str]]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return {n: (extra, spec) for n, extra, spec in map(_split, deps)}


def _pip_section(env: dict) -> list[str]:
    pips = [d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d]
    assert len(pips) == 1, "one pip: section expected"
    return pips[0]


def _env(name: str) -> dict:
    env = yaml.safe_load((ENVS / name).read_text())
    assert isinstance(env, dict) and env.get("name") and env.get("dependencies"), name
    assert any(isinstance(d, str) and d.startswith("python=3.11") for d in env["dependencies"])
    return env


@pytest.mark.parametrize("name", ["flatscore.yaml", "inference.yaml"])
def test_env_pins_equal_pyproject(name: str) -> None:
    project = _pyproject()
    reqs = [r for r in _pip_section(_env(name)) if not r.startswith("-")]
    seen = {}
    for req in reqs:
        n, extra, spec = _split(req)
        assert n in project, f"{name}: {n} is not a dependency in pyproject.toml"
        assert (extra, spec) == project[n], f"{name}: {req} != pyproject's {n}{''.join(project[n])}"
        seen[n] = spec
    # Every exact pin of the project (==) is in the environment, except the workflow tools in
    # the GPU env, which runs single rules, not Snakemake itself.
    optional = {"snakemake", "snakemake-executor-plugin-slurm"} if name == "inference.yaml" else set()
    pinned = {n for n, (_, spec) in project.items() if spec.startswith("==")}
    assert pinned - optional <= seen.keys(), pinned - optional - seen.keys()


def test_cpu_env_takes_torch_from_the_cpu_index() -> None:
    pip = _pip_section(_env("flatscore.yaml"))
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in pip
    assert "torch==2.13.0" in pip


@pytest.mark.parametrize("name", ["flatscore", "inference"])
def test_post_deploy_scripts(name: str) -> None:
    script = ENVS / f"{name}.post-deploy.sh"
    assert script.is_file(), "Snakemake runs <env>.post-deploy.sh after creating the env"
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
