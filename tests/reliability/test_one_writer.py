"""One writer per cell folder: a second `flatscore episodes` on the same --out is refused at once,
naming the holder, and the folder ends with every episode exactly once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

CELL = [
    "episodes",
    "--domain",
    "telecom",
    "--agent",
    "noisy",
    "--noise",
    "invented_tool=0.2,tool_error=0.1",
    "--budget",
    "10",
    "--trials",
    "3",
    "--seed",
    "5",
    "--no-progress",
]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "flatscore.cli", *args]


@pytest.fixture(scope="module")
def telecom_data(tmp_path_factory) -> Path:
    from flatscore.domains import domain_class

    return domain_class("telecom").generate(tmp_path_factory.mktemp("data") / "telecom", seed=11)


def _keys(path: Path) -> Counter:
    return Counter((json.loads(line)["task_id"], json.loads(line)["trial"]) for line in path.read_text().splitlines())


def test_second_writer_is_refused_at_once_and_nothing_is_written_twice(tmp_path, telecom_data):
    out = tmp_path / "cell"
    args = [*CELL, "--data", str(telecom_data), "--out", str(out)]
    first = subprocess.Popen(_cli(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (out / "episodes.jsonl").exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    assert first.poll() is None, "the first run finished before the second could start: make the cell larger"
    started = time.time()
    second = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=120)
    waited = time.time() - started
    first_out, first_err = first.communicate(timeout=120)
    assert first.returncode == 0, first_err
    assert second.returncode == 2, second.stderr
    error = second.stderr.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("flatscore: error:"), second.stderr
    assert f"pid {first.pid}" in error[0] and "since" in error[0], error[0]
    assert waited < 30  # refused at once (LOCK_NB), not queued behind the first run
    keys = _keys(out / "episodes.jsonl")
    assert keys and max(keys.values()) == 1, "an episode was written twice"
    assert json.loads((out / "metrics.json").read_text())["n_episodes"] == len(keys)


def test_lock_held_in_process_refuses_the_cli_before_anything_changes(tmp_path, telecom_data):
    from flatscore.engine.cell_folder import WRITER_LOCK_FILE
    from flatscore.engine.writer_lock import writer_lock

    out = tmp_path / "cell"
    args = [*CELL, "--data", str(telecom_data), "--out", str(out), "--tasks", "first:2", "--trials", "1"]
    with writer_lock(out):
        holder = (out / WRITER_LOCK_FILE).read_text()
        assert str(__import__("os").getpid()) in holder
        refused = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=120)
        assert sorted(p.name for p in out.iterdir()) == [WRITER_LOCK_FILE]  # nothing else was touched
    assert refused.returncode == 2 and "is being written by" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    # the lock goes with its holder: the next run proceeds
    done = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_killed_writer_leaves_no_stale_lock(tmp_path, telecom_data):
    import os
    import signal

    out = tmp_path / "cell"
    args = [*CELL, "--data", str(telecom_data), "--out", str(out)]
    proc = subprocess.Popen(_cli(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (out / "episodes.jsonl").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert max(_keys(out / "episodes.jsonl").values()) == 1
