"""Seeded synthetic telecom data in tau2-bench's layout.

Writes ``db.json`` (customers, lines, plans, devices, bills), ``user_db.json`` (the phone),
``policy.md``, ``tasks.json`` and ``split_tasks.json``. Each task breaks the user's phone or
line with 1-3 faults taken from tau2's telecom task families (``mms_issue``,
``mobile_data_issue``, ``service_issue``); its initialization actions apply the faults, its
ground-truth actions (user or assistant) undo them in a fixed order, and its env assertions
check the outcome the user wants. Unfixable faults (a PIN-locked SIM, a line suspended after
its contract ended) make the ground truth a transfer to a human agent, as in tau2.

Everything comes from one ``random.Random(seed)``: the same seed gives byte-identical files.

This module is the entry point and writes the files; the database comes from
:mod:`.db_builder`, each task from :mod:`.task_maker`, and the faults from :mod:`.faults`.
Their public names are re-exported here, where callers have always imported them from.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from ..generated import GeneratorSettings, write_generator_record
from .db_builder import build_database
from .faults import FAULT_ORDER, FAULTS, UNFIXABLE
from .task_maker import ISSUE_WEIGHTS, N_FAULT_WEIGHTS, _make_task
from .user_data_model import TelecomUserDB

__all__ = [
    "FAULTS",
    "FAULT_ORDER",
    "ISSUE_WEIGHTS",
    "N_FAULT_WEIGHTS",
    "POLICY_FILE",
    "UNFIXABLE",
    "build_database",
    "generate",
]

POLICY_FILE = Path(__file__).with_name("policy.md")


def _dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def generate(out_dir: Path, settings: GeneratorSettings) -> Path:
    """Write a synthetic telecom data folder; returns ``out_dir``. ``settings.ids``: see
    :data:`.db_builder.ID_STARTS` (telecom draws no task kinds, and names from its list only)."""
    seed, n_tasks, eval_fraction, ids = settings.seed, settings.n_tasks, settings.eval_fraction, settings.ids
    if n_tasks < 1:
        raise ValueError("n_tasks must be at least 1")
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError("eval_fraction must be in [0, 1)")
    rng = random.Random(seed)
    db = build_database(rng, ids=ids)
    tasks = [_make_task(i, rng, db) for i in range(n_tasks)]
    task_ids = [t["id"] for t in tasks]
    shuffled = task_ids[:]
    rng.shuffle(shuffled)
    n_test = round(n_tasks * eval_fraction)
    test = set(shuffled[:n_test])
    split = {"train": [i for i in task_ids if i not in test], "test": [i for i in task_ids if i in test]}

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _dump(out_dir / "db.json", db.model_dump(mode="json"))
    _dump(out_dir / "user_db.json", TelecomUserDB().model_dump(mode="json"))
    (out_dir / "policy.md").write_text(POLICY_FILE.read_text())
    _dump(out_dir / "tasks.json", tasks)
    _dump(out_dir / "split_tasks.json", split)
    write_generator_record(out_dir, "telecom", settings)
    return out_dir
