"""Seeded synthetic retail data in tau2-bench's layout: db.json, policy.md, tasks.json, split_tasks.json.

All randomness comes from one ``random.Random(seed)``; nothing reads the clock or global state,
so a seed always gives byte-identical files. Every task's ground-truth actions are replayed
through :class:`RetailTools` on a fresh copy of the generated database before the task is kept:
a candidate whose replay raises, or whose mutating call leaves the database unchanged, is
dropped and another one drawn.

This module is the entry point and writes the files; the database comes from
:mod:`.db_builder`, the tasks from :mod:`.task_maker` (its kinds in :mod:`.write_tasks` and
:mod:`.info_tasks`), and both draw from the data in :mod:`.catalogue`. Their public names are
re-exported here, where callers have always imported them from.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace
from importlib import resources
from pathlib import Path

from ..generated import GeneratorSettings, write_generator_record
from .catalogue import BRANDS, CATALOGUE, CITIES, FIRST_NAMES, LAST_NAMES, N_ORDERS, N_USERS, PERSONAS, STREETS
from .db_builder import build_db
from .task_maker import TASK_KINDS, build_tasks, check_task_kinds

__all__ = [
    "BRANDS",
    "CATALOGUE",
    "CITIES",
    "FIRST_NAMES",
    "LAST_NAMES",
    "N_ORDERS",
    "N_USERS",
    "PERSONAS",
    "STREETS",
    "TASK_KINDS",
    "build_db",
    "build_tasks",
    "generate",
    "package_policy",
    "split",
]


def split(rng: random.Random, task_ids: list[str], eval_fraction: float) -> dict[str, list[str]]:
    if not 0.0 <= eval_fraction <= 1.0:
        raise ValueError(f"eval_fraction must be within [0, 1], got {eval_fraction}")
    shuffled = task_ids[:]
    rng.shuffle(shuffled)
    n_test = round(len(shuffled) * eval_fraction)
    test = set(shuffled[:n_test])
    return {
        "train": [t for t in task_ids if t not in test],
        "test": [t for t in task_ids if t in test],
    }


def package_policy() -> str:
    return resources.files(__package__).joinpath("policy.md").read_text()


def generate(out_dir: Path | str, settings: GeneratorSettings) -> Path:
    """Write db.json, policy.md, tasks.json and split_tasks.json for ``settings.seed`` into ``out_dir``.

    ``settings.ids``: the id shapes (:data:`.db_builder.ID_SHAPES`): tau2-bench's, or short ones.
    ``settings.task_kinds``: the task kinds to draw (:data:`.task_maker.TASK_KINDS`); None: all.
    ``settings.identities``: :data:`.db_builder.IDENTITY_SHAPES`: names and zips from the
    catalogue's lists, or made up (for the demo model's extra databases: nothing to memorise).
    ``settings.user_details``: :data:`.task_maker_base.USER_DETAIL_FORMS`: how the tasks tell the
    user their identifying details and order ids (the same draws either way: only the text differs).
    """
    kinds = check_task_kinds(settings.task_kinds)  # before anything is written
    rng = random.Random(settings.seed)
    db = build_db(rng, settings.ids, settings.identities)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = build_tasks(rng, db, settings.n_tasks, kinds, settings.user_details)
    splits = split(rng, [t["id"] for t in tasks], settings.eval_fraction)
    db.dump_json(out / "db.json")
    (out / "policy.md").write_text(package_policy())
    (out / "tasks.json").write_text(json.dumps(tasks, indent=2, ensure_ascii=False) + "\n")
    (out / "split_tasks.json").write_text(json.dumps(splits, indent=2) + "\n")
    listed = None if settings.task_kinds is None else tuple(kinds)  # recorded in TASK_KINDS order
    write_generator_record(out, "retail", replace(settings, task_kinds=listed))
    return out
