"""A duplicated episode line is never counted: integrity check, analysis loader and resume refuse it,
naming the file, both lines and the (task_id, trial) key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CELL = [
    "episodes",
    "--domain",
    "retail",
    "--agent",
    "noisy",
    "--noise",
    "invented_tool=0.2,tool_error=0.1",
    "--tasks",
    "first:6",
    "--trials",
    "2",
    "--seed",
    "2",
    "--no-progress",
]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flatscore.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cell(tmp_path_factory) -> tuple[Path, Path]:
    """(a finished cell folder, its data folder)."""
    from flatscore.domains import domain_class

    root = tmp_path_factory.mktemp("dup")
    data = domain_class("retail").generate(root / "data", seed=4, n_tasks=20)
    out = root / "cell"
    r = _cli(*CELL, "--data", str(data), "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out, data


def _duplicate(path: Path, index: int) -> tuple[int, tuple[str, int]]:
    """Append a copy of line ``index`` (0-based); returns the copy's line number and its key."""
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines) + lines[index])
    record = json.loads(lines[index])
    return len(lines) + 1, (record["task_id"], record["trial"])


def test_verify_cell_names_both_lines_and_the_key(cell, tmp_path):
    import shutil

    from flatscore.engine.cell import episodes_sha256
    from flatscore.engine.integrity import IntegrityError, verify_cell

    copy = shutil.copytree(cell[0], tmp_path / "cell")
    second, (task, trial) = _duplicate(copy / "episodes.jsonl", 3)
    metrics = json.loads((copy / "metrics.json").read_text())
    metrics.update(episodes_sha256=episodes_sha256(copy / "episodes.jsonl"), n_episodes=metrics["n_episodes"] + 1)
    (copy / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(IntegrityError) as err:
        verify_cell(copy)
    message = str(err.value)
    assert str(copy / "episodes.jsonl") in message and f"lines 4 and {second}" in message, message
    assert repr(task) in message and f"trial={trial}" in message, message


def test_analysis_loader_refuses_a_duplicated_episode(cell, tmp_path):
    import shutil

    from flatscore.analysis.episodes_parser import CorruptRecordError, parse_episodes
    from flatscore.analysis.load import load_cells

    copy = shutil.copytree(cell[0], tmp_path / "cell")
    (copy / "episodes.summary.npz").unlink(missing_ok=True)  # make the loader read the JSONL
    second, (task, trial) = _duplicate(copy / "episodes.jsonl", 0)
    with pytest.raises(CorruptRecordError) as err:
        parse_episodes(copy / "episodes.jsonl", [])
    assert err.value.lineno == second and f"lines 1 and {second}" in str(err.value) and repr(task) in str(err.value), (
        err.value
    )
    with pytest.raises(CorruptRecordError):
        load_cells([copy])


def test_resume_refuses_a_planted_duplicate_line(cell, tmp_path):
    import shutil

    out, data = cell
    copy = shutil.copytree(out, tmp_path / "cell")
    path = copy / "episodes.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5]) + lines[1])  # a half-done cell with one line copied
    (copy / "metrics.json").unlink()
    before = path.read_bytes()
    result = _cli(*CELL, "--data", str(data), "--out", str(copy))
    assert result.returncode == 2, (result.returncode, result.stdout[-1500:])
    error = result.stderr.strip().splitlines()
    assert len(error) == 1 and "lines 2 and 6" in error[0] and str(path) in error[0], result.stderr
    assert path.read_bytes() == before, "the refused resume changed the episodes"
    assert not (copy / "metrics.json").exists()
