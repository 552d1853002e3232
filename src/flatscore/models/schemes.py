"""The quantization schemes the workflow makes, and what each one really computes.

Two families, because llmcompressor makes them differently:

* weight-only group schemes (``w4a16``, ``w8a16``): integer weights with one scale per group of
  input channels, made with AWQ (calibrated on the model's expert demonstrations) or plain RTN;
* preset W8A8 schemes (``w8a8``, ``fp8_dynamic``): compressed-tensors' presets ``W8A8`` and
  ``FP8_DYNAMIC``, weights scaled per output channel and activations quantized per token at run
  time. Their weights are rounded to nearest from a min-max observer, so they need no calibration
  data and no AWQ (these are the schemes vLLM serves fast: W8A8 int8 on its CPU build, FP8 on GPUs).

Each scheme carries a ``compute`` note (storage, and the arithmetic per runtime) for the manifest
and the report. A quantized checkpoint's
rounding damage is the same wherever it runs; where its arithmetic happens is not, and a reader
comparing arms must not take "fp8" to mean FP8 matmuls when the in-process backend dequantized
the weights. The notes say what was checked on transformers 5.17 / compressed-tensors 0.19 on the
CPU: the weights stay compressed until the first forward pass, are then dequantized to the load
dtype (float32 on the CPU), and a W8A8 Linear quantizes and dequantizes its input per token
before a matmul in that dtype.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Scheme:
    """One quantization scheme: how llmcompressor makes it and what running it computes."""

    name: str
    #: compressed-tensors preset name (QuantizationModifier ``scheme``); None: a group scheme built here
    preset: str | None
    num_bits: int
    #: group schemes only: symmetric int (no zero point) or asymmetric
    symmetric: bool
    #: whether making it reads calibration data (AWQ); presets are data-free
    calibrated: bool
    #: how the checkpoint stores weights (and quantizes activations)
    stored: str
    #: what transformers (in process, or ``transformers serve``) computes with it
    transformers: str
    #: what vLLM computes with it
    vllm: str

    @property
    def compute(self) -> dict[str, str]:
        """The manifest's ``compute`` note: storage, then the arithmetic per runtime."""
        return {"stored": self.stored, "transformers": self.transformers, "vllm": self.vllm}


_TRANSFORMERS_W_ONLY = (
    "dequantized to the load dtype (float32 on the CPU) at the first forward pass, activations unquantized, "
    "matmul in the load dtype: the weight rounding is real, the low-bit arithmetic is not"
)


def _transformers_w8a8(act: str) -> str:
    return (
        "weights dequantized to the load dtype (float32 on the CPU) at the first forward pass, each Linear's "
        f"input quantized and dequantized to {act} per token, matmul in the load dtype: the rounding of weights "
        f"and activations is real, the {act} arithmetic is emulated"
    )


SCHEMES: dict[str, Scheme] = {
    "w4a16": Scheme(
        "w4a16",
        None,
        4,
        False,
        True,
        "weights int4 (packed, a scale and zero point per group)",
        _TRANSFORMERS_W_ONLY,
        "int4 weight-only kernels (its CPU build: in bfloat16 only)",
    ),
    "w8a16": Scheme(
        "w8a16",
        None,
        8,
        True,
        True,
        "weights int8 (packed, a scale per group)",
        _TRANSFORMERS_W_ONLY,
        "int8 weight-only kernels on GPUs; none in its CPU build",
    ),
    "w8a8": Scheme(
        "w8a8",
        "W8A8",
        8,
        True,
        False,
        "weights int8 (a scale per output channel), activations int8 per token (dynamic)",
        _transformers_w8a8("int8"),
        "int8 GEMM kernels (its CPU build included)",
    ),
    "fp8_dynamic": Scheme(
        "fp8_dynamic",
        "FP8_DYNAMIC",
        8,
        True,
        False,
        "weights float8_e4m3fn (a scale per output channel), activations FP8 per token (dynamic)",
        _transformers_w8a8("FP8"),
        "FP8 GEMM on GPUs of compute capability >= 8.9; its CPU build loads it but runs under 1 token/s",
    ),
}

#: What each quantized precision of the config may use (the schema's per-precision enums agree:
#: tests/models/test_quantize.py checks it).
PRECISION_SCHEMES: dict[str, tuple[str, ...]] = {
    "int4": ("w4a16",),
    "int8": ("w8a16", "w8a8"),
    "fp8": ("fp8_dynamic",),
}


def scheme(name: str) -> Scheme:
    """The scheme called ``name``; ValueError naming the known ones otherwise."""
    if name not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; known: {sorted(SCHEMES)}")
    return SCHEMES[name]
