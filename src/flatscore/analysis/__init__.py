"""Analysis of result cells: loading, paired statistics, plots and the aggregate report.

The names below are imported on first use (PEP 562): the episodes command imports
``analysis.summary`` at the end of every cell and must not pay for pingouin and matplotlib.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS = {
    "CorruptRecordError": "flatscore.analysis.load",
    "StudyData": "flatscore.analysis.load",
    "find_cell_dirs": "flatscore.analysis.load",
    "load_cells": "flatscore.analysis.load",
    "aggregate": "flatscore.analysis.report",
    "counterfactual_agreement": "flatscore.analysis.stats",
    "pass_hat_k": "flatscore.analysis.stats",
}

__all__ = [
    "CorruptRecordError",
    "StudyData",
    "aggregate",
    "counterfactual_agreement",
    "find_cell_dirs",
    "load_cells",
    "pass_hat_k",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
