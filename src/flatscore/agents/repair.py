"""Reflexive repair: answer a call to a tool that is not in the agent's list with the list.

The study's intervention: when the agent calls a tool it does not have, tell it so, name
the tools it does have, and ask it to pick one. It is a flag of the run (``repair``),
recorded with every result; the engine applies it only to the two hallucination channels.
"""

from __future__ import annotations

REPAIR_MARKER = "The available tools are:"


def repair_message(called: str, available: list[str]) -> str:
    return (
        f"Error: '{called}' is not one of your tools. {REPAIR_MARKER} {', '.join(available)}. "
        "Choose one of these tools and call it again."
    )


def is_repair_message(text: str | None) -> bool:
    return bool(text) and REPAIR_MARKER in text  # type: ignore[operator]
