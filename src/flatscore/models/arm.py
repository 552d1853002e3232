"""What an arm of the comparison ran on: its scheme, where it was served, in which dtype, and what
that computes.

Two arms that differ in precision should differ in nothing else; when they also differ in backend
or dtype (fp8 in process beside int4 on a bfloat16 server), the gap between them is not the
quantization's alone, and the report must be able to say so. The cell records these fields beside
its identity (they follow from it: the manifest's sha and the backend settings are in it), so they
change no existing cell's hash. Read from the model folder's manifest, which the quantize step wrote.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from flatscore.models.manifest import Manifest

#: The compute note of a model the workflow did not quantize.
UNQUANTIZED = "unquantized: weights and matmul in the run dtype"


def _checkpoint_scheme(model_dir: Path) -> str | None:
    """A named checkpoint's own quantization, as its config.json says (``quant_method/format``)."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    quant = config.get("quantization_config") or {}
    if not quant:
        return None
    return "/".join(str(v) for v in (quant.get("quant_method"), quant.get("format")) if v)


def _runtime_compute(note: Any, server: str | None) -> str | None:
    """The manifest's compute note for the runtime this arm used: how the weights are stored, then what
    that runtime computes (in process and ``transformers serve`` alike: transformers; vLLM: vllm)."""
    if not isinstance(note, dict):
        return note
    runtime = "vllm" if server == "vllm" else "transformers" if server in (None, "transformers") else None
    doing = note.get(runtime) if runtime else None
    where = f"{runtime}: {doing}" if doing else "runtime unknown (an external server)"
    return f"{note.get('stored')}; {where}"


def _in_process(backend: str) -> str:
    return "transformers (in process)" if backend == "transformers" else backend


def describe_arm(
    model: str | None, precision: str, backend: str, server: str | None, dtype: str | None
) -> dict[str, Any]:
    """The cell's ``arm_*`` fields: scheme, method, compute note (from the manifest), server, dtype.

    ``server``: the kind of OpenAI-compatible server (vllm, transformers, external), None in process.
    ``dtype``: what the model runs in (the in-process backend's load dtype, or the server's --dtype).
    A model without a flatscore manifest (a named checkpoint) gets what its config.json says, or
    "unknown": it says nothing of how it was made.
    """
    folder = Path(model) if model else None
    manifest = Manifest.find(folder) if folder is not None and folder.is_dir() else None
    info = manifest.to_dict() if manifest is not None else {}
    if info.get("kind") == "quantized":
        scheme, method = info.get("scheme"), info.get("method")
        compute = _runtime_compute(info.get("compute"), server)
    elif precision == "full" or info:
        scheme, method, compute = "none", "none", UNQUANTIZED
    else:
        scheme = (_checkpoint_scheme(folder) if folder is not None else None) or "unknown"
        method, compute = "unknown", "unknown (a named checkpoint, not made by the workflow)"
    return {
        "arm_scheme": scheme,
        "arm_method": method,
        "arm_compute": compute or "unknown (made before manifests recorded it)",
        "arm_backend": f"{backend} ({server} server)" if server else _in_process(backend),
        "arm_dtype": dtype or "unknown",
    }
