"""An OpenAI-compatible chat-completions client (vLLM, ``transformers serve``, llama.cpp...).

Each :class:`ModelRequest` becomes one ``POST {base_url}/v1/chat/completions`` with the
messages, the tools (``tool_choice: "auto"`` when there are tools), ``seed``,
``max_tokens`` and ``temperature``; ``extra_body`` is merged into every body (e.g. vLLM's
``{"top_k": 1}`` or ``chat_template_kwargs``). Up to ``max_in_flight`` requests are on the
wire at once (a thread pool over one pooled ``httpx.Client``), answers come back in order.

The answer keeps ``choices[0].message.content`` as ``text`` and the server's parsed
``tool_calls`` (e.g. vLLM ``--tool-call-parser hermes``) as ``tool_calls``, so the agent can
use them or parse the text itself; ``server`` keeps the message's ``content`` and
``tool_calls`` exactly as received plus ``finish_reason`` (:func:`server_answer`), so the agent
can tell a server parser's misses and off-format answers apart and the log can be re-parsed
offline; ``usage`` fills the token counts (``prefill_tokens`` = prompt tokens minus
``usage.prompt_tokens_details.cached_tokens`` when the server reports it).

Failures: connection errors, timeouts, HTTP 5xx / 429 and unusable bodies (not JSON, no
``choices``) are retried with exponential backoff (``backoff_s * 2**attempt``, at most
``max_retries`` retries); then :class:`InfrastructureError`. Other 4xx answers are not
retried (the request itself is wrong) and raise InfrastructureError at once; a 400 saying the
prompt exceeds the model's maximum context length raises :class:`ContextOverflowError` (the
model's limit, scored as a failed episode, not an infrastructure failure). A refused connection
(nothing listening: the server is being restarted) is waited out for up to ``outage_s`` before
it counts as a failed attempt, so a served model that is killed and restarted costs no episode. Every attempt
of one request carries the same ``X-Request-Id`` header so a server's logs can tell retries
from new requests.

The API key is read from the environment variable named by ``api_key_env`` (no key: no
``Authorization`` header); it is never logged, never in ``describe()`` or ``repr()``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from flatscore.redact import redact

from .base import Backend, ContextOverflowError, InfrastructureError, ModelRequest, ModelResponse

_RETRY_STATUS = {408, 409, 425, 429}
#: How vLLM (and OpenAI) word a prompt longer than the model's context window (HTTP 400).
_CONTEXT_OVERFLOW = "maximum context length"


class _Retryable(Exception):
    pass


class _ServerDown(_Retryable):
    """Nothing listens at the server's address (it is being restarted, or gone)."""


def _body_excerpt(r: httpx.Response, limit: int) -> str:
    """The start of a response body for an error text, secrets redacted *before* cutting (a key
    cut in half would no longer match the environment's value). Why: error pages may echo the
    request headers, ``Authorization: Bearer <key>`` included, and these texts reach the episodes."""
    return redact(r.text[: limit * 20])[:limit]


def server_answer(message: dict[str, Any], choice: Any) -> dict[str, Any]:
    """What the server answered, verbatim and compact: ``content`` and ``tool_calls`` only where the
    message has the key (vLLM leaves ``tool_calls`` out when there are none), and ``finish_reason``
    (``length`` tells a call cut by ``max_tokens`` from a model's format error). Why verbatim: the
    agent's parsing may change; the answer is the evidence."""
    out = {k: message[k] for k in ("content", "tool_calls") if k in message}
    out["finish_reason"] = choice.get("finish_reason") if isinstance(choice, dict) else None
    return out


class OpenAIBackend(Backend):
    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        max_in_flight: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 5,
        backoff_s: float = 0.5,
        temperature: float = 0.0,
        extra_body: dict[str, Any] | None = None,
        max_backoff_s: float = 30.0,
        outage_s: float = 0.0,
    ) -> None:
        base = base_url.rstrip("/").removesuffix("/v1")
        self.base_url = base
        self._url = base + "/v1/chat/completions"
        self.model = model
        self.api_key_env = api_key_env
        self.__api_key = os.environ.get(api_key_env) if api_key_env else None
        self.max_in_flight = max(1, int(max_in_flight))
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        #: how long refused connections are waited out (a restarting server), beyond max_retries
        self.outage_s = float(outage_s)
        self.temperature = float(temperature)
        self.extra_body = dict(extra_body or {})
        headers = {"Content-Type": "application/json"}
        if self.__api_key:
            headers["Authorization"] = f"Bearer {self.__api_key}"
        self._client = httpx.Client(
            headers=headers,
            timeout=httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)),
            limits=httpx.Limits(max_connections=self.max_in_flight, max_keepalive_connections=self.max_in_flight),
        )
        self._pool = ThreadPoolExecutor(max_workers=self.max_in_flight, thread_name_prefix="openai-backend")
        self._lock = threading.Lock()
        #: attempts made in total (first tries + retries), for tests and monitoring
        self.attempts = 0
        self.retries = 0

    def __repr__(self) -> str:
        return f"OpenAIBackend(base_url={self.base_url!r}, model={self.model!r})"

    # ----- request building -----

    def body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            "max_tokens": int(request.max_new_tokens),
            "temperature": self.temperature,
            "seed": int(request.seed),
            "stream": False,
        }
        if request.tools:
            body["tools"] = request.tools
            body["tool_choice"] = "auto"
        body.update(self.extra_body)
        return body

    @staticmethod
    def encode(body: dict[str, Any]) -> bytes:
        """The request body as sent: serialised once per request (the id is a digest of these bytes)."""
        return json.dumps(body, ensure_ascii=False, separators=(",", ":"), default=str).encode()

    @staticmethod
    def _rid(request: ModelRequest, data: bytes) -> str:
        return f"{request.cache_key or 'req'}-{request.seed}-{hashlib.sha256(data).hexdigest()[:16]}"

    def request_id(self, request: ModelRequest, body: dict[str, Any]) -> str:
        """The ``X-Request-Id`` of every attempt of ``request`` (conversation, seed, body digest)."""
        return self._rid(request, self.encode(body))

    # ----- the call -----

    def _once(self, data: bytes, rid: str) -> ModelResponse:
        t0 = time.perf_counter()
        try:
            r = self._client.post(self._url, content=data, headers={"X-Request-Id": rid})
        except httpx.ConnectError as exc:  # refused: no server at the address right now
            raise _ServerDown(redact(f"{type(exc).__name__}: {exc}")) from exc
        except httpx.HTTPError as exc:  # read errors, timeouts, protocol errors
            raise _Retryable(redact(f"{type(exc).__name__}: {exc}")) from exc
        if r.status_code >= 500 or r.status_code in _RETRY_STATUS:
            raise _Retryable(f"HTTP {r.status_code}: {_body_excerpt(r, 200)}")
        if r.status_code == 400 and _CONTEXT_OVERFLOW in r.text:
            raise ContextOverflowError(f"{self.base_url}: HTTP 400: {_body_excerpt(r, 300)}")
        if r.status_code >= 400:
            raise InfrastructureError(f"{self.base_url}: HTTP {r.status_code} (not retried): {_body_excerpt(r, 500)}")
        try:
            data = r.json()
            choice = data["choices"][0]
            message = choice["message"]
            if not isinstance(message, dict):
                raise TypeError("message is not an object")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Retryable(f"unusable response body ({exc}): {_body_excerpt(r, 200)}") from exc
        usage = data.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        cached = int(((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0)
        tool_calls = message.get("tool_calls") or None
        if tool_calls is not None and not isinstance(tool_calls, list):
            tool_calls = [tool_calls]
        content = message.get("content") or ""
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
            content = "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
        elif not isinstance(content, str):
            content = str(content)
        return ModelResponse(
            text=content,
            tool_calls=tool_calls,
            prompt_tokens=prompt,
            completion_tokens=int(usage.get("completion_tokens") or 0),
            prefill_tokens=max(0, prompt - cached),
            seconds=time.perf_counter() - t0,
            server=server_answer(message, choice),
        )

    def _call(self, request: ModelRequest) -> ModelResponse:
        """One request with its retries. Refused connections (the server restarting) are retried
        for up to ``outage_s`` without using up ``max_retries``, which count the other failures."""
        data = self.encode(self.body(request))
        rid = self._rid(request, data)
        last = "no attempt"
        attempt = 0
        down_since: float | None = None
        while True:
            with self._lock:
                self.attempts += 1
                if attempt or down_since is not None:
                    self.retries += 1
            try:
                return self._once(data, rid)
            except _ServerDown as exc:
                last = str(exc)
                down_since = down_since if down_since is not None else time.monotonic()
                if time.monotonic() - down_since < self.outage_s:
                    time.sleep(min(self.backoff_s * 4, self.max_backoff_s))
                    continue
            except _Retryable as exc:
                last = str(exc)
                down_since = None
            if attempt >= self.max_retries:
                break
            time.sleep(min(self.backoff_s * (2**attempt), self.max_backoff_s))
            attempt += 1
        raise InfrastructureError(
            f"{self.base_url}: request failed after {self.max_retries + 1} attempts; last error: {last}"
        )

    def generate_each(self, requests: list[ModelRequest]) -> list[ModelResponse | InfrastructureError]:
        """Every request on the wire at once (up to ``max_in_flight``); each answer or failure on its own."""
        futures = [self._pool.submit(self._call, r) for r in requests]
        out: list[ModelResponse | InfrastructureError] = []
        for future in futures:
            try:
                out.append(future.result())
            except InfrastructureError as exc:
                out.append(exc)
            except Exception as exc:  # noqa: BLE001 - any other failure of a request is the infrastructure's
                out.append(InfrastructureError(f"{self.base_url}: request failed: {exc!r}"))
        return out

    def generate(self, requests: list[ModelRequest]) -> list[ModelResponse]:
        if not requests:
            return []
        futures = [self._pool.submit(self._call, r) for r in requests]
        results: list[ModelResponse] = []
        errors: list[BaseException] = []
        for f in futures:
            try:
                results.append(f.result())
            except BaseException as exc:  # noqa: BLE001 - collected, re-raised below
                errors.append(exc)
        if errors:
            first = errors[0]
            if isinstance(first, InfrastructureError):
                raise InfrastructureError(f"{len(errors)}/{len(requests)} requests failed: {first}") from first
            raise InfrastructureError(f"{len(errors)}/{len(requests)} requests failed: {first!r}") from first
        return results

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._client.close()

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "base_url": self.base_url,
            "model": self.model,
            "temperature": self.temperature,
            "max_in_flight": self.max_in_flight,
            "extra_body": {k: v for k, v in self.extra_body.items() if "key" not in k.lower()},
        }


__all__ = ["OpenAIBackend", "server_answer"]
