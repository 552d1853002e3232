"""The server guard: a managed server never outlives a starter that was killed without cleaning up.

The case that asked for it: Snakemake SIGKILLs a service job (``flatscore serve``) when a job of
its group fails, and the vLLM server started from it kept running. These tests kill starters the
same way, with a fake server that has a child of its own (as vLLM has its workers).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flatscore.backends.server_guard import guarded_command
from flatscore.backends.testing import process_alive


def session_members(sid: int) -> list[int]:
    """Live processes of session ``sid`` (a managed server's guard, the server, its children)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == sid and process_alive(int(entry)):
                members.append(int(entry))
        except (ProcessLookupError, PermissionError):
            continue
    return members


def wait_gone(sid: int, timeout_s: float = 20.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


STARTER = """
import sys, time
from pathlib import Path
from flatscore.backends.serve import ManagedServer
from flatscore.backends.testing import fake_server_command, write_fake_server

tmp = Path(sys.argv[1])
cmd = fake_server_command(write_fake_server(tmp / "fake.py"), tmp / "fake.log", "ok",
                          "--child-pid-file", str(tmp / "child.pid"))
with ManagedServer(cmd, log_path=tmp / "srv.log", startup_timeout_s=60) as srv:
    (tmp / "server.pid").write_text(str(srv.pid))
    time.sleep(3600)
"""


def wait_for(path: Path, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert path.exists(), f"{path} never appeared"
    return path.read_text()


def test_server_and_its_children_end_when_the_starter_is_sigkilled(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path)])
    try:
        sid = int(wait_for(tmp_path / "server.pid"))
        wait_for(tmp_path / "child.pid")
        assert len(session_members(sid)) >= 3, "guard, fake server and its child should all run"
        starter.send_signal(signal.SIGKILL)
        starter.wait()
        assert wait_gone(sid) == [], "the server's session outlived its killed starter"
        assert "is gone; ending the server" in (tmp_path / "srv.log").read_text()
    finally:
        starter.kill()


@pytest.mark.parametrize(
    ("code", "expected"),
    [("import sys; sys.exit(3)", 3), ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", -9)],
)
def test_guard_exits_as_its_server_did(code, expected):
    """A starter reads the server's own exit status through the guard (restarts and startup
    errors report it)."""
    done = subprocess.run(guarded_command([sys.executable, "-c", code]), timeout=60)
    assert done.returncode == expected


def test_guard_passes_sigterm_on(tmp_path):
    marker = tmp_path / "term"
    server = f"import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: (open({str(marker)!r}, 'w').close(), sys.exit(0)))\ntime.sleep(60)"
    guard = subprocess.Popen(guarded_command([sys.executable, "-c", server]))
    time.sleep(2.0)
    guard.send_signal(signal.SIGTERM)
    assert guard.wait(timeout=30) == 0
    assert marker.exists()


def test_usage_error_names_the_form():
    done = subprocess.run(
        [sys.executable, "-m", "flatscore.backends.server_guard", "notapid", "sleep", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "STARTER_PID -- COMMAND" in done.stderr


SERVICE_SNAKEFILE = """
rule all:
    input: "done.txt"

rule serve:
    output: service("server.json")
    group: "inference"
    shell: "exec {python} starter.py ."

rule consumer:
    input: "server.json"
    output: "done.txt"
    group: "inference"
    shell: "sleep 5; exit 1"
"""


@pytest.mark.skipif(shutil.which("snakemake") is None, reason="snakemake is not installed")
def test_failed_group_leaves_no_server_running(tmp_path):
    """Snakemake (9.x, local executor) SIGKILLs a service job's shell when a job of its group
    fails; the server started from that service job must end too."""
    (tmp_path / "starter.py").write_text(
        STARTER.replace(
            '(tmp / "server.pid").write_text(str(srv.pid))',
            '(tmp / "server.pid").write_text(str(srv.pid)); Path("server.json").write_text("{}")',
        )
    )
    (tmp_path / "Snakefile").write_text(SERVICE_SNAKEFILE.replace("{python}", sys.executable))
    run = subprocess.run(
        ["snakemake", "--cores", "2", "--latency-wait", "60"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode != 0, "the consumer fails by design"
    sid = int((tmp_path / "server.pid").read_text())
    assert wait_gone(sid) == [], "a server of the failed group is still running"
