"""Build / save helpers for the demo model."""

from __future__ import annotations

import platform
from pathlib import Path

import torch
import transformers
from transformers import GenerationConfig, LlamaForCausalLM

from ..manifest import Manifest, weights_sha256
from .samples import sample_conversations
from .sizes import get_size, llama_config
from .tokenizer import render_conversation, special_token_ids, train_tokenizer


def versions() -> dict[str, str]:
    return {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version()}


def save_demo_dir(model: LlamaForCausalLM, tokenizer, out_dir: str | Path) -> Path:
    """Write a standard HF model dir: config, safetensors, tokenizer (+ chat template), generation config."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids = special_token_ids(tokenizer)
    model.generation_config = GenerationConfig(
        eos_token_id=ids["<|im_end|>"],
        pad_token_id=ids["<|pad|>"],
        bos_token_id=ids["<|im_start|>"],
        do_sample=False,
        max_new_tokens=256,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def build_untrained_demo(
    out_dir: str | Path, size: str = "tiny", texts: list[str] | None = None, seed: int = 0
) -> Path:
    """Write a tokenizer + randomly initialised demo model (with the chat template) in seconds.

    `texts` trains the tokenizer; by default a few built-in retail-like conversations are rendered.
    """
    spec = get_size(size)
    if texts is None:
        texts = [render_conversation(c["messages"], c["tools"]) for c in sample_conversations(8)]
    tokenizer = train_tokenizer(texts, vocab_size=spec["vocab_size"])
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(size, tokenizer)).eval()
    out = save_demo_dir(model, tokenizer, out_dir)
    Manifest(
        kind="demo",
        size=size,
        trained=False,
        config=model.config.to_dict(),
        seed=seed,
        steps=0,
        n_conversations=0,
        versions=versions(),
        weights_sha256=weights_sha256(out),
    ).save(out)
    return out
