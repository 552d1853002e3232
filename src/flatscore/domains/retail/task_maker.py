"""Draws the retail task list: cycles through every task kind in a shuffled order per round.

The kinds' order (``KINDS``) and the round-robin over them decide which random draws each
task consumes, so both are part of the generator's seed-to-output contract.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from .data_model import RetailDB
from .info_tasks import InfoTaskKinds
from .write_tasks import WriteTaskKinds


class _TaskMaker(WriteTaskKinds, InfoTaskKinds):
    """All task kinds, drawn by name through :meth:`make`."""

    KINDS = (
        "cancel",
        "modify_order_address",
        "modify_items",
        "exchange",
        "return_items",
        "modify_payment",
        "modify_user_address",
        "order_total",
        "item_price",
        "tracking",
        "sum_of_orders",
        "exchange_difference",
        "address_everywhere",
    )


#: Every retail task kind, by the name config's ``domains.retail.task_kinds`` uses.
TASK_KINDS: tuple[str, ...] = _TaskMaker.KINDS


def check_task_kinds(task_kinds: Sequence[str] | None) -> list[str]:
    """The kinds to draw, in :data:`TASK_KINDS` order; all of them for None.

    Refuses an empty list, a repeated or an unknown name, naming it and the known ones, so a typo
    fails before any file is written rather than after a long training on the wrong tasks.
    """
    if task_kinds is None:
        return list(TASK_KINDS)
    chosen = list(task_kinds)
    if not chosen:
        raise ValueError(f"task_kinds: expected null (all) or a non-empty list of {', '.join(TASK_KINDS)}")
    unknown = [k for k in chosen if k not in TASK_KINDS]
    if unknown:
        raise ValueError(f"task_kinds: unknown retail task kind(s) {unknown}; expected some of {', '.join(TASK_KINDS)}")
    repeated = sorted({k for k in chosen if chosen.count(k) > 1})
    if repeated:
        raise ValueError(f"task_kinds: {repeated} named more than once")
    return [k for k in TASK_KINDS if k in chosen]


def build_tasks(
    rng: random.Random,
    db: RetailDB,
    n_tasks: int,
    task_kinds: Sequence[str] | None = None,
    user_details: str = "prose",
) -> list[dict[str, Any]]:
    """``n_tasks`` tasks, cycling through ``task_kinds`` (None: every kind) in a shuffled order per round.

    With every kind the draws are those of the generator before the key existed, so a seed's
    data is unchanged.
    """
    kinds = check_task_kinds(task_kinds)
    maker = _TaskMaker(rng, db, user_details)
    tasks: list[dict[str, Any]] = []
    cycle: list[str] = []
    failures = 0
    while len(tasks) < n_tasks:
        if not cycle:
            cycle = kinds[:]
            rng.shuffle(cycle)
        kind = cycle.pop()
        task = maker.make(kind, str(len(tasks)))
        if task is None:
            failures += 1
            if failures > 50 * max(n_tasks, 1):
                raise RuntimeError("retail generator: could not draw enough valid tasks")
            continue
        tasks.append(task)
    return tasks
