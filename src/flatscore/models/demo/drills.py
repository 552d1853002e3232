"""Drills: short windows of the expert conversations that end in a turn copying values or
choosing what the user should do on their phone.

Why: the demo model's failing skills are copying ids (emails, order and line ids, phone numbers)
from the conversation into its calls, and choosing the phone fix that the last check shows. In
a full demonstration (~1,750 tokens) the tokens that decide these are a few dozen, and within a
10-minute CPU budget the model saw each demonstration about a third of a time: it learnt the
call formats but not to copy. A drill is
the last few messages before one such turn, without the system prompt, with only that turn
labelled: ~100-400 tokens each, so a step trains on ten or more copies instead of two
demonstrations' worth. A drill also keeps the user's opening request: which check or fix comes
next depends on what the user asked for (no service, mobile data, MMS), not only on the last
check's output. Drills are cut from the same expert conversations, so they add no facts the
demonstrations do not hold; they reweight training toward the turns that decide an episode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from ...agents.user_requests import REQUEST_PREFIX
from .tokenizer import render_for_training

_DIGITS = re.compile(r"\d{3,}")


def copies_values(message: dict[str, Any]) -> bool:
    """True for an assistant turn that calls a tool or states a number of 3+ digits (an id, an amount)."""
    if message.get("role") != "assistant":
        return False
    return bool(message.get("tool_calls")) or bool(_DIGITS.search(message.get("content") or ""))


def asks_for_phone_action(message: dict[str, Any]) -> bool:
    """True for an assistant turn that asks the user to act on their own device (dual control)."""
    return message.get("role") == "assistant" and REQUEST_PREFIX in (message.get("content") or "")


def is_drilled(message: dict[str, Any]) -> bool:
    """The turns drills end in: value copies and phone-action requests (never a deliberate slip)."""
    if message.get("learn", True) is False:
        return False
    return copies_values(message) or asks_for_phone_action(message)


def drill_windows(
    conversations: list[dict[str, Any]], context_messages: int = 4
) -> Iterator[tuple[list[dict[str, Any]], dict[str, Any]]]:
    """(window, drilled turn) of every drilled assistant turn (:func:`is_drilled`): the user's
    opening request, the ``context_messages`` messages before the turn (never the system prompt)
    and the turn itself, last."""
    if context_messages < 1:
        raise ValueError(f"context_messages: expected >= 1, got {context_messages}")
    for conv in conversations:
        messages = conv["messages"]
        opening = next((j for j, m in enumerate(messages) if m.get("role") == "user"), None)
        for i, message in enumerate(messages):
            if i == 0 or not is_drilled(message):
                continue
            start = max(1 if messages[0].get("role") == "system" else 0, i - context_messages)
            window = messages[start : i + 1]
            if opening is not None and opening < start:
                window = [messages[opening], *window]
            yield window, message


def copy_drills(
    conversations: list[dict[str, Any]], context_messages: int = 4, phone_repeats: int = 1
) -> list[tuple[str, list[tuple[int, int]], list[tuple[int, int]]]]:
    """Rendered drills (text, [the labelled span], silent spans) of every drilled assistant turn (:func:`is_drilled`).

    Each drill holds the user's opening request, the ``context_messages`` messages before the
    turn (never the system prompt) and the turn; only the turn's span is labelled, earlier
    assistant turns in the window are context. A phone-action drill comes ``phone_repeats``
    times: the fix after a check that shows a fault is the one decision a telecom episode
    turns on, and one per dialogue is too few for the model to learn it within the budget.
    """
    if phone_repeats < 1:
        raise ValueError(f"phone_repeats: expected >= 1, got {phone_repeats}")
    drills: list[tuple[str, list[tuple[int, int]], list[tuple[int, int]]]] = []
    for window, message in drill_windows(conversations, context_messages):
        text, learnt, silent = render_for_training(window, None)
        if learnt:
            drill = (text, [learnt[-1]], silent)
            drills += [drill] * (phone_repeats if asks_for_phone_action(message) else 1)
    return drills
