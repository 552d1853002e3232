"""The user simulator as a choice of the study: what the workflow plans for ``user:``.

Fast: Snakemake only plans (dry runs print each job's shell command); nothing runs. A job whose
command changes is rerun by Snakemake's params trigger, so comparing the planned commands before
and after a change says which jobs the change touches.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

STUDY = {
    "study": "s",
    "results": "results",
    "domains": {"telecom": {"source": "synthetic", "n_tasks": 10}},
    "models": {"demo": {"kind": "demo", "size": "tiny"}},
    "precisions": ["full", "int4"],
    "budgets": [10, 2],
    "repair": [False],
    "trials": 2,
    "trial_shards": 2,
    "seed": 0,
    "backend": {"kind": "openai", "serve": "transformers"},
    "user": {"kind": "llm", "model": "demo"},
}


def snakemake_dry_run(workdir: Path, config: dict) -> subprocess.CompletedProcess:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    return subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(workdir)]
        + ["--configfile", str(workdir / "config.yaml"), "-n", "-p", "--cores", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def planned(workdir: Path, config: dict) -> dict[tuple[str, str], str]:
    """{(rule, output): shell command} of every job the dry run plans."""
    result = snakemake_dry_run(workdir, config)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs: dict[tuple[str, str], str] = {}
    rule = output = ""
    for line in (result.stdout + result.stderr).splitlines():
        if match := re.match(r"\s*(?:local)?rule (\w+):", line):
            rule, output = match.group(1), ""
        elif match := re.match(r"\s*output: (.*)", line):
            output = match.group(1)
        elif line.startswith("Shell command:") or line.strip().startswith("shell:"):
            jobs[(rule, output)] = line.split(":", 1)[1].strip()
    assert jobs, result.stdout[-2000:]
    return jobs


def test_changing_the_users_settings_replans_exactly_the_episodes(tmp_path):
    before = planned(tmp_path / "a", STUDY)
    warmer = copy.deepcopy(STUDY)
    warmer["user"]["temperature"] = 0.5
    after = planned(tmp_path / "b", warmer)
    assert set(before) == set(after)
    changed = {job for job in before if before[job] != after[job]}
    episodes = {job for job in before if job[0] == "episodes"}
    assert len(episodes) == 2 * 2 * 2  # precisions x budgets x shards
    # downstream of every cell, the aggregate reruns anyway (and its command carries the whole config)
    downstream = {job for job in changed if job[0] in ("aggregate", "report", "sync_tracking")}
    assert changed - downstream == episodes, sorted((changed - downstream) ^ episodes)
    # the user's server does not change with a client setting: no model, quantize or serve job reruns
    assert any(rule == "serve_user" for rule, _ in before)


def test_every_arm_waits_for_a_full_precision_user_in_its_own_group(tmp_path):
    jobs = planned(tmp_path, STUDY)
    serves = {out: cmd for (rule, out), cmd in jobs.items() if rule in ("serve_model", "serve_user")}
    user_for_int4 = next(cmd for out, cmd in serves.items() if "serving/user/demo/int4" in out)
    assert "--model results/models/demo/full " in user_for_int4  # the user is never quantized
    for (rule, _), cmd in jobs.items():
        if rule != "episodes":
            continue
        arm = re.search(r"--precision (\w+)", cmd).group(1)
        expected = (
            "results/serving/demo/full/server.json" if arm == "full" else f"results/serving/user/demo/{arm}/server.json"
        )
        assert f"--user llm --user-base-url-file {expected} --user-model results/models/demo/full " in cmd


def test_the_scripted_user_adds_nothing_to_the_commands(tmp_path):
    scripted = copy.deepcopy(STUDY)
    scripted["user"] = {"kind": "scripted"}
    jobs = planned(tmp_path, scripted)
    # the user simulator's flags (--user, --user-model, ...), not the data's --user-details
    assert not any(re.search(r"--user(?!-details)", cmd) for cmd in jobs.values())
    assert any("--user-details prose" in cmd for cmd in jobs.values())  # the needle would see it
    assert not any(rule == "serve_user" for rule, _ in jobs)


@pytest.mark.parametrize(
    "user, needle",
    [
        ({"kind": "llm", "model": "nope"}, "config: user.model: 'nope' is not a key of models (known: demo)"),
        ({"kind": "llm"}, "config: user.model: kind llm needs a model"),
        ({"kind": "llm", "base_url": "http://h:1"}, "config: user.served_model: required with user.base_url"),
        ({"kind": "scripted", "model": "demo"}, "config: user.model: only an LLM user has one"),
    ],
)
def test_a_bad_user_block_is_one_line_before_any_job(tmp_path, user, needle):
    config = copy.deepcopy(STUDY)
    config["user"] = user
    result = snakemake_dry_run(tmp_path, config)
    said = result.stdout + result.stderr
    assert result.returncode != 0
    assert needle in said, said[-2000:]
    assert [line for line in said.splitlines() if line.startswith("config: ")] == [
        next(line for line in said.splitlines() if needle in line)
    ]


def test_a_user_only_model_is_served_for_the_user_and_never_evaluated(tmp_path):
    """models.<name>.role: user: one instance per arm's group at full precision, no cell, no quantization."""
    config = copy.deepcopy(STUDY)
    config["models"]["judge"] = {"kind": "demo", "size": "tiny", "role": "user", "seed": 1}
    config["user"] = {"kind": "llm", "model": "judge"}
    jobs = planned(tmp_path, config)
    episodes = [cmd for (rule, _), cmd in jobs.items() if rule == "episodes"]
    assert len(episodes) == 2 * 2 * 2 and all("--model results/models/demo/" in cmd for cmd in episodes)
    assert all("--user-model results/models/judge/full " in cmd for cmd in episodes)
    assert not any("results/models/judge/int4" in cmd or "cells/judge" in out for (_, out), cmd in jobs.items())
    user_servers = [cmd for (rule, _), cmd in jobs.items() if rule == "serve_user"]
    assert len(user_servers) == 2 and all("--model results/models/judge/full " in cmd for cmd in user_servers)
    assert any(rule == "train_demo" and "judge" in out for rule, out in jobs)


@pytest.mark.parametrize(
    "models, user, needle",
    [
        (
            {"demo": {"kind": "demo"}, "judge": {"kind": "demo", "role": "user"}},
            {"kind": "llm", "model": "demo"},
            "config: models.judge.role: user, but user.model is demo",
        ),
        ({"demo": {"kind": "demo", "role": "user"}}, {"kind": "llm", "model": "demo"}, "at least one must be an agent"),
    ],
)
def test_a_user_role_that_plays_no_user_is_refused(tmp_path, models, user, needle):
    config = copy.deepcopy(STUDY)
    config["models"], config["user"] = models, user
    result = snakemake_dry_run(tmp_path, config)
    assert result.returncode != 0 and needle in result.stdout + result.stderr


def test_a_user_model_needs_a_server(tmp_path):
    config = copy.deepcopy(STUDY)
    config["backend"] = {"kind": "transformers"}
    result = snakemake_dry_run(tmp_path, config)
    assert result.returncode != 0 and "config: user.model: needs backend.serve" in result.stdout + result.stderr


def test_paper_plans_the_users_server_beside_the_agents(tmp_path):
    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    for name in config["domains"]:  # the paper's domain paths are placeholders
        folder = tmp_path / "data" / name
        folder.mkdir(parents=True)
        (folder / "tasks.json").write_text("[]")
        config["domains"][name]["path"] = str(folder)
    jobs = planned(tmp_path / "run", config)
    user = config["user"]["model"]
    user_id = config["models"][user]["id"]
    serves = [cmd for (rule, _), cmd in jobs.items() if rule in ("serve_model", "serve_user")]
    users = [cmd for cmd in serves if f"--model {user_id} " in cmd]
    arms = len(config["models"]) * len(config["precisions"])
    assert len(serves) == arms + len(users) - 1  # one user server per arm's group; its own full arm shares
    episodes = [cmd for (rule, _), cmd in jobs.items() if rule == "episodes"]
    assert episodes and all(
        "--user llm --user-base-url-file " in cmd and f"--user-model {user_id} " in cmd for cmd in episodes
    )
