"""Draws the retail task list: cycles through every task kind in a shuffled order per round.

The kinds' order (``KINDS``) and the round-robin over them decide which random draws each
task consumes, so both are part of the generator's seed-to-output contract.
"""

from __future__ import annotations

import random
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


def build_tasks(rng: random.Random, db: RetailDB, n_tasks: int) -> list[dict[str, Any]]:
    maker = _TaskMaker(rng, db)
    tasks: list[dict[str, Any]] = []
    kinds = list(_TaskMaker.KINDS)
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
