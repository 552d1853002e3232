"""A stand-in for an OpenAI-compatible server, in a thread of the test process.

Tests of what flatscore does with a server's answers (its channels, its user simulator, its
error handling) need the answers fixed in advance; a real model cannot give a chosen malformed
or overflowing answer on demand. Every test that needs one uses this class, so the HTTP
plumbing lives once. Tests import it as ``from stub_openai import StubOpenAIServer`` (pytest
puts ``tests/`` on the path for its root conftest).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: ``reply(request_body, n)`` -> (HTTP status, JSON payload) for the n-th request (0-based).
Reply = Callable[[dict[str, Any], int], tuple[int, dict[str, Any]]]


class StubOpenAIServer:
    """Answers each POST with ``reply``; keeps every request body in ``requests``."""

    def __init__(self, reply: Reply) -> None:
        self.requests: list[dict[str, Any]] = []
        lock, stub = threading.Lock(), self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with lock:
                    n = len(stub.requests)
                    stub.requests.append(body)
                status, payload = reply(body, n)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @classmethod
    def answering(cls, answers: list[dict[str, Any]]) -> StubOpenAIServer:
        """A server answering 200 with the next of ``answers``; the last one repeats."""
        answers = list(answers)
        return cls(lambda body, n: (200, answers[min(n, len(answers) - 1)]))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
