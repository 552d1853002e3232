"""The LLM user through the workflow for real: its server is a service job in each arm's group.

As tests/workflow/test_serving.py does, the servers are ``transformers serve`` over an untrained
demo model on the CPU (the same announcement, health wait and teardown as vLLM). Two models, and
the second is the user: arm ``agent`` gets its own instance of the user's server (serve_user),
and arm ``usr`` at full precision talks to its agent's server, which is the user's too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def user_study(tmp_path_factory) -> Path:
    from flatscore.domains import domain_class
    from flatscore.models.demo import build_untrained_demo

    work = tmp_path_factory.mktemp("user")
    data = domain_class("telecom").generate(work / "data" / "telecom", seed=3, n_tasks=30)
    model = build_untrained_demo(work / "model", size="tiny")
    spec = {"kind": "hf", "id": str(model), "prompt": "compact"}
    config = {
        "study": "user",
        "results": "results",
        "tracking": {"uri": None, "experiment": "flatscore-user"},
        "domains": {"telecom": {"source": "path", "path": str(data)}},
        "split": "test",
        "tasks_per_domain": 1,
        "models": {"agent": dict(spec), "usr": dict(spec)},
        "precisions": ["full"],
        "budgets": [10],
        "repair": [False],
        "trials": 1,
        "trial_shards": 1,
        "seed": 0,
        "max_steps": 6,
        "backend": {"kind": "openai", "serve": "transformers", "max_in_flight": 1, "max_new_tokens": 8},
        "user": {"kind": "llm", "model": "usr", "max_new_tokens": 8},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    cells = [f"results/cells/{m}/full/telecom/K10/repair-off/shard0/metrics.json" for m in ("agent", "usr")]
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", *cells, "--cores", "2", "-s", str(REPO / "Snakefile")]
        + ["--directory", str(work), "--configfile", str(work / "config.yaml")],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return work


def test_each_arm_talked_to_a_full_precision_user(user_study):
    logs = user_study / "results" / "logs" / "serve_model"  # a service's announcement is gone after it
    assert (logs / "user-for-agent-full.log").exists()  # the agent arm's own user instance
    assert not (logs / "user-for-usr-full.log").exists()  # the user's own arm shares its agent's server
    hashes = {}
    for arm in ("agent", "usr"):
        cell = user_study / "results" / "cells" / arm / "full" / "telecom" / "K10" / "repair-off" / "shard0"
        info = json.loads((cell / "cell.json").read_text())
        assert info["user"] == "llm_user" and info["user_model"].endswith("model")
        hashes[arm] = {k: v for k, v in info.items() if k.startswith("user")}
        (record,) = [json.loads(line) for line in (cell / "episodes.jsonl").read_text().splitlines()]
        assert any(m["role"] == "user" for m in record["messages"][1:]), "the user model spoke"
    assert hashes["agent"] == hashes["usr"], "one user for every arm: the same identity"
    log = (user_study / "results" / "logs" / "serve_model" / "user-for-agent-full.log").read_text()
    assert "serving " in log
