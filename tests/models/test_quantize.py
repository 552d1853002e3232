"""Quantization of the tiny demo model with llmcompressor (CPU): AWQ W4A16 / W8A16, and the data-free
W8A8 presets fp8_dynamic and w8a8 (int8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open

from flatscore.config_defaults import config_schema
from flatscore.models import Manifest
from flatscore.models.demo.samples import sample_conversations
from flatscore.models.demo.train import train_demo_model
from flatscore.models.loading import load_model
from flatscore.models.manifest import weights_sha256
from flatscore.models.quantize import (
    _no_accelerator,
    build_recipe,
    cpu_pin_memory_workaround,
    prepare_precision,
    quantize_model,
)
from flatscore.models.schemes import PRECISION_SCHEMES, SCHEMES

LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("base")
    train_demo_model(sample_conversations(8), out, size="tiny", seed=0)
    return out


@pytest.fixture(scope="module")
def calibration():
    return sample_conversations(8)


@pytest.fixture(scope="module")
def q4(base, calibration, tmp_path_factory):
    out = tmp_path_factory.mktemp("q4")
    m = quantize_model(
        base, out, scheme="w4a16", group_size=32, calibration=calibration, n_samples=8, max_seq_len=512, num_threads=1
    )
    return out, m


@pytest.fixture(scope="module")
def q8(base, calibration, tmp_path_factory):
    out = tmp_path_factory.mktemp("q8")
    m = quantize_model(
        base, out, scheme="w8a16", group_size=32, calibration=calibration, n_samples=8, max_seq_len=512, num_threads=1
    )
    return out, m


def _tensors(d: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                out[k] = st.get_tensor(k)
    return out


def _prompt_logits(model_dir, prompt_conv):
    model, tok = load_model(model_dir)
    text = tok.apply_chat_template(
        prompt_conv["messages"][:2], tools=prompt_conv["tools"], add_generation_prompt=True, tokenize=False
    )
    enc = tok(text, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        logits = model(**enc).logits[0].float()
    return model, tok, enc, logits


def _check_compressed(qdir: Path, base: Path, bits: int, max_ratio: float):
    cfg = json.loads((qdir / "config.json").read_text())["quantization_config"]
    assert cfg["quant_method"] == "compressed-tensors"
    assert cfg["format"] == "pack-quantized"
    assert cfg["quantization_status"] == "compressed"
    assert "lm_head" in cfg["ignore"]
    [group] = cfg["config_groups"].values()
    assert group["weights"]["num_bits"] == bits and group["weights"]["strategy"] == "group"
    assert group["weights"]["group_size"] == 32

    qt, bt = _tensors(qdir), _tensors(base)
    qlin_bytes = fp32_lin_bytes = 0
    n_layers = json.loads((base / "config.json").read_text())["num_hidden_layers"]
    for i in range(n_layers):
        for name in LINEARS:
            sub = "self_attn" if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
            p = f"model.layers.{i}.{sub}.{name}"
            assert f"{p}.weight" not in qt, p
            assert qt[f"{p}.weight_packed"].dtype == torch.int32
            assert f"{p}.weight_scale" in qt
            qlin_bytes += sum(t.numel() * t.element_size() for k, t in qt.items() if k.startswith(p + "."))
            fp32_lin_bytes += bt[f"{p}.weight"].numel() * 4
    # lm_head and embeddings stay full precision
    assert "lm_head.weight" in qt and qt["lm_head.weight"].dtype == torch.float32
    assert not any(k.startswith("lm_head.weight_") for k in qt)
    assert torch.equal(qt["lm_head.weight"], bt["lm_head.weight"])
    assert qlin_bytes < max_ratio * fp32_lin_bytes, (qlin_bytes, fp32_lin_bytes)
    return qt


def test_recipe_text():
    r4 = yaml.safe_load(build_recipe("w4a16", 32))["quant_stage"]["quant_modifiers"]
    assert list(r4) == ["AWQModifier", "QuantizationModifier"]
    w = r4["QuantizationModifier"]["config_groups"]["group_0"]["weights"]
    assert (w["num_bits"], w["symmetric"], w["strategy"], w["group_size"]) == (4, False, "group", 32)
    assert r4["QuantizationModifier"]["ignore"] == ["lm_head"]
    assert r4["QuantizationModifier"]["config_groups"]["group_0"]["targets"] == ["Linear"]
    r8 = yaml.safe_load(build_recipe("w8a16", 64))["quant_stage"]["quant_modifiers"]
    assert r8["QuantizationModifier"]["config_groups"]["group_0"]["weights"]["num_bits"] == 8
    assert list(yaml.safe_load(build_recipe("w4a16", awq=False))["quant_stage"]["quant_modifiers"]) == [
        "QuantizationModifier"
    ]
    with pytest.raises(ValueError):
        build_recipe("w3a16")


@pytest.mark.skipif(not _no_accelerator(), reason="the workaround only applies without an accelerator")
def test_cpu_pin_memory_workaround():
    from llmcompressor.pipelines.cache import IntermediatesCache

    original = IntermediatesCache.__dict__["pin_memory"]
    cache = IntermediatesCache.empty(1, torch.device("cpu"))
    cache.update(0, {"hidden_states": torch.ones(2, 3)})
    # the upstream bug: pinning needs an accelerator (skip this half if torch stops raising)
    try:
        cache.pin_memory(0)
        raised = False
    except RuntimeError:
        raised = True
    with cpu_pin_memory_workaround() as patched:
        assert patched is True
        cache.pin_memory(0)  # no-op now
        assert not cache.fetch(0)["hidden_states"].is_pinned()
    assert IntermediatesCache.__dict__["pin_memory"] is original
    if not raised:
        pytest.skip("torch no longer raises on pin_memory without an accelerator")


def test_w4a16_awq(q4, base, calibration):
    qdir, m = q4
    qt = _check_compressed(qdir, base, bits=4, max_ratio=0.25)
    assert any(k.endswith("weight_zero_point") for k in qt)  # asymmetric
    assert m.kind == "quantized" and m.scheme == "w4a16" and m.method == "awq"
    assert m.format == "pack-quantized" and m.quant_method == "compressed-tensors"
    assert m.n_calibration == 8 and len(m.calibration_sha256) == 64
    assert m.base_manifest_sha == Manifest.load(base).sha
    assert m.size_bytes_after < m.size_bytes_before
    assert m.weights_sha256 == weights_sha256(qdir)
    assert Manifest.load(qdir).sha == m.sha
    assert "AWQModifier" in m.recipe
    assert m.cpu_pin_memory_workaround is _no_accelerator()

    conv = calibration[2]
    _, _, _, lb = _prompt_logits(base, conv)
    model, tok, enc, lq = _prompt_logits(qdir, conv)
    assert lq.shape == lb.shape
    assert (lq - lb).abs().max() > 1e-4  # really quantized
    cos = torch.nn.functional.cosine_similarity(lq, lb, dim=-1).mean()
    top1 = (lq.argmax(-1) == lb.argmax(-1)).float().mean()
    assert cos > 0.9, cos
    assert top1 > 0.5, top1
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=40, do_sample=False)
    new = gen[0, enc["input_ids"].shape[1] :]
    assert len(new) > 0
    text = tok.decode(new, skip_special_tokens=True)
    # the base model was trained on this dialogue and opens a tool call here; so does the 4-bit one
    assert text.startswith("<tool_call>"), text


def test_w8a16_awq(q8, q4, base, calibration):
    qdir, m = q8
    _check_compressed(qdir, base, bits=8, max_ratio=0.35)
    assert m.scheme == "w8a16" and m.method == "awq"
    assert m.size_bytes_after > q4[1].size_bytes_after  # 8-bit is bigger than 4-bit
    conv = calibration[3]
    _, _, _, lb = _prompt_logits(base, conv)
    _, _, _, l8 = _prompt_logits(qdir, conv)
    _, _, _, l4 = _prompt_logits(q4[0], conv)
    assert (l8 - lb).abs().max() > 0
    # 8-bit is closer to full precision than 4-bit
    assert (l8 - lb).pow(2).mean() < (l4 - lb).pow(2).mean()
    assert torch.nn.functional.cosine_similarity(l8, lb, dim=-1).mean() > 0.99


def test_the_same_quantization_from_another_folder_has_the_same_identity(base, tmp_path):
    """Two fresh clones of a study quantize the same weights from different absolute paths: the
    manifest records where the source lay, but its sha (each cell's model identity) must not see it.
    Before, the absolute base path was in the sha, so a fresh clone superseded every quantized cell."""
    import shutil

    elsewhere = tmp_path / "clone" / "full"
    shutil.copytree(base, elsewhere)
    a = quantize_model(base, tmp_path / "a", scheme="w4a16", calibration=["hello world"], awq=False, num_threads=1)
    b = quantize_model(elsewhere, tmp_path / "b", scheme="w4a16", calibration=["hello world"], awq=False, num_threads=1)
    assert a.weights_sha256 == b.weights_sha256
    assert a.to_dict()["base_path"] != b.to_dict()["base_path"]
    assert a.sha == b.sha


def test_rtn_arm_and_prepare_precision(base, q4, tmp_path):
    m = quantize_model(base, tmp_path / "rtn", scheme="w4a16", calibration=["hello world"], awq=False, num_threads=1)
    assert m.method == "rtn" and "AWQModifier" not in m.recipe
    assert (
        json.loads((tmp_path / "rtn" / "config.json").read_text())["quantization_config"]["format"] == "pack-quantized"
    )
    # full precision and already-quantized checkpoints are passed through unchanged
    assert prepare_precision(base, "fp32", tmp_path / "x") == base
    assert prepare_precision(q4[0], "w4a16", tmp_path / "y") == q4[0]
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# ----- the data-free W8A8 presets: fp8_dynamic and w8a8 (int8) -----------------------------------


@pytest.fixture(scope="module")
def fp8(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("fp8")
    return out, quantize_model(base, out, scheme="fp8_dynamic", num_threads=1)


@pytest.fixture(scope="module")
def w8a8(base, tmp_path_factory):
    out = tmp_path_factory.mktemp("w8a8")
    return out, quantize_model(base, out, scheme="w8a8", num_threads=1)


def test_preset_recipe_is_data_free_and_refuses_awq():
    mods = yaml.safe_load(build_recipe("fp8_dynamic", awq=False))["quant_stage"]["quant_modifiers"]
    assert mods == {"QuantizationModifier": {"ignore": ["lm_head"], "targets": ["Linear"], "scheme": "FP8_DYNAMIC"}}
    w8 = yaml.safe_load(build_recipe("w8a8", awq=False))["quant_stage"]["quant_modifiers"]
    assert w8["QuantizationModifier"]["scheme"] == "W8A8"
    with pytest.raises(ValueError, match="without AWQ"):
        build_recipe("fp8_dynamic", awq=True)


def test_schema_allows_each_precision_its_schemes_only():
    """The config schema's per-precision enums are PRECISION_SCHEMES, its first is the default, and
    every scheme the schema knows is one quantize_model can make."""
    quantization = config_schema()["properties"]["quantization"]["properties"]
    for precision, allowed in PRECISION_SCHEMES.items():
        assert tuple(quantization[precision]["properties"]["scheme"]["enum"]) == allowed
        assert quantization[precision]["properties"]["scheme"]["default"] == allowed[0]
    assert set(config_schema()["$defs"]["scheme"]["properties"]["scheme"]["enum"]) == set(SCHEMES)


def _linear_weights(qdir: Path) -> dict[str, torch.Tensor]:
    return {k: t for k, t in _tensors(qdir).items() if k.endswith(".weight") and any(n in k for n in LINEARS)}


def _check_w8a8_checkpoint(qdir: Path, base: Path, weight_dtype: torch.dtype, act_type: str, fmt: str) -> None:
    """Every Linear stored in ``weight_dtype`` with a scale per output channel, lm_head untouched, and
    the config's dynamic per-token activation quantization."""
    cfg = json.loads((qdir / "config.json").read_text())["quantization_config"]
    assert cfg["format"] == fmt and cfg["ignore"] == ["lm_head"]
    [group] = cfg["config_groups"].values()
    weights, act = group["weights"], group["input_activations"]
    assert (weights["num_bits"], weights["type"], weights["strategy"]) == (8, act_type, "channel")
    assert (act["num_bits"], act["type"], act["strategy"], act["dynamic"]) == (8, act_type, "token", True)
    qt, bt = _tensors(qdir), _tensors(base)
    weights = _linear_weights(qdir)
    n_layers = json.loads((base / "config.json").read_text())["num_hidden_layers"]
    assert len(weights) == n_layers * len(LINEARS)
    for key, tensor in weights.items():
        assert tensor.dtype == weight_dtype, key
        assert qt[key + "_scale"].shape == (tensor.shape[0], 1), key
    assert qt["lm_head.weight"].dtype == torch.float32 and torch.equal(qt["lm_head.weight"], bt["lm_head.weight"])


def _check_preset_manifest(m: Manifest, qdir: Path, scheme: str) -> None:
    assert m.kind == "quantized" and m.scheme == scheme and m.method == "rtn"
    assert m.n_calibration == 0 and m.calibration_sha256 is None and m.group_size is None
    assert "AWQModifier" not in m.recipe and m.cpu_pin_memory_workaround is False
    assert m.compute == SCHEMES[scheme].compute and "emulated" in m.compute["transformers"]
    assert m.size_bytes_after < m.size_bytes_before
    assert m.weights_sha256 == weights_sha256(qdir) and Manifest.load(qdir).sha == m.sha


def _check_compute_note(qdir: Path) -> torch.nn.Module:
    """What the manifest's compute note says transformers does on the CPU, checked: the weights are
    dequantized to float32 at the first forward pass, and a Linear quantizes-dequantizes its input
    per token (its output is F.linear of that input, not of the raw one)."""
    from compressed_tensors.quantization.lifecycle.forward import forward_quantize

    model, tok = load_model(qdir)
    q_proj = model.model.layers[0].self_attn.q_proj
    assert q_proj.weight.dtype in (torch.float8_e4m3fn, torch.int8)  # compressed until the first forward
    with torch.no_grad():
        model(**tok("hello", return_tensors="pt"))
        assert q_proj.weight.dtype == torch.float32
        x = torch.randn(3, q_proj.in_features)
        x_qdq = forward_quantize(q_proj, x, "input", q_proj.quantization_scheme.input_activations)
        assert not torch.equal(x_qdq, x)
        assert torch.equal(q_proj(x), torch.nn.functional.linear(x_qdq, q_proj.weight))
    return model


def test_fp8_dynamic(fp8, base, calibration):
    qdir, m = fp8
    _check_w8a8_checkpoint(qdir, base, torch.float8_e4m3fn, "float", "float-quantized")
    _check_preset_manifest(m, qdir, "fp8_dynamic")
    _check_compute_note(qdir)
    conv = calibration[2]
    _, _, _, lb = _prompt_logits(base, conv)
    model, tok, enc, lq = _prompt_logits(qdir, conv)
    assert (lq - lb).abs().max() > 1e-4  # really quantized
    assert torch.nn.functional.cosine_similarity(lq, lb, dim=-1).mean() > 0.99
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=40, do_sample=False)
    text = tok.decode(gen[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    assert text.startswith("<tool_call>"), text


def test_w8a8_int8(w8a8, base, calibration):
    qdir, m = w8a8
    _check_w8a8_checkpoint(qdir, base, torch.int8, "int", "int-quantized")
    _check_preset_manifest(m, qdir, "w8a8")
    _check_compute_note(qdir)
    conv = calibration[3]
    _, _, _, lb = _prompt_logits(base, conv)
    _, _, _, lq = _prompt_logits(qdir, conv)
    assert (lq - lb).abs().max() > 1e-4
    assert torch.nn.functional.cosine_similarity(lq, lb, dim=-1).mean() > 0.99


def test_quantize_command_makes_fp8_without_calibration(base, tmp_path, capsys):
    """The workflow's command: ``--scheme fp8_dynamic`` with no --calibration writes the manifest."""
    from flatscore.cli import main

    assert main(["quantize", "--model", str(base), "--out", str(tmp_path / "q"), "--scheme", "fp8_dynamic"]) == 0
    assert Manifest.load(tmp_path / "q").scheme == "fp8_dynamic"
    assert "fp8_dynamic, rtn" in capsys.readouterr().out


def test_fp8_arm_evaluated_in_process_names_its_backend_and_compute(fp8, tmp_path):
    """The fp8 checkpoint evaluated by ``flatscore episodes`` (transformers in process): the cell
    records the scheme, backend, dtype and the compute of that runtime (emulated FP8 in float32)."""
    from flatscore.cli import main

    qdir, _ = fp8
    out = tmp_path / "cell"
    argv = ["episodes", "--domain", "retail", "--agent", "llm", "--backend", "transformers", "--model", str(qdir)]
    argv += ["--precision", "fp8", "--tasks", "first:1", "--trials", "1", "--max-steps", "6"]
    argv += ["--max-new-tokens", "16", "--max-in-flight", "1", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    cell = json.loads((out / "cell.json").read_text())
    assert cell["precision"] == "fp8" and cell["arm_scheme"] == "fp8_dynamic" and cell["arm_method"] == "rtn"
    assert cell["arm_backend"] == "transformers (in process)" and cell["arm_dtype"] == "float32"
    assert cell["arm_compute"].startswith("weights float8_e4m3fn") and "transformers: " in cell["arm_compute"]
    assert "emulated" in cell["arm_compute"] and "vllm" not in cell["arm_compute"].lower()
    assert "arm_scheme" not in cell["identity"]  # descriptive: the manifest sha in the identity covers it
    assert json.loads((out / "metrics.json").read_text())["n_episodes"] == 1
