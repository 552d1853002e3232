"""Building the LLM agent and its backend from the ``episodes`` command line."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def make_llm_agent(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The LLM agent and {role: backend}; the demo model's folder selects the compact prompt."""
    from .llm import LLMAgent

    if not args.model:
        raise ValueError("--model: required with --agent llm (a model folder or a Hugging Face id)")
    compact = args.prompt == "compact" if args.prompt else (Path(args.model) / "flatscore_manifest.json").exists()
    agent = LLMAgent(compact=compact, max_new_tokens=args.max_new_tokens)
    if args.backend == "transformers":
        from ..backends.transformers_backend import TransformersBackend

        if not Path(args.model).exists():
            raise ValueError(f"--model: folder not found: {args.model} (the transformers backend loads a local folder)")
        backend = TransformersBackend(args.model, max_batch=args.max_in_flight)
    else:
        from ..backends.openai_backend import OpenAIBackend

        if not args.base_url:
            raise ValueError(
                "--base-url: required with --backend openai (the server's URL, e.g. http://127.0.0.1:8000)"
            )
        backend = OpenAIBackend(args.base_url, args.served_model or args.model, max_in_flight=args.max_in_flight)
    return agent, {"agent": backend}
