"""Which server to start for a model, and the announcement protocol of a shared server.

A Snakemake service job (``flatscore serve``) starts one server per (model, precision), writes
an announcement file (``starting``, then ``ready`` with its URL once healthy, ``failed`` if it
dies) and serves until it is stopped; the episodes jobs wait for ``ready`` and talk to that URL.
A job may instead start its own server for its lifetime (``flatscore episodes --serve``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from flatscore.atomic_write import write_json_atomic
from flatscore.backends.serve import ManagedServer, transformers_serve_command, transformers_serve_env, vllm_command


class ServerNotReadyError(RuntimeError):
    """The announced server did not become ready in time, or announced that it failed."""


@dataclass(frozen=True)
class ServerOptions:
    """How to serve a model: the server kind, its start-up wait, and vLLM's settings."""

    kind: Literal["vllm", "transformers"]
    startup_timeout_s: float = 900.0
    served_model: str | None = None
    vllm_gpu_memory_utilization: float = 0.9
    vllm_max_model_len: int | None = None
    vllm_tensor_parallel_size: int = 1
    vllm_args: tuple[str, ...] = field(default_factory=tuple)


def build_server(model: str, options: ServerOptions, log_dir: Path) -> ManagedServer:
    """The OpenAI-compatible server of ``options.kind`` for ``model`` (not started yet)."""
    if options.kind == "vllm":
        command = vllm_command(
            model,
            gpu_memory_utilization=options.vllm_gpu_memory_utilization,
            max_model_len=options.vllm_max_model_len,
            tensor_parallel_size=options.vllm_tensor_parallel_size,
            served_model_name=options.served_model or model,
            extra_args=list(options.vllm_args),
        )
        env = None
    else:
        command = transformers_serve_command(model)
        env = transformers_serve_env(log_dir / ".hf-cache")
    return ManagedServer(command, log_path=log_dir / "server.log", startup_timeout_s=options.startup_timeout_s, env=env)


def await_announced_server(path: Path, timeout_s: float) -> str:
    """Wait until the server announced in ``path`` is ready; return its base URL."""
    deadline = time.monotonic() + timeout_s
    status = "missing"
    while time.monotonic() < deadline:
        try:
            announced = json.loads(path.read_text())
            status = announced.get("status", "ready")
        except (OSError, ValueError):
            announced, status = None, "missing"
        if announced and status == "ready":
            return announced["base_url"]
        if status == "failed":
            break
        time.sleep(1.0)
    raise ServerNotReadyError(
        f"the server announced in {path} is not ready (status: {status}) after {timeout_s:.0f} s; see its log"
    )


def serve_until_stopped(server: ManagedServer, announce: Path, info: dict[str, Any], stop: threading.Event) -> None:
    """Start ``server``, announce it, and keep it up until ``stop`` is set or it dies.

    Snakemake starts a service's consumers at once and expects its output right away, so the
    address is announced first as ``starting``; consumers wait until it says ``ready``.
    """
    write_json_atomic(announce, {**info, "status": "starting"})
    try:
        with server:
            write_json_atomic(announce, {**info, "status": "ready", "pid": server.pid})
            print(f"serving {info['model']} at {server.base_url}", flush=True)
            while not stop.wait(1.0):
                if server.process is not None and server.process.poll() is not None:
                    raise RuntimeError(
                        f"the {info['kind']} server exited (code {server.process.returncode}); see its log"
                    )
    except BaseException:
        write_json_atomic(announce, {**info, "status": "failed"})
        raise
