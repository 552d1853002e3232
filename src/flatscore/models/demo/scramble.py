"""Scrambled drills: call drills whose copied values are replaced by random look-alikes.

Why: the default model wrote the values it had memorised instead of the ones in front of it
(teacher-forced on held-out retail dialogues, 0 of 149 calls right; "Ethan Khan 85001" for a user
who had just said "I am Emma Lopez, and my zip code is 10042"). In the demonstrations a
memorised guess is cheap and often near: names come from a small pool and the same emails and
order ids recur across a database's tasks, so the loss never forces the model to look back. In a
scrambled drill every value the call copies from the window (a name, an email, an order id) is
replaced, in every message of the window, by a string of the same shape (letters by random
letters of the same case, digits by random digits) that no other drill holds: the one way to
predict it is to find it in the context and copy it, first token included.
"""

from __future__ import annotations

import random
import string
from typing import Any

from .drills import drill_windows
from .tokenizer import Span, normalize_messages, render_for_training

#: Values shorter than this are left alone: "CA", "OR" and "" also stand inside other words.
MIN_SCRAMBLED_CHARS = 3


def look_alike(value: str, rng: random.Random) -> str:
    """``value`` with each letter replaced by a random one of the same case and each digit by a random digit."""
    out = []
    for ch in value:
        if ch.isdigit():
            out.append(rng.choice(string.digits))
        elif ch.islower():
            out.append(rng.choice(string.ascii_lowercase))
        elif ch.isupper():
            out.append(rng.choice(string.ascii_uppercase))
        else:
            out.append(ch)
    return "".join(out)


def copied_values(window: list[dict[str, Any]]) -> list[str]:
    """String arguments of the window's last call that stand verbatim in an earlier message, longest first."""
    window = normalize_messages(window)
    earlier = "\n".join(_texts(window[:-1]))
    values: set[str] = set()
    for call in window[-1].get("tool_calls") or []:
        for value in string_leaves(_arguments(call)):
            if len(value) >= MIN_SCRAMBLED_CHARS and value in earlier:
                values.add(value)
    return sorted(values, key=lambda v: (-len(v), v))


def scrambled_drills(
    conversations: list[dict[str, Any]], context_messages: int, seed: int
) -> list[tuple[str, list[Span], list[Span]]]:
    """Rendered (text, [the call's span], silent spans) of every call drill that copies a value,
    with those values scrambled consistently across the window (see the module docstring)."""
    rng = random.Random(f"scrambled-drills/{seed}")
    drills: list[tuple[str, list[Span], list[Span]]] = []
    for window, message in drill_windows(conversations, context_messages):
        if not message.get("tool_calls"):
            continue
        values = copied_values(window)
        if not values:
            continue
        mapping = {v: look_alike(v, rng) for v in values}
        text, learnt, silent = render_for_training(_replace_all(window, mapping), None)
        if learnt:
            drills.append((text, [learnt[-1]], silent))
    return drills


def _replace_all(messages: list[dict[str, Any]], mapping: dict[str, str]) -> list[dict[str, Any]]:
    """A copy of ``messages`` with every value of ``mapping`` replaced in contents and call arguments."""

    def swap(text: str) -> str:
        for old, new in mapping.items():  # longest first: an id inside a longer value goes with it
            text = text.replace(old, new)
        return text

    out = normalize_messages(messages)  # a deep copy, call arguments parsed
    for m in out:
        if isinstance(m.get("content"), str):
            m["content"] = swap(m["content"])
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)
            fn["arguments"] = _swap_leaves(fn.get("arguments"), swap)
    return out


def _arguments(call: dict[str, Any]) -> Any:
    """A normalised call's arguments (a dict; an unparseable string stays a string)."""
    return call.get("function", call).get("arguments")


def string_leaves(value: Any) -> list[str]:
    """Every string inside ``value`` (nested dicts and lists), in order."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in string_leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in string_leaves(v)]
    return []


def _swap_leaves(value: Any, swap) -> Any:
    if isinstance(value, str):
        return swap(value)
    if isinstance(value, dict):
        return {k: _swap_leaves(v, swap) for k, v in value.items()}
    if isinstance(value, list):
        return [_swap_leaves(v, swap) for v in value]
    return value


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    """Contents and call-argument strings of normalised ``messages``."""
    texts = []
    for m in messages:
        if isinstance(m.get("content"), str):
            texts.append(m["content"])
        for call in m.get("tool_calls") or []:
            texts += string_leaves(_arguments(call))
    return texts
