"""Load a plain or compressed-tensors (quantized) model dir with its tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


def load_model(model_dir: str | Path, device: str = "cpu", dtype: str | torch.dtype | None = None, **kwargs: Any):
    """Return (model, tokenizer) in eval mode on `device`.

    dtype defaults to float32 on the CPU and "auto" elsewhere. compressed-tensors checkpoints
    (quantization_config.quant_method == "compressed-tensors") are loaded by transformers itself.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if dtype is None:
        dtype = torch.float32 if str(device).startswith("cpu") else "auto"
    elif isinstance(dtype, str) and dtype != "auto":
        dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, **kwargs)
    model.to(device)
    model.eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer
