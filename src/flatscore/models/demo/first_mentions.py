"""Keep the context loss off a copied value's first mention (size key ``silent_first_mentions``).

With ``context_loss_weight`` the demo model also predicts the user's words and the tools' output.
Where a value the agent later copies (a name, a zip, an email, an id, a total) stands for the
first time, nothing before it predicts it: that loss can only be lowered by guessing a likely
value from those seen in training. The model is then taught, once per dialogue and once per
drill, to guess a first name after "I am", right beside the one call that teaches it to copy the
name; a model that writes "Jonas Smith" for every user has learnt the guess. Silencing those
tokens (no loss at all, as for a slipped call; they stay in the input) leaves the context loss on
everything that can be read or copied: the tools' structure and statuses, and every later
mention of a value. Measured from scratch (seed 0), the idea did not hold: 49/144 teacher-forced
retail calls right against 77 without it (see docs/demo-model.md), so the size key stays off.
"""

from __future__ import annotations

import re

from ...agents.toolcall_parser import parse_hermes
from .scramble import string_leaves
from .tokenizer import IM_END, IM_START, Span

#: numbers of 3+ digits an answer states (a total, a tracking id): copied from a tool's output
_NUMBER = re.compile(r"\d[\d.,]*\d")
#: shorter values ("IL", "no") occur by chance in other words and carry little to guess
MIN_VALUE_CHARS = 3


def written_values(text: str, learnt: list[Span]) -> set[str]:
    """The values the labelled turns write: every string argument of their tool calls, and every
    3+ digit number of their text, each of at least ``MIN_VALUE_CHARS`` characters."""
    values: set[str] = set()
    for start, end in learnt:
        turn = parse_hermes(text[start:end])  # a malformed call names no values to protect
        for call in turn.tool_calls:
            values.update(string_leaves(call.arguments))
        prose = turn.content or ""
        values.update(m.group(0) for m in _NUMBER.finditer(prose) if sum(c.isdigit() for c in m.group(0)) >= 3)
    return {v for v in values if len(v) >= MIN_VALUE_CHARS}


def first_mention_spans(text: str, learnt: list[Span]) -> list[Span]:
    """Character spans of each written value's first mention, where that mention is context.

    A mention counts as a whole word (no letter or digit either side). Not silenced: a first
    mention in the system turn (the tool list and policy name constants such as "no longer
    needed", which the model can learn) or inside a labelled turn (the model wrote it first).
    """
    system = text.find(IM_END) + len(IM_END) if text.startswith(f"{IM_START}system") else 0
    spans: list[Span] = []
    for value in sorted(written_values(text, learnt)):
        pattern = re.compile(rf"(?<![A-Za-z0-9]){re.escape(value)}(?![A-Za-z0-9])")
        first = pattern.search(text)
        if first is None or first.start() < system:
            continue
        if any(a <= first.start() < b for a, b in learnt):
            continue
        spans.append((first.start(), first.end()))
    return _merged(spans)


def _merged(spans: list[Span]) -> list[Span]:
    out: list[Span] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def with_first_mentions_silent(
    rendered: list[tuple[str, list[Span], list[Span]]],
) -> list[tuple[str, list[Span], list[Span]]]:
    """``rendered`` (text, learnt, silent) with :func:`first_mention_spans` added to the silent spans."""
    return [(text, learnt, _merged(silent + first_mention_spans(text, learnt))) for text, learnt, silent in rendered]
