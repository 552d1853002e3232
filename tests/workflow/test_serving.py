"""The GPU path's serving lifecycle, run here with a real OpenAI-compatible server on the CPU.

With ``backend: {kind: openai, serve: ...}`` the workflow starts one server per (model,
precision) as a Snakemake service job, the episode shards of that model talk to it over
HTTP through the openai backend, and the server is ended after its consumers. On a GPU the
server is ``vllm serve``; here it is ``transformers serve`` (transformers' own
OpenAI-compatible server) over the demo model — the same health wait, announcement and
teardown, so only the server binary differs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served_study(tmp_path_factory) -> Path:
    from flatscore.domains import domain_class
    from flatscore.models.demo import build_untrained_demo

    work = tmp_path_factory.mktemp("served")
    data = domain_class("retail").generate(work / "data" / "retail", seed=3, n_tasks=30)
    model = build_untrained_demo(work / "model", size="tiny")
    config = {
        "study": "served",
        "results": "results",
        "tracking": {"uri": None, "experiment": "flatscore-served"},
        "domains": {"retail": {"source": "path", "path": str(data)}},
        "split": "test",
        "tasks_per_domain": 2,
        "models": {"demo": {"kind": "hf", "id": str(model), "prompt": "compact"}},
        "precisions": ["full"],
        "budgets": [10],
        "repair": [False],
        "trials": 2,
        "trial_shards": 1,
        "seed": 0,
        "max_steps": 10,
        "backend": {"kind": "openai", "serve": "transformers", "max_in_flight": 2, "max_new_tokens": 16},
    }
    (work / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "results/aggregate/summary.md",
            "--cores",
            "2",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(work),
            "--configfile",
            str(work / "config.yaml"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return work


def test_episodes_ran_over_http_against_the_shared_server(served_study):
    cell = served_study / "results" / "cells" / "demo" / "full" / "retail" / "K10" / "repair-off" / "shard0"
    metrics = json.loads((cell / "metrics.json").read_text())
    assert metrics["n_episodes"] == 4
    assert metrics["prompt_tokens"] > 0, "token usage comes back from the server"
    info = json.loads((cell / "cell.json").read_text())
    assert info["backend"] == "openai"
    server_log = (served_study / "results" / "serving" / "demo" / "full" / "server.log").read_text()
    requests = server_log.count('"POST /v1/chat/completions HTTP/1.1" 200')
    agent_turns = sum(
        sum(1 for m in json.loads(line)["messages"] if m["role"] == "assistant") - 1  # minus the fixed greeting
        for line in (cell / "episodes.jsonl").read_text().splitlines()
    )
    assert requests >= agent_turns > 0


def test_server_was_stopped_after_its_consumers(served_study):
    """Snakemake ends the service after its consumers: no server process outlives the workflow."""
    serving = served_study / "results" / "serving" / "demo" / "full"
    log = (serving / "server.log").read_text()
    started = re.search(r"Started server process \[(\d+)\]", log)
    assert started, log[-2000:]
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.group(1)), 0)
    serve_log = (served_study / "results" / "logs" / "serve_model" / "demo-full.log").read_text()
    assert "serving " in serve_log
