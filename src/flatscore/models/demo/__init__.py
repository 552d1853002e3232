"""Demo tool-calling model: byte-level BPE tokenizer, chat template, tiny Llama trained from scratch.

The names below are imported on first use (PEP 562): building demonstrations or reading the
chat template must not load torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "build_untrained_demo": "flatscore.models.demo.build",
    "save_demo_dir": "flatscore.models.demo.build",
    **{name: "flatscore.models.demo.sizes" for name in ("SIZES", "get_size", "llama_config")},
    **{
        name: "flatscore.models.demo.tokenizer"
        for name in (
            "ALL_MARKERS",
            "CONTROL_TOKENS",
            "TOOL_TOKENS",
            "chat_template",
            "normalize_messages",
            "render_conversation",
            "special_token_ids",
            "train_tokenizer",
        )
    },
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
