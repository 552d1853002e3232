"""MLflow faults through the command line: tracking server down, sqlite store locked.

Beyond tests/tracking (which calls try_log_cell/sync_results in-process): here the real
`flatscore episodes --log-mlflow` and `flatscore sync` commands run as processes.
"""

from __future__ import annotations

import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

CELL = [
    "episodes",
    "--domain",
    "retail",
    "--agent",
    "noisy",
    "--noise",
    "invented_tool=0.2",
    "--tasks",
    "first:5",
    "--trials",
    "2",
    "--budget",
    "3",
    "--seed",
    "4",
    "--no-progress",
    "--experiment",
    "rel",
]


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flatscore.cli", *args], capture_output=True, text=True, **kwargs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def retail(tmp_path_factory) -> Path:
    from flatscore.domains import domain_class

    return domain_class("retail").generate(tmp_path_factory.mktemp("mlf_data") / "retail", seed=5)


@pytest.fixture(scope="module")
def template_db(tmp_path_factory) -> Path:
    """A migrated empty store (migrations cost seconds; copies are instant)."""
    from flatscore.tracking import ensure_store, resolve_tracking_uri
    from flatscore.tracking.store import sqlite_path

    uri = resolve_tracking_uri(None, tmp_path_factory.mktemp("mlf_template"))
    ensure_store(uri)
    return sqlite_path(uri)


def _cell_runs(uri: str, experiment: str = "rel") -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return [
        r
        for r in client.search_runs([exp.experiment_id], max_results=1000)
        if r.data.tags.get("flatscore.kind") == "cell"
    ]


@pytest.mark.slow
def test_closed_port_then_sync_to_a_real_server_logs_once(tmp_path, retail, template_db):
    results = tmp_path / "results"
    out = results / "cells" / "c1"
    port = _free_port()
    uri = f"http://127.0.0.1:{port}"
    t0 = time.time()
    down = _cli(*CELL, "--data", str(retail), "--out", str(out), "--log-mlflow", "--tracking-uri", uri)
    down_s = time.time() - t0
    assert down.returncode == 0, down.stderr[-2000:]
    assert "store unreachable; results kept on disk" in down.stdout
    assert "Traceback" not in down.stdout
    for name in ("cell.json", "episodes.jsonl", "metrics.json"):
        assert (out / name).exists(), name
    assert not (out / "tracking.json").exists()
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    server_root = tmp_path / "server"
    server_root.mkdir()
    shutil.copyfile(template_db, server_root / "mlflow.db")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{server_root / 'mlflow.db'}",
            "--artifacts-destination",
            str(server_root / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(server_root / "server.log", "w"),
        cwd=server_root,
    )
    try:
        import urllib.request

        deadline = time.time() + 180
        while True:
            assert proc.poll() is None and time.time() < deadline, (server_root / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        first = _cli("sync", "--results", str(results), "--tracking-uri", uri, "--experiment", "rel")
        assert first.returncode == 0, first.stderr[-2000:]
        assert "'logged': 1" in first.stdout, first.stdout
        second = _cli("sync", "--results", str(results), "--tracking-uri", uri, "--experiment", "rel")
        assert "'logged': 0" in second.stdout and "'up_to_date': 1" in second.stdout, second.stdout
        runs = _cell_runs(uri)
        assert len(runs) == 1
        metrics = json.loads((out / "metrics.json").read_text())
        assert runs[0].data.metrics["n_episodes"] == metrics["n_episodes"] == 10
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    for name, data in before.items():  # sync added its marker, changed no result
        assert (out / name).read_bytes() == data, name
    print(
        f"\nFIGURE mlflow down: episodes exit 0 after {down_s:.1f}s against a closed port; "
        f"sync logged 1, resync 0 (up to date), runs in store 1"
    )


class _ExclusiveLock:
    """Hold ``BEGIN EXCLUSIVE`` on a sqlite file (from this process) until released."""

    def __init__(self, db: Path) -> None:
        self.conn = sqlite3.connect(str(db), isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN EXCLUSIVE")

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


@pytest.mark.slow
def test_locked_sqlite_store_during_logging_then_logged(tmp_path, retail, template_db):
    results = tmp_path / "results"
    results.mkdir()
    db = results / "mlflow.db"
    shutil.copyfile(template_db, db)
    uri = f"sqlite:///{db}"

    # 1) locked for a few seconds while the cell logs: the bounded lock retries wait it out
    out1 = results / "cells" / "held"
    lock = _ExclusiveLock(db)
    timer = threading.Timer(6.0, lock.release)
    timer.start()
    t0 = time.time()
    r1 = _cli(*CELL, "--data", str(retail), "--out", str(out1), "--log-mlflow")
    held_s = time.time() - t0
    timer.join()
    assert r1.returncode == 0, r1.stderr[-3000:]
    assert "Traceback" not in r1.stdout + r1.stderr
    if "logged run" not in r1.stdout:  # the lock outlasted the retries: must be pending, then synced
        assert "results kept on disk" in r1.stdout

    # 2) locked for the whole run: the cell finishes anyway, stays pending, `flatscore sync` logs it
    out2 = results / "cells" / "locked"
    lock = _ExclusiveLock(db)
    try:
        t0 = time.time()
        r2 = _cli(*CELL, "--seed", "9", "--data", str(retail), "--out", str(out2), "--log-mlflow", timeout=400)
        locked_s = time.time() - t0
    finally:
        lock.release()
    assert r2.returncode == 0, r2.stderr[-3000:]
    assert "Traceback" not in r2.stdout + r2.stderr
    assert "store unreachable; results kept on disk" in r2.stdout
    assert (out2 / "metrics.json").exists() and not (out2 / "tracking.json").exists()

    sync = _cli("sync", "--results", str(results), "--experiment", "rel")
    assert sync.returncode == 0, sync.stderr[-2000:]
    again = _cli("sync", "--results", str(results), "--experiment", "rel")
    assert "'logged': 0" in again.stdout and "'up_to_date': 2" in again.stdout, again.stdout
    runs = _cell_runs(uri)
    hashes = sorted(r.data.tags["flatscore.cell_hash"] for r in runs)
    expected = sorted(json.loads((d / "cell.json").read_text())["cell_hash"] for d in (out1, out2))
    assert hashes == expected, "each cell logged exactly once"
    print(
        f"\nFIGURE sqlite locked: 6 s lock -> cell {'logged in-run' if 'logged run' in r1.stdout else 'pending'} "
        f"({held_s:.1f}s); lock held all run -> exit 0, pending after {locked_s:.1f}s, sync: {sync.stdout.strip()}"
    )
