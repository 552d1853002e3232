"""The record a synthetic data folder keeps of how it was generated.

Expert demonstrations add extra synthetic databases beside the study's own (``augment_dbs``);
they must have the same id shapes as the data the model is evaluated on, or the model learns
to copy ids of another length than it meets, and the same task kinds, or it trains on tasks it
is never asked. The record carries that across, and tells a reader
of the folder which generator settings made it. tau2-bench's own data has no record: its ids are
tau2's shapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GENERATOR_FILE = "flatscore_generator.json"
#: The id shapes of tau2-bench's own data (and of a folder without a record).
TAU2_IDS = "tau2"


@dataclass(frozen=True)
class GeneratorSettings:
    """How a synthetic data folder is drawn: what :meth:`Domain.generate` takes, a domain's
    generator reads and the folder's record keeps (one list of settings for all three).

    ``ids``: the id shapes (tau2-bench's, or short ones); ``task_kinds``: the task kinds to draw,
    None for all of them (retail only); ``identities``: how customers' names and zips are drawn
    (``pool`` from the catalogue's lists; retail also ``open``, made up); ``user_details``: how
    the task tells the user their identifying details and order ids (``prose``; retail also
    ``json``, in the form the tool call takes).
    """

    seed: int
    n_tasks: int = 120
    eval_fraction: float = 0.3
    ids: str = TAU2_IDS
    task_kinds: tuple[str, ...] | None = None
    identities: str = "pool"
    user_details: str = "prose"


def write_generator_record(out_dir: Path, domain: str, settings: GeneratorSettings) -> None:
    record: dict[str, object] = {
        "domain": domain,
        "seed": settings.seed,
        "n_tasks": settings.n_tasks,
        "eval_fraction": settings.eval_fraction,
        "ids": settings.ids,
    }
    if settings.task_kinds is not None:  # absent means every kind: a folder of every kind keeps its bytes (and digest)
        record["task_kinds"] = list(settings.task_kinds)
    if settings.identities != "pool":  # likewise: a folder of the usual names keeps its bytes
        record["identities"] = settings.identities
    if settings.user_details != "prose":  # likewise
        record["user_details"] = settings.user_details
    (Path(out_dir) / GENERATOR_FILE).write_text(json.dumps(record, indent=2) + "\n")


def generated_ids(data_dir: str | Path) -> str:
    """The id shapes ``data_dir`` was generated with; :data:`TAU2_IDS` where it has no record."""
    return str(generator_record(data_dir).get("ids", TAU2_IDS))


def generated_task_kinds(data_dir: str | Path) -> list[str] | None:
    """The task kinds ``data_dir`` was drawn from; None (every kind) where it has no record or no list."""
    kinds = generator_record(data_dir).get("task_kinds")
    return None if kinds is None else [str(k) for k in kinds]


def generated_user_details(data_dir: str | Path) -> str:
    """How ``data_dir``'s tasks tell the user their details; ``prose`` where it has no record."""
    return str(generator_record(data_dir).get("user_details", "prose"))


def generator_record(data_dir: str | Path) -> dict[str, Any]:
    """The record ``data_dir`` was generated with; empty where it has none (tau2-bench's own data)."""
    path = Path(data_dir) / GENERATOR_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
