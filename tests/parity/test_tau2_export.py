"""``flatscore export-tau2``: a parity-mode cell written as tau2's results JSON regrades, in tau2's
own code (its ``Results`` model, its evaluators, its strict replay of every write), to the
rewards flatscore gave. Skips, saying why, without tau2's source, data or venv."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tau2_harness import TAU2_DATA, TAU2_SOURCE, missing_reason, regrade_with_tau2, tau2_data_root

pytestmark = pytest.mark.needs_tau2


def _flatscore(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "flatscore.cli", *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("domain", ["retail", "telecom"])
def test_exported_cell_regrades_to_the_same_rewards(domain: str, tmp_path: Path) -> None:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    cell, results = tmp_path / "cell", tmp_path / "results.json"
    _flatscore(
        "episodes", "--domain", domain, "--data", str(TAU2_DATA / domain), "--tasks", "first:10",
        "--agent", "noisy", "--noise", "invented_tool=0.15,tool_error=0.15,invalid_arguments=0.1",
        "--tau2-compat", "--tau2-checkout", str(TAU2_SOURCE), "--seed", "3", "--out", str(cell), "--no-progress",
    )  # fmt: skip
    _flatscore("export-tau2", str(cell), "--data", str(TAU2_DATA / domain), "--out", str(results))
    ours = [json.loads(line) for line in (cell / "episodes.jsonl").read_text().splitlines()]
    theirs = regrade_with_tau2(domain, results, tau2_data_root(tmp_path / "tau2-data"))
    assert len(theirs) == len(ours) == 10
    assert [t["reward"] for t in theirs] == [o["reward"] for o in ours]
    assert any(o["reward"] == 1.0 for o in ours) and any(o["errors_counted"] for o in ours)  # not trivially equal
