"""Floor and ceiling: where a comparison of arms has nothing to compare.

Two arms that both solve no task (or every task) agree trivially: an equivalence test then says
"equivalent" at 0% vs 0%, and an error ratio compares two failures. Such rows are labelled
instead of judged, so that a report never calls a model that solves nothing "lossless".
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

FLOOR = "floor"
CEILING = "ceiling"
NO_ERRORS = "no errors"


def success_bound(*arms: Iterable[float]) -> str:
    """``floor`` where every arm's values are all 0, ``ceiling`` where all 1, else ``""``."""
    values = [np.asarray(list(a), dtype=float) for a in arms]
    if not values or any(v.size == 0 for v in values):
        return ""
    if all(np.all(v == 0.0) for v in values):
        return FLOOR
    if all(np.all(v == 1.0) for v in values):
        return CEILING
    return ""


def value_bound(value: float) -> str:
    """The bound one arm's rate sits at (``floor`` at 0, ``ceiling`` at 1), else ``""``."""
    return FLOOR if value == 0.0 else CEILING if value == 1.0 else ""
