"""A/A replicates: a replicate is a new cell with independent seeds; replicate 0 is the cell as before."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from flatscore.engine.cell_folder import read_episode_records
from flatscore.engine.integrity import verify_cell
from flatscore.engine.seeding import episode_seed, replicate_seed

CELL = ["--domain", "telecom", "--agent", "noisy", "--noise", "invented_tool=0.3,tool_error=0.2", "--budget", "10"]
CELL += ["--trials", "2", "--seed", "5", "--tasks", "first:4", "--no-progress"]


def run_cell(out: Path, data: Path, *extra: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "flatscore.cli", "episodes", *CELL, "--data", str(data), "--out", str(out), *extra],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads((out / "cell.json").read_text())


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict[str, tuple[dict, list[dict]]]:
    root = tmp_path_factory.mktemp("replicates")
    data = root / "data"
    gen = [sys.executable, "-m", "flatscore.cli", "generate-domain", "--domain", "telecom", "--out", str(data)]
    subprocess.run([*gen, "--seed", "3", "--n-tasks", "20"], check=True, capture_output=True)
    out = {}
    for name, extra in (("plain", ()), ("zero", ("--replicate", "0")), ("one", ("--replicate", "1"))):
        cell = run_cell(root / name, data, *extra)
        out[name] = (cell, list(read_episode_records(root / name / "episodes.jsonl")))
        verify_cell(root / name)  # a replicate passes the aggregate's integrity check like any cell
    return out


def test_replicate_zero_is_the_cell_as_it_always_was(cells):
    plain, zero = cells["plain"][0], cells["zero"][0]
    assert "replicate" not in plain["identity"] and "replicate" not in zero["identity"]
    assert plain["cell_hash"] == zero["cell_hash"]


def test_a_replicate_is_its_own_cell_with_independent_seeds(cells):
    (plain, plain_eps), (one, one_eps) = cells["plain"], cells["one"]
    assert one["identity"]["replicate"] == 1 and one["replicate"] == 1
    assert one["cell_hash"] != plain["cell_hash"]
    assert one["seed"] == plain["seed"] == 5  # the study's seed is kept: the replicate derives its own
    base = replicate_seed(5, 1)
    assert base != 5
    assert {(e["task_id"], e["trial"], e["seed"]) for e in one_eps} == {
        (e["task_id"], e["trial"], episode_seed(base, e["task_id"], e["trial"])) for e in plain_eps
    }
    # independent seeds give another draw of the noisy agent's errors somewhere
    by_key = {(e["task_id"], e["trial"]): e["channels"] for e in plain_eps}
    assert any(e["channels"] != by_key[(e["task_id"], e["trial"])] for e in one_eps)
