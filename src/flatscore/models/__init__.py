"""Models: demo tool-calling model, quantization (AWQ, W8A8 presets), manifests, loading.

Public API:
    build_untrained_demo(out_dir, size="tiny", texts=None, seed=0) -> Path
    train_demo_model(conversations, out_dir, size="default", seed=0, steps=None, lr=None,
                     batch_size=None, max_seconds=None, ...) -> Manifest
    quantize_model(model_dir_or_hf_id, out_dir, scheme="w4a16"|"w8a16"|"w8a8"|"fp8_dynamic",
                   group_size=32, calibration=[...], n_samples=64, max_seq_len=512, awq=None, ...) -> Manifest
    (schemes and what each computes where: flatscore.models.schemes; an arm's record: models.arm)
    prepare_precision(model_dir_or_hf_id, precision, out_dir, calibration=(), **kw) -> Path
    load_model(model_dir, device="cpu", dtype=None) -> (model, tokenizer)
    Manifest (.load/.save/.find/.sha)

The names below are imported on first use (PEP 562): reading a manifest must not load torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "MANIFEST_NAME": "flatscore.models.manifest",
    "Manifest": "flatscore.models.manifest",
    "build_untrained_demo": "flatscore.models.demo",
    "load_model": "flatscore.models.loading",
    "prepare_precision": "flatscore.models.quantize",
    "quantize_model": "flatscore.models.quantize",
    "train_demo_model": "flatscore.models.demo.train",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
