"""``serve``: run a model's OpenAI-compatible server as a service job; the shared server options."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from flatscore.backends.server_launch import ServerOptions


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose and configure a model's server (``serve`` and ``episodes --serve``)."""
    parser.add_argument(
        "--serve",
        choices=["vllm", "transformers"],
        default=None,
        help="start the model's OpenAI-compatible server for this job (health-waited, always stopped)",
    )
    parser.add_argument("--serve-timeout", type=float, default=900.0, help="seconds to wait for the server's /health")
    parser.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--vllm-max-model-len", type=int, default=None)
    parser.add_argument("--vllm-tensor-parallel-size", type=int, default=1)
    parser.add_argument("--vllm-arg", action="append", help="extra argument for vllm serve (repeatable)")


def server_options(args: argparse.Namespace) -> ServerOptions:
    """The parsed server options as the typed settings :func:`build_server` takes."""
    return ServerOptions(
        kind=args.serve,
        startup_timeout_s=args.serve_timeout,
        served_model=args.served_model,
        vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        vllm_max_model_len=args.vllm_max_model_len,
        vllm_tensor_parallel_size=args.vllm_tensor_parallel_size,
        vllm_args=tuple(args.vllm_arg or ()),
    )


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve a model (vLLM or transformers serve) until stopped; announce its URL")
    p.add_argument("--model", required=True)
    p.add_argument("--served-model", default=None)
    p.add_argument("--announce", required=True, help="JSON file written once the server is healthy, removed at exit")
    add_server_arguments(p)
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """A server for consumers (Snakemake service job): healthy -> announce -> wait for SIGTERM -> stop."""
    from flatscore.backends.server_launch import build_server, serve_until_stopped

    if not args.serve:
        raise ValueError("--serve: expected vllm or transformers")
    announce = Path(args.announce)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = build_server(args.model, server_options(args), announce.parent)
    info = {"base_url": server.base_url, "model": args.served_model or args.model, "kind": args.serve}
    serve_until_stopped(server, announce, info, stop)
    return 0
