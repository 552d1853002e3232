"""Argument types and the one user-facing error of the command line."""

from __future__ import annotations

import argparse
from collections.abc import Callable


class CLIError(Exception):
    """A user-facing error: printed as one line ``flatscore: error: ...``, exit code 2."""


def bounded_int(name: str, minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``, with an error naming the option."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got '{text}'") from None
        if value < minimum:  # argparse already names the flag ("argument --budget: ...")
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def positive_int(name: str) -> Callable[[str], int]:
    return bounded_int(name, 1)


def non_negative_int(name: str) -> Callable[[str], int]:
    return bounded_int(name, 0)


def noise_rates(text: str) -> dict[str, float]:
    """``invented_tool=0.2,tool_error=0.1`` -> ``{"invented_tool": 0.2, "tool_error": 0.1}``."""
    rates: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"expected CHANNEL=RATE pairs, got '{part}'")
        try:
            rates[key.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"rate of '{key}' must be a number, got '{value}'") from None
    return rates
