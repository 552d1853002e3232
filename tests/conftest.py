"""Shared fixtures: tau2-bench's reference data (skipped where absent) and synthetic domains."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TAU2 = REPO.parent / "shared" / "tau2"


def tau2_dir(domain: str) -> Path:
    """The real tau2-bench data of ``domain``; skips the test, saying why, where it is absent."""
    path = TAU2 / domain
    if not (path / "tasks_train.json").exists():
        pytest.skip(f"tau2-bench reference data not found at {path} (../shared/tau2 is absent on this machine)")
    return path


@pytest.fixture(scope="session")
def synthetic_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Seeded synthetic data of both domains, generated once per test session."""
    from flatscore.domains import domain_class

    root = tmp_path_factory.mktemp("synthetic")
    return {name: domain_class(name).generate(root / name, seed=7) for name in ("retail", "telecom")}


@pytest.fixture
def tau2_data():
    """``tau2_data(domain)``: the real tau2-bench data folder, or skip saying why (see tau2_dir)."""
    return tau2_dir


#: Where .ci/postgres/setup.sh leaves the PostgreSQL backend-store URI (password included: the
#: file is readable by root only, and the server listens on localhost).
PG_URI_FILE = Path(os.environ.get("FLATSCORE_PG_URI_FILE", "/var/lib/flatscore-ci/postgres.uri"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_pg_server(tmp_path_factory: pytest.TempPathFactory):
    """A real ``mlflow server`` on a PostgreSQL backend store (the cluster deployment of
    docs/scale-out.md), for the session; skips, saying why, where PostgreSQL was not started by
    .ci/postgres/setup.sh. Yields the server's http URL."""
    if not PG_URI_FILE.is_file():
        pytest.skip(f"no PostgreSQL for the tracking server: {PG_URI_FILE} absent (run .ci/postgres/setup.sh)")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip("psycopg2 is not installed: the tracking server cannot reach PostgreSQL")
    backend = PG_URI_FILE.read_text().strip()
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    log = open(root / "server.log", "w")  # noqa: SIM115 - open for the server's whole life
    proc = subprocess.Popen(
        ["mlflow", "server", "--backend-store-uri", backend, "--artifacts-destination", str(root / "artifacts")]
        + ["--host", "127.0.0.1", "--port", str(port), "--workers", "2"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"mlflow server exited ({proc.returncode}): {(root / 'server.log').read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGTERM)
        pytest.fail("mlflow server on PostgreSQL did not answer /health within 120 s")
    yield url
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()
