"""ManagedServer: health wait, clear startup failures, always kills its process group."""

from __future__ import annotations

import sys
import time

import httpx
import pytest

from flatscore.backends.serve import (
    HERMES_RESPONSE_TEMPLATE,
    ManagedServer,
    ServerStartupError,
    transformers_serve_command,
    vllm_command,
)
from flatscore.backends.testing import process_alive


@pytest.fixture
def alive():
    return process_alive


def test_starts_serves_and_stops(fake_server, tmp_path, alive):
    cmd, _ = fake_server("ok")
    with ManagedServer(cmd, port=0, log_path=tmp_path / "srv.log", startup_timeout_s=30) as srv:
        assert srv.port > 0
        assert httpx.get(srv.base_url + "/health").json() == {"status": "ok"}
        pid = srv.pid
        assert alive(pid)
    assert not alive(pid)
    with pytest.raises(httpx.HTTPError):
        httpx.get(srv.base_url + "/health", timeout=1)


def test_kills_when_body_raises_including_children(fake_server, tmp_path, alive):
    cmd, _ = fake_server("ok", "--child-pid-file", str(tmp_path / "child.pid"))
    with pytest.raises(ZeroDivisionError):
        with ManagedServer(cmd, log_path=tmp_path / "srv.log", startup_timeout_s=30) as srv:
            pid = srv.pid
            child = int((tmp_path / "child.pid").read_text())
            assert alive(pid) and alive(child)
            1 / 0
    assert not alive(pid)
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)


def test_stop_sends_the_server_one_sigterm(fake_server, tmp_path, alive):
    """The server hears SIGTERM once, from its guard: a signal to the whole group reached it
    directly and again through the guard, and a second SIGTERM makes uvicorn cut its graceful
    shutdown short. (Two that arrive together merge into one pending signal, so the count alone
    cannot show it; the sender can.) The fake server takes 1 s to end and ends by itself (exit
    0), before any SIGKILL."""
    terms = tmp_path / "terms"
    cmd, _ = fake_server("ok", "--term-log", str(terms))
    srv = ManagedServer(cmd, log_path=tmp_path / "srv.log", startup_timeout_s=30, stop_grace_s=10)
    with srv:
        pid = srv.pid
    assert terms.read_text().splitlines() == [f"term from {pid}"]  # pid: the guard, the server's parent
    assert srv.process.returncode == 0
    assert not alive(pid)


def test_sigterm_ignored_then_sigkill(fake_server, tmp_path, alive):
    cmd, _ = fake_server("ok", "--ignore-term")
    srv = ManagedServer(cmd, log_path=tmp_path / "srv.log", startup_timeout_s=30, stop_grace_s=0.5)
    with srv:
        pid = srv.pid
    assert not alive(pid)
    assert srv.process.returncode == -9


def test_startup_failure_reports_log_tail(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('fatal: no model at /nowhere', flush=True); sys.exit(3)"]
    with pytest.raises(ServerStartupError) as err:
        with ManagedServer(cmd, log_path=tmp_path / "srv.log", startup_timeout_s=30):
            pytest.fail("body must not run")
    assert "code 3" in str(err.value) and "fatal: no model at /nowhere" in str(err.value)


def test_never_healthy_times_out_and_is_killed(fake_server, tmp_path, alive):
    cmd, _ = fake_server("nohealth")
    srv = ManagedServer(cmd, log_path=tmp_path / "srv.log", startup_timeout_s=1.5)
    with pytest.raises(ServerStartupError, match="not healthy"):
        srv.start()
    assert srv.process.poll() is not None and not alive(srv.process.pid)


def test_vllm_command():
    cmd = vllm_command(
        "/models/q4", port=8001, quantization="compressed-tensors", max_model_len=4096, extra_args=["--enforce-eager"]
    )
    assert cmd[:3] == ["vllm", "serve", "/models/q4"]
    joined = " ".join(cmd)
    assert "--enable-auto-tool-choice" in cmd and "--tool-call-parser hermes" in joined
    assert "--port 8001" in joined and "--quantization compressed-tensors" in joined
    assert "--max-model-len 4096" in joined and cmd[-1] == "--enforce-eager"
    assert "--quantization" not in vllm_command("m")
    assert "--gpu-memory-utilization" not in vllm_command("m"), "a setting left out keeps vLLM's default"


def test_transformers_serve_command_uses_this_python():
    cmd = transformers_serve_command("/m", port=9)
    assert cmd[0] == sys.executable and "serve" in cmd and "/m" in cmd
    assert cmd[cmd.index("--port") + 1] == "9"


def test_hermes_response_template_parses_tool_calls(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    out = tok.parse_response(
        'ok\n<tool_call>\n{"name": "get_order", "arguments": {"order_id": "#W1"}}\n</tool_call><|im_end|>',
        HERMES_RESPONSE_TEMPLATE,
        prefix="<|im_start|>assistant\n",
    )
    assert out["tool_calls"][0]["function"] == {"name": "get_order", "arguments": {"order_id": "#W1"}}
    assert out["content"].strip() == "ok"
