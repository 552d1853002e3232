"""Resume and repair are said: rerunning a half-done cell prints one line (stderr, so the job log)
with how many episodes were kept and how much of a torn tail was cut."""

from __future__ import annotations

import subprocess
import sys

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


def test_resume_after_a_torn_tail_says_what_was_kept_and_cut(tmp_path):
    from flatscore.domains import domain_class

    data = domain_class("retail").generate(tmp_path / "data", seed=4, n_tasks=20)
    out = tmp_path / "cell"
    fresh = _cli(*CELL, "--data", str(data), "--out", str(out))
    assert fresh.returncode == 0, fresh.stderr
    assert "resum" not in fresh.stderr.lower()  # a fresh cell says nothing
    path = out / "episodes.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    torn = lines[5][:37]  # a half-done cell whose last write was cut off
    path.write_bytes(b"".join(lines[:5]) + torn)
    (out / "metrics.json").unlink()
    resumed = _cli(*CELL, "--data", str(data), "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    said = [line for line in resumed.stderr.splitlines() if "resum" in line.lower()]
    assert len(said) == 1, resumed.stderr
    assert "kept 5 episodes" in said[0] and "cut 1 torn line (37 bytes)" in said[0], said[0]
    assert str(path) in said[0]
    again = _cli(*CELL, "--data", str(data), "--out", str(out))
    said = [line for line in again.stderr.splitlines() if "resum" in line.lower()]
    assert len(said) == 1 and "kept 12 episodes" in said[0] and "cut" not in said[0], again.stderr
