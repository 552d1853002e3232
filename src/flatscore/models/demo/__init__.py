"""Demo tool-calling model: byte-level BPE tokenizer, chat template, tiny Llama trained from scratch."""

from .build import build_untrained_demo, save_demo_dir
from .sizes import SIZES, get_size, llama_config
from .tokenizer import (
    ALL_MARKERS,
    CONTROL_TOKENS,
    TOOL_TOKENS,
    chat_template,
    normalize_messages,
    render_conversation,
    special_token_ids,
    train_tokenizer,
)

__all__ = [
    "ALL_MARKERS",
    "CONTROL_TOKENS",
    "SIZES",
    "TOOL_TOKENS",
    "build_untrained_demo",
    "chat_template",
    "get_size",
    "llama_config",
    "normalize_messages",
    "render_conversation",
    "save_demo_dir",
    "special_token_ids",
    "train_tokenizer",
]
