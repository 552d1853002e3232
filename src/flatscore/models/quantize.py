"""Quantization of a model dir or HF id with llmcompressor: AWQ (or RTN) weight-only W4A16 / W8A16,
and the data-free W8A8 presets (int8 ``w8a8``, ``fp8_dynamic``); the schemes are :mod:`.schemes`."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from .manifest import Manifest, dir_size_bytes, sha256_json, weights_sha256
from .schemes import scheme as scheme_of

FULL_PRECISION = ("fp32", "fp16", "bf16", "full", "none")


def build_recipe(
    scheme: str = "w4a16", group_size: int = 32, awq: bool = True, ignore: Sequence[str] = ("lm_head",)
) -> str:
    """The llmcompressor recipe as YAML text: AWQModifier (optional) then QuantizationModifier.

    A preset scheme (w8a8, fp8_dynamic) names the compressed-tensors preset and takes neither AWQ
    (its activations are quantized at run time, which AWQ's weight-only smoothing does not
    model) nor a group size (it scales per output channel).
    """
    s = scheme_of(scheme)
    mods: dict[str, Any] = {}
    if s.preset is not None:
        if awq:
            raise ValueError(f"scheme {scheme}: a preset W8A8 scheme is made without AWQ (awq=False)")
        mods["QuantizationModifier"] = {"ignore": list(ignore), "targets": ["Linear"], "scheme": s.preset}
        return yaml.safe_dump({"quant_stage": {"quant_modifiers": mods}}, sort_keys=False)
    weights = {
        "num_bits": s.num_bits,
        "type": "int",
        "symmetric": s.symmetric,
        "strategy": "group",
        "group_size": int(group_size),
    }
    if awq:
        mods["AWQModifier"] = {"duo_scaling": True}
    mods["QuantizationModifier"] = {
        "ignore": list(ignore),
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}},
    }
    return yaml.safe_dump({"quant_stage": {"quant_modifiers": mods}}, sort_keys=False)


def _no_accelerator() -> bool:
    acc = getattr(torch, "accelerator", None)
    return not torch.cuda.is_available() and not (acc is not None and acc.is_available())


@contextlib.contextmanager
def cpu_pin_memory_workaround() -> Iterator[bool]:
    """Work around llmcompressor 0.13/0.14 AWQ failing on machines without an accelerator.

    AWQ calls `IntermediatesCache.pin_memory` unconditionally, and `Tensor.pin_memory()` raises
    "Cannot access accelerator device when none is available" without one. Pinning only speeds
    host->device copies, so with no accelerator it is safely a no-op. Patched only while the
    context is active and only when no accelerator exists; yields whether it patched.
    """
    if not _no_accelerator():
        yield False
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    original = IntermediatesCache.__dict__["pin_memory"]
    IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None
    try:
        yield True
    finally:
        IntermediatesCache.pin_memory = original


def _render_calibration(tokenizer, calibration: Sequence[str | dict], n_samples: int) -> list[str]:
    texts = []
    for item in list(calibration)[:n_samples]:
        if isinstance(item, str):
            texts.append(item)
        else:
            msgs = item["messages"]
            if getattr(tokenizer, "chat_template", None):
                from .demo.tokenizer import normalize_messages

                texts.append(
                    tokenizer.apply_chat_template(
                        normalize_messages(msgs), tools=item.get("tools") or None, tokenize=False
                    )
                )
            else:
                texts.append("\n".join(f"{m['role']}: {m.get('content') or ''}" for m in msgs))
    if not texts:
        raise ValueError("empty calibration set")
    return texts


def _is_local(model: str | Path) -> bool:
    return Path(model).is_dir()


def quantize_model(
    model_dir_or_hf_id: str | Path,
    out_dir: str | Path,
    scheme: str = "w4a16",
    group_size: int = 32,
    calibration: Sequence[str | dict] = (),
    n_samples: int = 64,
    max_seq_len: int = 512,
    awq: bool | None = None,
    dtype: str | torch.dtype | None = None,
    num_threads: int | None = None,
) -> Manifest:
    """Quantize with llmcompressor and save a compressed-tensors dir; return the manifest written there.

    Group schemes (w4a16, w8a16): AWQ + QuantizationModifier, calibrated on `calibration` (raw
    texts, or conversations {"messages", "tools"} rendered through the model's chat template);
    `awq=False` runs plain RTN. Preset schemes (w8a8, fp8_dynamic): QuantizationModifier alone,
    data-free (`calibration` and `group_size` are not read, the manifest says so). Linear layers
    are quantized, lm_head is kept.
    """
    t0 = time.perf_counter()
    src = str(model_dir_or_hf_id)
    out = Path(out_dir)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(int(num_threads or os.cpu_count() or 1))
    try:
        return _quantize(src, out, scheme, group_size, calibration, n_samples, max_seq_len, awq, dtype, t0)
    finally:
        torch.set_num_threads(prev_threads)


def _quantize(src, out, scheme, group_size, calibration, n_samples, max_seq_len, awq, dtype, t0) -> Manifest:
    import compressed_tensors
    import llmcompressor
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    spec = scheme_of(scheme)
    use_awq = spec.calibrated if awq is None else bool(awq)
    recipe = build_recipe(scheme, group_size, awq=use_awq)

    tokenizer = AutoTokenizer.from_pretrained(src)
    if dtype is None:
        dtype = torch.float32 if _no_accelerator() else "auto"
    model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype)
    model.eval()
    size_before = (
        dir_size_bytes(src) if _is_local(src) else sum(p.numel() * p.element_size() for p in model.parameters())
    )

    texts: list[str] = []
    if spec.preset is not None:  # data-free: weights rounded from a min-max observer, activations at run time
        patched = False  # the workaround is AWQ's (its calibration cache); a data-free pass never pins
        oneshot(model=model, tokenizer=tokenizer, recipe=recipe)
    else:
        texts = _render_calibration(tokenizer, calibration, n_samples)
        enc = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=max_seq_len)
        ds = Dataset.from_dict({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]})
        with cpu_pin_memory_workaround() as patched:
            oneshot(
                model=model,
                tokenizer=tokenizer,
                dataset=ds,
                recipe=recipe,
                num_calibration_samples=len(texts),
                max_seq_length=max_seq_len,
                shuffle_calibration_samples=False,
            )
    model.save_pretrained(out, save_compressed=True)
    tokenizer.save_pretrained(out)

    base_manifest = Manifest.find(src) if _is_local(src) else None
    qcfg = json.loads((out / "config.json").read_text()).get("quantization_config", {})
    manifest = Manifest(
        kind="quantized",
        scheme=scheme,
        method="awq" if use_awq else "rtn",
        compute=spec.compute,
        recipe=recipe,
        group_size=group_size if spec.preset is None else None,
        base_model=None if _is_local(src) else src,  # a hub id names its weights; a local path does not
        base_path=str(Path(src).resolve()) if _is_local(src) else None,
        base_manifest_sha=base_manifest.sha if base_manifest else None,
        base_weights_sha256=base_manifest.weights_sha256 if base_manifest else None,
        calibration_sha256=sha256_json(texts) if texts else None,
        n_calibration=len(texts),
        max_seq_len=max_seq_len if texts else None,
        format=qcfg.get("format"),
        quant_method=qcfg.get("quant_method"),
        size_bytes_before=int(size_before),
        size_bytes_after=dir_size_bytes(out),
        cpu_pin_memory_workaround=patched,
        num_threads=torch.get_num_threads(),
        versions={
            "llmcompressor": llmcompressor.__version__,
            "compressed_tensors": compressed_tensors.__version__,
            "torch": torch.__version__,
        },
        weights_sha256=weights_sha256(out),
        seconds=round(time.perf_counter() - t0, 2),
    )
    manifest.save(out)
    return manifest


def is_quantized_checkpoint(model_dir_or_hf_id: str | Path) -> bool:
    """True if the model's config.json already carries a quantization_config."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(model_dir_or_hf_id))
    return getattr(cfg, "quantization_config", None) is not None


def prepare_precision(
    model_dir_or_hf_id: str | Path,
    precision: str,
    out_dir: str | Path,
    calibration: Sequence[str | dict] = (),
    **kwargs: Any,
) -> Path:
    """Return a model path for `precision`: the source itself for full precision or an already
    quantized checkpoint (passed through unchanged), else a freshly quantized out_dir."""
    p = precision.lower()
    if p in FULL_PRECISION or is_quantized_checkpoint(model_dir_or_hf_id):
        return Path(model_dir_or_hf_id) if _is_local(model_dir_or_hf_id) else model_dir_or_hf_id  # type: ignore[return-value]
    quantize_model(model_dir_or_hf_id, out_dir, scheme=p, calibration=calibration, **kwargs)
    return Path(out_dir)
