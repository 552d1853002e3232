"""flatscore.tracking against real MLflow: a real sqlite store, real `mlflow server` processes.

No mocks. Cells are synthetic but follow the engine's contract (cell.json, episodes.jsonl,
metrics.json under <results>/cells/<cell_id>/).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flatscore.redact import is_secret_name
from flatscore.tracking import is_pending, log_cell, sync_results, try_log_cell
from flatscore.tracking.cell_reader import content_sha256
from flatscore.tracking.store import ensure_store, resolve_tracking_uri, sqlite_path
from flatscore.tracking.ui import ui_command

CHANNELS = ["invented_tool", "other_side_tool", "malformed_call", "invalid_arguments", "tool_error", "user_tool_error"]


# ---------------------------------------------------------------------------------------------
# fixtures: synthetic cells


def _episode(task: int, trial: int, seed: int, domain: str, budget: int, repair: bool, bump: int = 0) -> dict:
    halluc = (task + trial) % 3 + bump
    tool_err = (task * 7 + seed) % 2
    channels = {c: 0 for c in CHANNELS}
    channels["invented_tool"] = halluc
    channels["tool_error"] = tool_err
    errors = halluc + tool_err
    term = "too_many_errors" if errors > budget else "user_stop"
    reward = 1.0 if term == "user_stop" and (task + seed) % 2 == 0 else 0.0
    events = [
        {
            "step": i,
            "channel": "invented_tool",
            "side": "agent",
            "tool": "refund_everything",
            "detail": "not in tool list",
            "counted": True,
        }
        for i in range(halluc)
    ]
    msgs = [{"role": "system", "content": "policy"}, {"role": "user", "content": f"help with order #{task}"}]
    for i in range(2):
        msgs.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "get_order_details", "arguments": {"order_id": f"#W{task}"}},
                    }
                ],
            }
        )
        msgs.append(
            {"role": "tool", "name": "get_order_details", "tool_call_id": f"c{i}", "content": '{"status": "delivered"}'}
        )
    msgs.append({"role": "assistant", "content": "done"})
    return {
        "task_id": f"{domain}_{task}",
        "trial": trial,
        "seed": seed,
        "domain": domain,
        "budget": budget,
        "repair": repair,
        "termination": term,
        "reward": reward,
        "scored": True,
        "reward_info": {"db_match": bool(reward)},
        "errors_counted": errors,
        "channels": channels,
        "error_events": events,
        "agent_tool_calls": 2 + halluc,
        "user_tool_calls": 0,
        "steps": len(msgs),
        "messages": msgs,
        "usage": {"prompt_tokens": 100 + task, "completion_tokens": 20},
        "timing": {"wall_seconds": 0.1 * (task + 1), "ended_at": EPISODES_END + 10.0 * task},
        "cell": "",
        "tau2_compat": False,
        "schema": 1,
    }


#: when the planted episodes ended (epoch seconds): the cell's run must span them
EPISODES_END = 1_800_000_000.0


def make_cell(
    results: Path,
    *,
    study="s1",
    model="demo-llama",
    precision="full",
    domain="retail",
    budget=10,
    repair=False,
    seed=0,
    n_tasks=3,
    trials=2,
    bump=0,
    extra=None,
) -> Path:
    cell = {
        "study": study,
        "model": model,
        "precision": precision,
        "domain": domain,
        "budget": budget,
        "repair": repair,
        "trials": trials,
        "seed": seed,
        "split": "test",
        "tau2_compat": False,
        "n_tasks": n_tasks,
        "agent": "llm",
        "backend": "transformers",
        "model_manifest_sha": hashlib.sha256(f"{model}-{precision}".encode()).hexdigest(),
        "code_version": "0.1.0+g1234567",
        "seeds": [seed, seed + 1],
    }
    cell.update(extra or {})
    ident = {k: v for k, v in cell.items() if k not in ("study",)}
    cell["cell_hash"] = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    cell_id = f"{domain}-{precision}-b{budget}-{'r' if repair else 'n'}-s{seed}"
    d = results / "cells" / cell_id
    d.mkdir(parents=True, exist_ok=True)
    eps = [_episode(t, k, seed + k, domain, budget, repair, bump) for t in range(n_tasks) for k in range(trials)]
    for e in eps:
        e["cell"] = cell["cell_hash"]
    (d / "cell.json").write_text(json.dumps(cell, indent=2))
    (d / "episodes.jsonl").write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in eps))
    (d / "metrics.json").write_text(json.dumps(compute_metrics(eps)))
    return d


def compute_metrics(eps: list[dict]) -> dict:
    n = len(eps)
    m = {
        "n_episodes": n,
        "n_scored": sum(e["scored"] for e in eps),
        "n_infrastructure_failures": 0,
        "success_rate": sum(e["reward"] for e in eps) / n,
        "pass_hat_1": sum(e["reward"] for e in eps) / n,
        "tokens_prompt": sum(e["usage"]["prompt_tokens"] for e in eps),
        "wall_seconds": 1.5,
    }
    calls = sum(e["agent_tool_calls"] for e in eps)
    for c in CHANNELS:
        m[f"channel_{c}"] = sum(e["channels"][c] for e in eps)
        m[f"rate_{c}"] = m[f"channel_{c}"] / calls
    for t in ("user_stop", "too_many_errors"):
        m[f"termination_{t}"] = sum(e["termination"] == t for e in eps)
    return m


# ---------------------------------------------------------------------------------------------
# helpers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """A migrated, empty sqlite store built once; tests copy it (migrations cost ~10 s here)."""
    d = tmp_path_factory.mktemp("template")
    uri = resolve_tracking_uri(None, d)
    ensure_store(uri)
    return sqlite_path(uri)


@pytest.fixture
def results(tmp_path, template_db) -> Path:
    r = tmp_path / "results"
    r.mkdir()
    import shutil

    shutil.copyfile(template_db, r / "mlflow.db")
    return r


def _client(uri):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _runs(uri, exp_name):
    c = _client(uri)
    exp = c.get_experiment_by_name(exp_name)
    assert exp is not None
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    study = [r for r in runs if r.data.tags.get("flatscore.kind") == "study"]
    cells = [r for r in runs if r.data.tags.get("flatscore.kind") == "cell"]
    assert len(study) + len(cells) == len(runs)
    return exp, study, cells


def _download_text(uri, run_id, path) -> str:
    import mlflow.artifacts

    local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, tracking_uri=uri)
    return Path(local).read_text()


# ---------------------------------------------------------------------------------------------
# unit-level


def test_resolve_uri_and_ui_command(tmp_path):
    assert resolve_tracking_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    assert resolve_tracking_uri("http://127.0.0.1:5001", tmp_path) == "http://127.0.0.1:5001"
    rel = resolve_tracking_uri("sqlite:///rel/x.db", tmp_path)
    assert rel.startswith("sqlite:////") and rel.endswith("/rel/x.db")
    argv = ui_command("sqlite:////r/mlflow.db", port=5123)
    assert argv[argv.index("--backend-store-uri") + 1] == "sqlite:////r/mlflow.db"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "5123"
    assert "ui" in argv
    assert ui_command("http://x:1", host="0.0.0.0")[-3] == "0.0.0.0"


def test_secret_names():
    for k in ("api_key", "OPENAI_API_KEY", "hf_token", "token", "db_password", "client_secret"):
        assert is_secret_name(k), k
    for k in ("model", "precision", "max_tokens", "prompt_tokens", "model_manifest_sha", "budget"):
        assert not is_secret_name(k), k


# ---------------------------------------------------------------------------------------------
# logging cells into a sqlite store


def test_three_cells_nested_idempotent_and_updated(results):
    uri = resolve_tracking_uri(None, results)
    dirs = [
        make_cell(results, precision="full", domain="retail"),
        make_cell(results, precision="int4", domain="retail", budget=2),
        make_cell(results, precision="int4", domain="telecom", repair=True),
    ]
    ids = [log_cell(d, uri, "s1") for d in dirs]
    assert len(set(ids)) == 3

    exp, study, cells = _runs(uri, "s1")
    assert len(study) == 1 and len(cells) == 3
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"  # the UI opens on runs, not traces
    for run in cells:  # the run spans the episodes (first start to last end), not the logging
        assert run.info.start_time == int((EPISODES_END - 0.1) * 1000)
        assert run.info.end_time == int((EPISODES_END + 20.0) * 1000)
    assert study[0].info.run_name == "s1" and study[0].data.tags["flatscore.study"] == "s1"
    by_id = {r.info.run_id: r for r in cells}
    for d, rid in zip(dirs, ids):
        run = by_id[rid]
        cell = json.loads((d / "cell.json").read_text())
        metrics = json.loads((d / "metrics.json").read_text())
        assert run.data.tags["flatscore.study_run_id"] == study[0].info.run_id
        assert "mlflow.parentRunId" not in run.data.tags  # listed, not folded under the study run
        assert run.data.tags["flatscore.cell_hash"] == cell["cell_hash"]
        for k in ("study", "domain", "precision", "model"):
            assert run.data.tags.get(k if k != "study" else "flatscore.study") == str(cell[k])
        for k in (
            "model",
            "precision",
            "domain",
            "budget",
            "repair",
            "seed",
            "trials",
            "split",
            "model_manifest_sha",
            "code_version",
            "agent",
            "backend",
            "n_tasks",
            "tau2_compat",
        ):
            assert run.data.params[k] == str(cell[k]), k
        assert json.loads(run.data.params["seeds"]) == cell["seeds"]
        for k, v in metrics.items():
            assert run.data.metrics[k] == pytest.approx(float(v)), k
        arts = {a.path for a in _client(uri).list_artifacts(rid, "cell")}
        assert arts == {"cell/cell.json", "cell/episodes.jsonl", "cell/metrics.json", "cell/channels_by_task.csv"}
        assert _download_text(uri, rid, "cell/episodes.jsonl") == (d / "episodes.jsonl").read_text()
        table = _download_text(uri, rid, "cell/channels_by_task.csv").splitlines()
        header, total = table[0].split(","), table[-1].split(",")
        assert total[0] == "__total__" and len(table) == 2 + cell["n_tasks"]
        for c in CHANNELS:
            assert int(total[header.index(c)]) == metrics[f"channel_{c}"]
        marker = json.loads((d / "tracking.json").read_text())
        assert marker["run_id"] == rid and marker["uri"] == uri and marker["content_sha256"] == content_sha256(d)
        # one trace per episode, linked to the run
        traces = _client(uri).search_traces(
            locations=[exp.experiment_id], filter_string=f"metadata.`mlflow.sourceRun` = '{rid}'"
        )
        assert len(traces) == metrics["n_episodes"]

    # rerun: a no-op, same ids, still 3 cell runs
    t = time.time()
    assert [log_cell(d, uri, "s1") for d in dirs] == ids
    rerun_s = time.time() - t
    _, study, cells = _runs(uri, "s1")
    assert len(study) == 1 and len(cells) == 3
    assert sync_results(results, uri, "s1") == {"cells": 3, "logged": 0, "up_to_date": 3, "failed": 0}

    # change one cell's episodes: same run, metrics and artifacts updated, nothing duplicated
    before = _client(uri).get_run(ids[1]).data.metrics["channel_invented_tool"]
    new = make_cell(results, precision="int4", domain="retail", budget=2, bump=1)
    assert new == dirs[1]
    after_expected = json.loads((new / "metrics.json").read_text())["channel_invented_tool"]
    assert after_expected != before
    assert is_pending(new, uri)
    assert sync_results(results, uri, "s1") == {"cells": 3, "logged": 1, "up_to_date": 2, "failed": 0}
    exp, study, cells = _runs(uri, "s1")
    assert len(study) == 1 and len(cells) == 3
    run = _client(uri).get_run(ids[1])
    assert run.data.metrics["channel_invented_tool"] == after_expected
    assert run.data.tags["flatscore.revision"] == "1"
    assert run.data.tags["flatscore.content_sha256"] == content_sha256(new)
    assert _download_text(uri, ids[1], "cell/episodes.jsonl") == (new / "episodes.jsonl").read_text()
    hist = _client(uri).get_metric_history(ids[1], "channel_invented_tool")
    assert [m.value for m in sorted(hist, key=lambda m: m.step)] == [before, after_expected]
    traces = _client(uri).search_traces(
        locations=[exp.experiment_id], filter_string=f"metadata.`mlflow.sourceRun` = '{ids[1]}'"
    )
    assert len(traces) == 6  # replaced, not appended
    assert rerun_s < 5, rerun_s


def test_workflow_cells_are_named_by_their_identity_not_their_shard_folder(results):
    """Every workflow cell folder is called shard<i>: the run name and flatscore.cell_id come from
    cell.json's identity (model/precision/domain/K<budget>/repair-<on|off>/shard<i>) instead."""
    uri = resolve_tracking_uri(None, results)
    specs = [("int4", "retail", 10, False, 0), ("full", "telecom", 2, True, 1)]
    expected = {}
    for precision, domain, budget, repair, shard in specs:
        d = make_cell(results, precision=precision, domain=domain, budget=budget, repair=repair)
        nested = results / "cells" / "demo-llama" / precision / domain / f"K{budget}"
        nested = nested / f"repair-{'on' if repair else 'off'}" / f"shard{shard}"
        nested.parent.mkdir(parents=True)
        d.rename(nested)
        name = f"demo-llama/{precision}/{domain}/K{budget}/repair-{'on' if repair else 'off'}/shard{shard}"
        expected[log_cell(nested, uri, "s1")] = name
    flat = make_cell(results, precision="int8", domain="retail")  # a flat CLI cell: named after its folder
    expected[log_cell(flat, uri, "s1")] = f"demo-llama/int8/retail/K10/repair-off/{flat.name}"
    _, _, cells = _runs(uri, "s1")
    got = {r.info.run_id: (r.info.run_name, r.data.tags["flatscore.cell_id"]) for r in cells}
    assert got == {rid: (name, name) for rid, name in expected.items()}


def test_traces_put_the_global_tracking_uri_back(results, monkeypatch):
    """The tracer exports to MLflow's global URI: switched for the traces, then restored as it was."""
    import mlflow

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(None)
    unset = mlflow.get_tracking_uri()
    log_cell(make_cell(results), resolve_tracking_uri(None, results), "s1", traces=True)
    assert "MLFLOW_TRACKING_URI" not in os.environ and mlflow.get_tracking_uri() == unset
    other = "sqlite:///" + str(results / "other.db")
    mlflow.set_tracking_uri(other)
    try:
        log_cell(make_cell(results, seed=1), resolve_tracking_uri(None, results), "s1", traces=True)
        assert os.environ["MLFLOW_TRACKING_URI"] == other and mlflow.get_tracking_uri() == other
    finally:
        mlflow.set_tracking_uri(None)


def test_planted_secret_never_stored(results, monkeypatch):
    planted = "sk-test-PLANTED123"
    monkeypatch.setenv("OPENAI_API_KEY", planted)
    uri = resolve_tracking_uri(None, results)
    d = make_cell(results, extra={"api_key": planted, "hf_token": planted + "b", "backend_auth": {"password": planted}})
    # the value also leaks into an episode's messages (an echoing tool, say)
    lines = (d / "episodes.jsonl").read_text().splitlines()
    ep = json.loads(lines[0])
    ep["messages"].append({"role": "tool", "name": "debug", "content": f"env OPENAI_API_KEY={planted}"})
    lines[0] = json.dumps(ep)
    (d / "episodes.jsonl").write_text("\n".join(lines) + "\n")

    rid = log_cell(d, uri, "s1")
    run = _client(uri).get_run(rid)
    assert "api_key" not in run.data.params and "hf_token" not in run.data.params
    assert run.data.params["model"] == "demo-llama"

    hits = []
    files = [p for p in results.rglob("*") if p.is_file() and "cells" not in p.relative_to(results).parts]
    assert any(p.name == "mlflow.db" for p in files) and any(p.name == "episodes.jsonl" for p in files)
    for p in files:
        if planted.encode() in p.read_bytes():
            hits.append(str(p))
    assert hits == []


# ---------------------------------------------------------------------------------------------
# concurrency: 8 processes, one fresh store

_WORKER = """
import sys, time, json
from flatscore.tracking import log_cell
import mlflow.tracking, mlflow.store.tracking.sqlalchemy_store  # imports before the start signal
t0 = float(sys.argv[3])
while time.time() < t0:
    time.sleep(0.005)
t = time.time()
run_id = log_cell(sys.argv[1], sys.argv[2], "conc")
print(json.dumps({"run_id": run_id, "seconds": time.time() - t}), flush=True)
import os
os._exit(0)  # skip interpreter teardown (seconds of CPU per process on a loaded 2-core box)
"""


@pytest.mark.slow
def test_eight_processes_one_fresh_store(tmp_path):
    results = tmp_path / "results"
    uri = resolve_tracking_uri(None, results)
    assert not sqlite_path(uri).exists()
    dirs = [make_cell(results, study="conc", seed=s, n_tasks=2, trials=2) for s in range(8)]
    start_at = time.time() + 15.0  # all import mlflow first, then hit the fresh store together
    t = time.time()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(d), uri, str(start_at)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for d in dirs
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    elapsed = time.time() - t
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err and "database is locked" not in err, err[-3000:]
    run_ids = [json.loads(o.strip().splitlines()[-1])["run_id"] for o, _ in outs]
    assert len(set(run_ids)) == 8
    _, study, cells = _runs(uri, "conc")
    assert len(study) == 1 and len(cells) == 8
    assert {r.info.run_id for r in cells} == set(run_ids)
    assert all(r.data.tags["flatscore.study_run_id"] == study[0].info.run_id for r in cells)
    import sqlalchemy
    from mlflow.store.db.utils import _verify_schema

    _verify_schema(sqlalchemy.create_engine(uri))
    per = sorted(json.loads(o.strip().splitlines()[-1])["seconds"] for o, _ in outs)
    print(
        f"8 processes into a fresh store: all done {elapsed - (start_at - t):.1f}s after the start signal; "
        f"per-process log_cell {per[0]:.1f}..{per[-1]:.1f}s"
    )


# ---------------------------------------------------------------------------------------------
# tracking server down, then up


def _start_server(port: int, root: Path) -> subprocess.Popen:
    root.mkdir(parents=True, exist_ok=True)
    db_uri = resolve_tracking_uri(None, root)
    ensure_store(db_uri)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            db_uri,
            "--artifacts-destination",
            str(root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(root / "server.log", "w"),
        cwd=root,
    )
    import urllib.request

    deadline = time.time() + 180
    while time.time() < deadline:
        assert proc.poll() is None, (root / "server.log").read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError("mlflow server did not come up:\n" + (root / "server.log").read_text()[-3000:])


def test_server_down_then_sync_once(tmp_path, template_db):
    results = tmp_path / "results"
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    d = make_cell(results, study="srv")

    t = time.time()
    assert try_log_cell(d, uri, "srv") is None
    down_s = time.time() - t
    assert down_s < 20, down_s
    assert not (d / "tracking.json").exists() and is_pending(d, uri)
    assert sync_results(results, uri, "srv") == {"cells": 1, "logged": 0, "up_to_date": 0, "failed": 1}

    server_root = tmp_path / "server"
    server_root.mkdir()
    import shutil

    shutil.copyfile(template_db, server_root / "mlflow.db")
    proc = _start_server(port, server_root)
    try:
        assert sync_results(results, uri, "srv") == {"cells": 1, "logged": 1, "up_to_date": 0, "failed": 0}
        marker = json.loads((d / "tracking.json").read_text())
        assert marker["uri"] == uri
        assert sync_results(results, uri, "srv") == {"cells": 1, "logged": 0, "up_to_date": 1, "failed": 0}
        # even bypassing the marker, logging again finds the same run
        assert log_cell(d, uri, "srv") == marker["run_id"]
        _, study, cells = _runs(uri, "srv")
        assert len(study) == 1 and len(cells) == 1 and cells[0].info.run_id == marker["run_id"]
        assert cells[0].data.metrics["n_episodes"] == 6
        arts = {a.path for a in _client(uri).list_artifacts(marker["run_id"], "cell")}
        assert "cell/episodes.jsonl" in arts
        assert list((server_root / "artifacts").rglob("episodes.jsonl"))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"try_log_cell against a closed port returned None in {down_s:.1f}s")


def test_sync_logs_into_the_studys_experiment_without_being_told(results):
    """The workflow's store marker names the study's experiment; a bare `flatscore sync` after an
    outage must log there, not into the schema's default experiment."""
    from flatscore.cli import main

    marker = results / "tracking" / "store.json"
    assert main(["init-tracking", "--results", str(results), "--experiment", "my-study", "--marker", str(marker)]) == 0
    make_cell(results, study="s9")
    assert main(["sync", "--results", str(results)]) == 0
    uri = resolve_tracking_uri(None, results)
    _, _, cells = _runs(uri, "my-study")
    assert len(cells) == 1
    assert _client(uri).get_experiment_by_name("flatscore") is None
