"""Models: demo tool-calling model, AWQ quantization, manifests, loading.

Public API:
    build_untrained_demo(out_dir, size="tiny", texts=None, seed=0) -> Path
    train_demo_model(conversations, out_dir, size="default", seed=0, steps=None, lr=None,
                     batch_size=None, max_seconds=None, ...) -> Manifest
    quantize_model(model_dir_or_hf_id, out_dir, scheme="w4a16"|"w8a16", group_size=32,
                   calibration=[...], n_samples=64, max_seq_len=512, awq=None, ...) -> Manifest
    prepare_precision(model_dir_or_hf_id, precision, out_dir, calibration=(), **kw) -> Path
    load_model(model_dir, device="cpu", dtype=None) -> (model, tokenizer)
    Manifest (.load/.save/.find/.sha)
"""

from .demo import build_untrained_demo
from .demo.train import train_demo_model
from .loading import load_model
from .manifest import MANIFEST_NAME, Manifest
from .quantize import prepare_precision, quantize_model

__all__ = [
    "MANIFEST_NAME",
    "Manifest",
    "build_untrained_demo",
    "load_model",
    "prepare_precision",
    "quantize_model",
    "train_demo_model",
]
