"""A GGUF file turned once into a Hugging Face model folder, which llmcompressor and vLLM load.

transformers reads GGUF (``from_pretrained(folder, gguf_file=name)``, with the ``gguf``
package) and dequantizes the weights to floats. What was found on transformers 5.17 with the
packaged Qwen2.5 Coder 0.5B Instruct (Q4_K_M), see ../shared/notes/STACK.md:

* ``save_pretrained`` on the model loaded from GGUF fails; building a fresh model from its
  config and loading the state dict into it, then saving that, works;
* the saved config still says ``quantization_config: {quant_method: gguf}``, and llmcompressor
  refuses such a folder: the key is dropped (the weights written are plain floats);
* the tokenizer, with its chat template, comes from the same file.

The folder gets a manifest (the GGUF's sha256 as its source), so a cell's identity follows the
file, and quantized arms derive from it through the workflow's quantize rule.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from flatscore.gguf_header import file_sha256, has_tool_template

from .manifest import Manifest, dir_size_bytes, weights_sha256


class GGUFImportError(ValueError):
    """The GGUF file cannot be turned into a model folder (missing, unreadable, no tool template)."""


def import_gguf(gguf: Path, out: Path, expected_sha256: str | None = None, dtype: str = "float32") -> Manifest:
    """Write ``out`` (config, float weights, tokenizer, manifest) from the GGUF file ``gguf``.

    The file and its checksum are checked before torch is imported and before anything is
    written, so a refusal is quick and leaves no folder behind.
    """
    gguf = Path(gguf)
    if not gguf.is_file():
        raise GGUFImportError(f"GGUF file not found: {gguf}")
    t0 = time.perf_counter()
    sha = file_sha256(gguf)
    if expected_sha256 and sha != expected_sha256:
        raise GGUFImportError(f"{gguf}: sha256 {sha} != expected {expected_sha256}")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    if not has_tool_template(getattr(tokenizer, "chat_template", None)):
        raise GGUFImportError(f"{gguf}: its chat template renders no tools; it cannot drive tool-calling episodes")
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=getattr(torch, dtype))
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    result = model.load_state_dict(loaded.state_dict(), strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    if set(result.missing_keys) - tied or result.unexpected_keys:
        raise GGUFImportError(
            f"{gguf}: weights do not match the model's config (missing {sorted(set(result.missing_keys) - tied)[:5]}, "
            f"unexpected {sorted(result.unexpected_keys)[:5]})"
        )
    model.tie_weights()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _drop_quantization_config(out / "config.json")
    manifest = Manifest(
        kind="imported",
        scheme="full",
        method="gguf-dequantized",
        base_path=str(gguf.resolve()),  # where it lay (not identity); base_weights_sha256 is what it is
        base_weights_sha256=sha,
        size_bytes_before=gguf.stat().st_size,
        size_bytes_after=dir_size_bytes(out),
        weights_sha256=weights_sha256(out),
        seconds=round(time.perf_counter() - t0, 2),
    )
    manifest.save(out)
    return manifest


def _drop_quantization_config(config_json: Path) -> None:
    """llmcompressor refuses a folder whose config names a quantization; the weights are floats."""
    data = json.loads(config_json.read_text())
    if data.pop("quantization_config", None) is not None:
        config_json.write_text(json.dumps(data, indent=2) + "\n")


__all__ = ["GGUFImportError", "file_sha256", "has_tool_template", "import_gguf"]
