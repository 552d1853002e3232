"""Tracking at cluster scale: 32 cell loggers at once into an MLflow server on PostgreSQL, and
the same into a sqlite file side by side (the setup a shared filesystem makes unsafe).

32 loggers = 8 processes x 4 threads, all released at one instant after their imports: each
thread logs its own cell with :func:`flatscore.tracking.log_cell`, as 32 cell jobs would. The
server test skips, saying why, where PostgreSQL is absent (see .ci/postgres/setup.sh).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from flatscore.tracking import resolve_tracking_uri, sync_results

sys.path.insert(0, str(Path(__file__).parent))
from test_tracking import make_cell  # noqa: E402

PROCESSES, THREADS = 8, 4

_WORKER = """
import json, sys, threading, time, traceback
from flatscore.tracking import log_cell
import mlflow.tracking  # imported before the start signal
uri, experiment, t0, cells = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
out = []
def one(cell):
    try:
        out.append({"cell": cell, "run_id": log_cell(cell, uri, experiment)})
    except Exception:
        out.append({"cell": cell, "error": traceback.format_exc()})
threads = [threading.Thread(target=one, args=(c,)) for c in cells]
while time.time() < t0:
    time.sleep(0.005)
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps(out), flush=True)
import os; os._exit(0)
"""


def _log_at_once(results: Path, uri: str, experiment: str) -> tuple[list[dict], float]:
    cells = [make_cell(results, study=experiment, seed=s, n_tasks=2, trials=2) for s in range(PROCESSES * THREADS)]
    start_at = time.time() + 20.0  # every process has imported mlflow by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, uri, experiment, str(start_at)]
            + [str(c) for c in cells[i * THREADS : (i + 1) * THREADS]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    seconds = time.time() - start_at
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [r for out, _ in outs for r in json.loads(out.strip().splitlines()[-1])], seconds


def _check(results: Path, uri: str, experiment: str, logged: list[dict]) -> None:
    from mlflow.tracking import MlflowClient

    errors = [r["error"] for r in logged if "error" in r]
    assert errors == [], errors[0]
    assert len(logged) == PROCESSES * THREADS and len({r["run_id"] for r in logged}) == PROCESSES * THREADS
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    cells = [r for r in runs if r.data.tags.get("flatscore.kind") == "cell"]
    study = [r for r in runs if r.data.tags.get("flatscore.kind") == "study"]
    hashes = [r.data.tags["flatscore.cell_hash"] for r in cells]
    assert len(study) == 1, "one study run, not one per racing logger"
    assert len(cells) == len(set(hashes)) == PROCESSES * THREADS, "0 duplicate cell runs"
    assert all(r.info.status == "FINISHED" for r in cells)
    # sync is idempotent: every cell is up to date, twice
    for _ in range(2):
        assert sync_results(results, uri, experiment) == {
            "cells": PROCESSES * THREADS,
            "logged": 0,
            "up_to_date": PROCESSES * THREADS,
            "failed": 0,
        }
    assert len(client.search_runs([exp.experiment_id], max_results=1000)) == len(runs)


@pytest.mark.timeout(900)
def test_32_loggers_at_once_into_a_server_on_postgresql(mlflow_pg_server, tmp_path):
    experiment = f"scale-{uuid.uuid4().hex[:8]}"
    logged, seconds = _log_at_once(tmp_path / "results", mlflow_pg_server, experiment)
    _check(tmp_path / "results", mlflow_pg_server, experiment, logged)
    print(f"\n[server on PostgreSQL] {len(logged)} cells logged at once in {seconds:.1f} s, 0 errors, 0 duplicates")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_32_loggers_at_once_into_sqlite(tmp_path):
    """Side by side with the server test (slow: the fast set's 8-process sqlite test covers the race)."""
    results = tmp_path / "results"
    uri = resolve_tracking_uri(None, results)
    logged, seconds = _log_at_once(results, uri, "scale-sqlite")
    _check(results, uri, "scale-sqlite", logged)
    print(f"\n[sqlite file] {len(logged)} cells logged at once in {seconds:.1f} s, 0 errors, 0 duplicates")
