"""Copy drills: short windows of the expert conversations that end in a turn copying values.

Why: the demo model's failing skill is copying ids (emails, order and line ids, phone numbers)
from the conversation into its calls. In a full demonstration (~1,750 tokens) the tokens that
need a copy are a few dozen, and within a 10-minute CPU budget the model saw each
demonstration about a third of a time: it learnt the call formats but not to copy. A drill is
the last few messages before one such turn, without the system prompt, with only that turn
labelled: ~100-400 tokens each, so a step trains on ten or more copies instead of two
demonstrations' worth. Drills are cut from the same expert conversations, so they add no
facts the demonstrations do not hold; they reweight training toward the copying turns.
"""

from __future__ import annotations

import re
from typing import Any

from .tokenizer import render_conversation

_DIGITS = re.compile(r"\d{3,}")


def copies_values(message: dict[str, Any]) -> bool:
    """True for an assistant turn that calls a tool or states a number of 3+ digits (an id, an amount)."""
    if message.get("role") != "assistant":
        return False
    return bool(message.get("tool_calls")) or bool(_DIGITS.search(message.get("content") or ""))


def copy_drills(conversations: list[dict[str, Any]], context_messages: int = 4) -> list[tuple[str, list[tuple[int, int]]]]:
    """Rendered drills (text, [the labelled span]) of every value-copying assistant turn.

    Each drill holds the ``context_messages`` messages before the turn (never the system
    prompt) and the turn; only the turn's span is labelled, earlier assistant turns in the
    window are context.
    """
    if context_messages < 1:
        raise ValueError(f"context_messages: expected >= 1, got {context_messages}")
    drills: list[tuple[str, list[tuple[int, int]]]] = []
    for conv in conversations:
        messages = conv["messages"]
        for i, message in enumerate(messages):
            if i == 0 or not copies_values(message):
                continue
            start = max(1 if messages[0].get("role") == "system" else 0, i - context_messages)
            text, spans = render_conversation(messages[start : i + 1], None, with_spans=True)
            if spans:
                drills.append((text, [spans[-1]]))
    return drills
