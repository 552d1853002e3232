"""Nothing lost, nothing twice: SIGKILL mid-cell and resume; the CLI's one-line errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flatscore.engine.records import canonical_without_timing
from flatscore.engine.store import EpisodeStore

CELL = [
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


def flatscore(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flatscore.cli", *args], capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def telecom_data(tmp_path_factory) -> Path:
    from flatscore.domains import domain_class

    return domain_class("telecom").generate(tmp_path_factory.mktemp("data") / "telecom", seed=11)


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_sigkill_mid_cell_resumes_to_the_uninterrupted_result(tmp_path, telecom_data):
    reference = tmp_path / "reference"
    done = flatscore("episodes", *CELL, "--data", str(telecom_data), "--out", str(reference))
    assert done.returncode == 0, done.stderr
    expected = [canonical_without_timing(r) for r in EpisodeStore(reference / "episodes.jsonl").records()]
    assert len(expected) == 3 * 120 or len(expected) > 300

    killed = tmp_path / "killed"
    kills = 0
    for threshold in (40, 150):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "flatscore.cli",
                "episodes",
                *CELL,
                "--data",
                str(telecom_data),
                "--out",
                str(killed),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 60
        while _lines(killed / "episodes.jsonl") < threshold and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    assert kills >= 1, "the run finished before it could be killed: make the cell larger"
    partial = _lines(killed / "episodes.jsonl")
    assert 0 < partial < len(expected)
    resumed = flatscore("episodes", *CELL, "--data", str(telecom_data), "--out", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    got = [canonical_without_timing(r) for r in EpisodeStore(killed / "episodes.jsonl").records()]
    keys = [(json.loads(g)["task_id"], json.loads(g)["trial"]) for g in got]
    assert len(keys) == len(set(keys)), "an episode was written twice"
    assert sorted(got) == sorted(expected)
    # a finished cell reruns nothing
    again = flatscore("episodes", *CELL, "--data", str(telecom_data), "--out", str(killed))
    assert again.returncode == 0 and _lines(killed / "episodes.jsonl") == len(expected)


def test_store_cuts_a_torn_last_line_and_keeps_the_rest(tmp_path):
    path = tmp_path / "episodes.jsonl"
    good = json.dumps({"task_id": "a", "trial": 0}) + "\n"
    path.write_text(good + '{"task_id": "b", "tri')
    store = EpisodeStore(path)
    assert store.repaired_bytes > 0
    assert path.read_text() == good
    assert store.has("a", 0) and not store.has("b", 0)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["episodes", "--domain", "airline", "--out", "x"], "invalid choice: 'airline'"),
        (["episodes", "--domain", "retail", "--budget", "0", "--out", "x"], "--budget: expected an integer >= 1"),
        (["episodes", "--domain", "retail", "--trials", "two", "--out", "x"], "--trials: expected an integer >= 1"),
        (
            ["episodes", "--domain", "retail", "--agent", "noisy", "--noise", "invented_tool=2", "--out", "OUT"],
            "noise rate 'invented_tool'",
        ),
        (
            ["episodes", "--domain", "retail", "--agent", "noisy", "--noise", "bogus=0.1", "--out", "OUT"],
            "--noise: unknown channel 'bogus' (known: invented_tool,",
        ),
        (
            ["episodes", "--domain", "retail", "--agent", "expert", "--noise", "tool_error=0.1", "--out", "OUT"],
            "--noise: only the noisy agent injects errors",
        ),
        (["episodes", "--domain", "retail", "--data", "DATA", "--tasks", "nope", "--out", "OUT"], "unknown task id"),
    ],
)
def test_bad_input_gets_one_clear_line(args, needle, tmp_path, telecom_data):
    from flatscore.domains import domain_class

    data = tmp_path / "retail"
    needs_data = "DATA" in args
    if needs_data:
        domain_class("retail").generate(data, seed=1)
    args = [str(data) if a == "DATA" else str(tmp_path / "out") if a == "OUT" else a for a in args]
    result = flatscore(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr and "__init__()" not in result.stderr
    assert "--budget: --budget" not in result.stderr and "--trials: --trials" not in result.stderr
    if not needs_data:  # refused before anything was written, generated data included
        assert not (tmp_path / "out").exists()


def test_a_json_line_that_is_not_an_episode_is_refused_naming_the_line(tmp_path):
    """Before: ``flatscore: error: task_id``."""
    from flatscore.engine.cell_folder import CorruptEpisodeLine, read_episode_records

    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps({"task_id": "a", "trial": 0}) + "\n" + json.dumps({"hello": 1}) + "\n")
    with pytest.raises(CorruptEpisodeLine, match=r"episodes.jsonl:2: not an episode record \(no task_id, trial\)"):
        list(read_episode_records(path))


def test_unreadable_task_file_is_a_clear_error(tmp_path):
    from flatscore.domains import domain_class

    data = domain_class("retail").generate(tmp_path / "retail", seed=1)
    (data / "tasks.json").write_text("{not json")
    result = flatscore("episodes", "--domain", "retail", "--data", str(data), "--out", str(tmp_path / "o"))
    assert result.returncode == 2
    assert "tasks.json is not readable JSON" in result.stderr and "Traceback" not in result.stderr


def test_out_folder_of_another_cell_is_refused_and_left_intact(tmp_path, telecom_data):
    out = tmp_path / "cell"
    first = flatscore(
        "episodes",
        *CELL[:-5],
        "--trials",
        "1",
        "--data",
        str(telecom_data),
        "--tasks",
        "first:3",
        "--out",
        str(out),
        "--no-progress",
    )
    assert first.returncode == 0, first.stderr
    before = (out / "episodes.jsonl").read_bytes()
    other = flatscore(
        "episodes",
        *CELL[:-5],
        "--trials",
        "1",
        "--budget",
        "2",
        "--data",
        str(telecom_data),
        "--tasks",
        "first:3",
        "--out",
        str(out),
        "--no-progress",
    )
    assert other.returncode == 2 and "holds results of another cell" in other.stderr
    assert (out / "episodes.jsonl").read_bytes() == before


def test_cli_summary_and_files(tmp_path, telecom_data):
    out = tmp_path / "cell"
    result = flatscore(
        "episodes",
        "--domain",
        "telecom",
        "--agent",
        "expert",
        "--trials",
        "2",
        "--data",
        str(telecom_data),
        "--tasks",
        "first:5",
        "--out",
        str(out),
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    cell = json.loads((out / "cell.json").read_text())
    assert metrics["n_episodes"] == 10 and metrics["success_rate"] == 1.0 and metrics["pass_hat_2"] == 1.0
    assert cell["budget"] == 10 and cell["domain"] == "telecom" and len(cell["cell_hash"]) == 16
    assert "success rate" in result.stdout


def test_supersede_moves_a_stale_cell_aside_and_keeps_it(tmp_path, telecom_data):
    out = tmp_path / "cell"
    base = [
        "episodes",
        "--domain",
        "telecom",
        "--agent",
        "expert",
        "--data",
        str(telecom_data),
        "--out",
        str(out),
        "--no-progress",
        "--tasks",
        "first:2",
    ]
    assert flatscore(*base).returncode == 0
    old = json.loads((out / "cell.json").read_text())["cell_hash"]
    old_episodes = (out / "episodes.jsonl").read_bytes()
    changed = flatscore(*base, "--budget", "3", "--supersede")
    assert changed.returncode == 0, changed.stderr
    assert json.loads((out / "cell.json").read_text())["budget"] == 3
    assert (out / ".superseded" / old / "episodes.jsonl").read_bytes() == old_episodes
