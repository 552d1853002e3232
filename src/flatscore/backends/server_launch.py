"""Which server to start for a model, and the announcement protocol of a shared server.

A Snakemake service job (``flatscore serve``) starts one server per (model, precision), writes
an announcement file (``starting``, then ``ready`` with its URL once healthy, ``failed`` if it
dies) and serves until it is stopped; the episodes jobs wait for ``ready`` and talk to that URL.
A job may instead start its own server for its lifetime (``flatscore episodes --serve``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flatscore.atomic_write import write_json_atomic
from flatscore.backends.serve import (
    ManagedServer,
    ServerStartupError,
    transformers_serve_command,
    transformers_serve_env,
    vllm_command,
)
from flatscore.backends.vllm_env import read_marker, venv_python, vllm_cpu_env


class ServerNotReadyError(RuntimeError):
    """The announced server did not become ready in time, or announced that it failed."""


@dataclass(frozen=True)
class ServerOptions:
    """How to serve a model: the server kind, where vLLM runs, and the model's serving settings.

    A setting left None passes no flag (the server's own default). :meth:`describe` is what
    enters each cell's identity and MLflow params: everything that can change what the agent
    receives (parser, template, dtype, context length, extra arguments), nothing about where.
    """

    kind: Literal["vllm", "transformers"]
    startup_timeout_s: float = 900.0
    served_model: str | None = None
    #: vLLM: "gpu" runs ``vllm`` from PATH (the inference container); "cpu" runs the CPU build
    #: from ``venv`` (built by ``flatscore build-vllm-env``)
    device: Literal["gpu", "cpu"] = "gpu"
    venv: str | None = None
    kv_cache_gib: int = 2
    tool_call_parser: str = "hermes"
    chat_template: str | None = None
    reasoning_parser: str | None = None
    dtype: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    tensor_parallel_size: int | None = None
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> dict[str, Any]:
        """The server settings that can change the agent's answers (identity, MLflow params)."""
        out: dict[str, Any] = {"server": self.kind, "server_dtype": self.dtype or "auto"}
        if self.kind == "vllm":
            out.update(
                server_device=self.device,
                tool_call_parser=self.tool_call_parser,
                chat_template_sha256=_file_digest(self.chat_template),
                reasoning_parser=self.reasoning_parser,
                max_model_len=self.max_model_len,
                server_args=" ".join(self.extra_args),
            )
        return out


def _file_digest(path: str | None) -> str | None:
    """A chat template enters the identity by its bytes, not its path."""
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    except OSError as exc:
        raise ValueError(f"--chat-template: cannot read {path}: {exc.strerror}") from None


def build_server(model: str, options: ServerOptions, log_dir: Path) -> ManagedServer:
    """The OpenAI-compatible server of ``options.kind`` for ``model`` (not started yet)."""
    if options.kind == "vllm":
        python = None
        env = None
        if options.device == "cpu":
            if not options.venv:
                raise ValueError("vLLM on the CPU needs its environment (--vllm-venv; see flatscore build-vllm-env)")
            python = venv_python(options.venv)
            if read_marker(options.venv) is None or not python.exists():
                raise ServerStartupError(
                    f"no vLLM environment at {options.venv}: build it with "
                    f"`flatscore build-vllm-env --venv {options.venv}` (the workflow's vllm_env rule does)"
                )
            env = vllm_cpu_env(options.venv, options.kv_cache_gib, log_dir / ".hf-cache")
        command = vllm_command(
            model,
            gpu_memory_utilization=options.gpu_memory_utilization,
            max_model_len=options.max_model_len,
            tensor_parallel_size=options.tensor_parallel_size,
            served_model_name=options.served_model or model,
            tool_call_parser=options.tool_call_parser,
            chat_template=options.chat_template,
            reasoning_parser=options.reasoning_parser,
            dtype=options.dtype,
            extra_args=list(options.extra_args),
            python=python,
        )
    else:
        command = transformers_serve_command(model, dtype=options.dtype or "auto")
        env = transformers_serve_env(log_dir / ".hf-cache")
    return ManagedServer(command, log_path=log_dir / "server.log", startup_timeout_s=options.startup_timeout_s, env=env)


def announced_server(path: Path, timeout_s: float) -> dict[str, Any]:
    """Wait until the server announced in ``path`` is ready; return its announcement
    (``base_url``, ``model``, ``kind`` and the ``settings`` that enter each cell's identity)."""
    deadline = time.monotonic() + timeout_s
    status = "missing"
    while time.monotonic() < deadline:
        try:
            announced = json.loads(path.read_text())
            status = announced.get("status", "ready")
        except (OSError, ValueError):
            announced, status = None, "missing"
        if announced and status == "ready":
            return announced
        if status == "failed":
            break
        time.sleep(1.0)
    raise ServerNotReadyError(
        f"the server announced in {path} is not ready (status: {status}) after {timeout_s:.0f} s; see its log"
    )


def serve_until_stopped(
    server: ManagedServer,
    announce: Path,
    info: dict[str, Any],
    stop: threading.Event,
    max_restarts: int = 3,
    preflight: Callable[[], None] | None = None,
) -> None:
    """Start ``server``, announce it, and keep it up until ``stop`` is set.

    Snakemake starts a service's consumers at once and expects its output right away, so the
    address is announced first as ``starting``; consumers wait until it says ``ready``. A server
    that dies (killed, out of memory) is started again on the same port, up to ``max_restarts``
    times, announced as ``restarting`` meanwhile: its consumers' requests fail over that gap and
    are retried (the OpenAI backend waits out an outage), so a cell loses no episode to it.
    ``preflight`` (checks that may refuse the model, e.g. a ~10-s kernel probe) runs after the
    ``starting`` announcement, so that it never delays it past Snakemake's --latency-wait (5 s);
    a refusal is announced ``failed`` like any failed start.
    """
    write_json_atomic(announce, {**info, "status": "starting"})
    restarts = 0
    try:
        if preflight is not None:
            preflight()
        with server:
            write_json_atomic(announce, {**info, "status": "ready", "pid": server.pid})
            print(f"serving {info['model']} at {server.base_url}", flush=True)
            while not stop.wait(1.0):
                if server.process is None or server.process.poll() is None:
                    continue
                code = server.process.returncode
                if restarts >= max_restarts:
                    raise RuntimeError(
                        f"the {info['kind']} server exited (code {code}) after {restarts} restarts; see its log"
                    )
                restarts += 1
                print(f"the {info['kind']} server exited (code {code}); restart {restarts}/{max_restarts}", flush=True)
                write_json_atomic(announce, {**info, "status": "restarting", "restarts": restarts})
                server.restart()
                write_json_atomic(announce, {**info, "status": "ready", "pid": server.pid, "restarts": restarts})
                print(f"serving {info['model']} at {server.base_url} again", flush=True)
    except BaseException:
        write_json_atomic(announce, {**info, "status": "failed"})
        raise
