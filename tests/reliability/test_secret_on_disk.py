"""No secret on disk: a server whose HTTP 400 body echoes the request headers (Authorization:
Bearer <key>) must not get the key into episodes.jsonl, any file of the cell, or the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

KEY = "sk-echo-0123456789abcdefSECRET"


class _EchoHeaders400(BaseHTTPRequestHandler):
    """Answers every request with 400 and a body that echoes the request's headers (as some
    proxies and servers do in their error pages)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"error": {"message": "bad request", "request_headers": dict(self.headers)}}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST  # noqa: N815

    def log_message(self, *args) -> None:  # quiet
        pass


@pytest.fixture
def echo_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHeaders400)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_echoed_authorization_header_never_reaches_disk_or_output(tmp_path, echo_server):
    from flatscore.domains import domain_class

    data = domain_class("retail").generate(tmp_path / "data", seed=1, n_tasks=20)
    out = tmp_path / "cell"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flatscore.cli",
            "episodes",
            "--domain",
            "retail",
            "--data",
            str(data),
            "--tasks",
            "first:2",
            "--max-steps",
            "6",
            "--agent",
            "llm",
            "--backend",
            "openai",
            "--base-url",
            echo_server,
            "--model",
            "fake",
            "--no-progress",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "OPENAI_API_KEY": KEY},
        timeout=300,
    )
    episodes = (out / "episodes.jsonl").read_text()
    assert "request_headers" in episodes, episodes[:2000]  # the server's echo did reach the records
    files = [p for p in out.rglob("*") if p.is_file()]
    hits = [str(p) for p in files if KEY.encode() in p.read_bytes() or KEY[8:].encode() in p.read_bytes()]
    assert hits == [], hits
    assert KEY[8:] not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "text",
    [
        'HTTP 400: {"Authorization": "Bearer tok-NOTINENV-123456"}',
        "Authorization: Bearer tok-NOTINENV-123456\r\nHost: x",
        "GET /v1?api_key=tok-NOTINENV-123456&x=1",
        "{'x-api-key': 'tok-NOTINENV-123456'}",
        'client_secret="tok-NOTINENV-123456"',
    ],
)
def test_header_like_secrets_are_redacted_without_the_environment(text):
    from flatscore.redact import REDACTED, redact

    redacted = redact(text)
    assert "NOTINENV" not in redacted and REDACTED in redacted, redacted


def test_records_written_by_the_store_are_redacted(tmp_path, monkeypatch):
    from flatscore.engine.records import EpisodeRecord
    from flatscore.engine.store import EpisodeStore

    monkeypatch.setenv("SOME_SERVICE_TOKEN", "planted-env-value-42")
    record = EpisodeRecord(
        task_id="t",
        trial=0,
        seed=0,
        domain="retail",
        budget=1,
        repair=False,
        termination="infrastructure_error",
        reward=0.0,
        scored=False,
        reward_info={"error": 'HTTP 400: {"Authorization": "Bearer tok-NOTINENV-123456"}'},
        errors_counted=0,
        channels={},
        error_events=[],
        agent_tool_calls=0,
        user_tool_calls=0,
        steps=0,
        messages=[{"role": "user", "content": "my value is planted-env-value-42"}],
        usage={"prompt_tokens": 3},
    )
    EpisodeStore(tmp_path / "episodes.jsonl").append(record)
    text = (tmp_path / "episodes.jsonl").read_text()
    assert "NOTINENV" not in text and "planted-env-value-42" not in text, text
    assert json.loads(text)["usage"] == {"prompt_tokens": 3}  # still the record, still JSON
