"""Subcommands beyond ``episodes``: models, tracking, analysis. Imported lazily by ``cli.main``."""

from __future__ import annotations

from typing import Any, Callable


def register_all(registry: list[Callable[[Any], None]]) -> None:
    """Fill ``registry`` once with the registrars of the optional subcommands."""
    if registry:
        return
