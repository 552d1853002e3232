"""Integrity of a cell's results before anything is aggregated.

Every cell's ``metrics.json`` carries the cell hash and the SHA-256 of its
``episodes.jsonl``. The aggregate stage refuses — with an error naming the cell and the
problem — results that were truncated or edited after the fact, that belong to another
cell, or whose identity does not match what the study's config asks for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from .cell import cell_hash, episodes_sha256
from .cell_folder import (
    CELL_FILE,
    EPISODES_FILE,
    METRICS_FILE,
    CorruptEpisodeLine,
    duplicate_message,
    iter_episode_lines,
    parse_episode_line,
    read_json,
)


class IntegrityError(ValueError):
    """A cell's results cannot be trusted as they are."""


#: Fields of cell.json that the analysis groups by: each must equal the hashed identity's.
IDENTITY_FIELDS = (
    "domain",
    "budget",
    "repair",
    "precision",
    "model",
    "trials",
    "first_trial",
    "seed",
    "max_steps",
    "tau2_compat",
    "split",
    "model_manifest_sha",
    "data_digest",
    "replicate",
)


def expected_from_config(config: dict[str, Any]) -> dict[str, Any]:
    """What every cell of a study config must have (single values) or be one of (lists)."""
    return {
        "domain": list(config.get("domains", {})),
        "budget": list(config.get("budgets", [])),
        "repair": list(config.get("repair", [])),
        "precision": list(config.get("precisions", [])),
        "model": list(config.get("models", {})),
        "seed": config.get("seed"),
        "max_steps": config.get("max_steps", 200),
        "tau2_compat": bool(config.get("tau2_compat", False)),
    }


def _load(path: Path) -> dict[str, Any]:
    try:
        return read_json(path)
    except FileNotFoundError:
        raise IntegrityError(f"{path.parent}: {path.name} is missing") from None
    except ValueError as exc:
        raise IntegrityError(f"{path}: not valid JSON ({exc})") from None


def verify_cell(cell_dir: Path, expected: dict[str, Any] | None = None) -> dict[str, Any]:
    """A cell's cell.json once every check passes, else :class:`IntegrityError` naming the problem.

    Episodes are read with the cell folder's one reader (:mod:`flatscore.engine.cell_folder`):
    a torn or corrupt line is refused like any other tampering.
    """
    cell_dir = Path(cell_dir)
    cell = _load(cell_dir / CELL_FILE)
    metrics = _load(cell_dir / METRICS_FILE)
    episodes = cell_dir / EPISODES_FILE
    if not episodes.exists():
        raise IntegrityError(f"{cell_dir}: {EPISODES_FILE} is missing")
    chash = cell.get("cell_hash")
    identity = cell.get("identity")
    if not isinstance(identity, dict) or cell_hash(identity) != chash:
        raise IntegrityError(f"{cell_dir}: cell.json's identity does not hash to its cell_hash {chash} (edited?)")
    for key in IDENTITY_FIELDS:
        if key in identity and cell.get(key) != identity[key]:
            raise IntegrityError(
                f"{cell_dir}: cell.json says {key}={cell.get(key)!r} but its identity has "
                f"{identity[key]!r} (relabelled?)"
            )
    if metrics.get("cell_hash") != chash:
        raise IntegrityError(f"{cell_dir}: metrics.json is for cell {metrics.get('cell_hash')}, cell.json for {chash}")
    if metrics.get("episodes_sha256") != episodes_sha256(episodes):
        raise IntegrityError(f"{cell_dir}: {EPISODES_FILE} does not match its checksum (truncated or edited)")
    count = 0
    first_line: dict[tuple[Any, Any], int] = {}  # (task_id, trial) -> its line: an episode counts once
    try:
        for number, line in iter_episode_lines(episodes):
            record = parse_episode_line(episodes, number, line)
            if record.get("cell") != chash:
                raise IntegrityError(f"{episodes}: line {number} belongs to cell {record.get('cell')}, not {chash}")
            key = (record.get("task_id"), record.get("trial"))
            earlier = first_line.setdefault(key, number)
            if earlier != number:
                raise IntegrityError(duplicate_message(episodes, earlier, number, *key))
            count += 1
    except CorruptEpisodeLine as exc:
        raise IntegrityError(f"{exc.path}: line {exc.lineno}: {exc.reason}") from None
    if count != metrics.get("n_episodes"):
        raise IntegrityError(f"{cell_dir}: {count} episodes on disk, metrics.json counted {metrics.get('n_episodes')}")
    for key, value in (expected or {}).items():
        ok = cell.get(key) in value if isinstance(value, list) else cell.get(key) == value
        if not ok:
            raise IntegrityError(f"{cell_dir}: cell.json has {key}={cell.get(key)!r}, the config asks for {value!r}")
    return cell


def verify_cells(cell_dirs: Iterable[Path], expected: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Verify every cell; ``expected`` (see :func:`expected_from_config`) applies to all of them."""
    return [verify_cell(Path(d), expected) for d in cell_dirs]


def seal_metrics(metrics: dict[str, Any], cell_hash_value: str, episodes: Path) -> dict[str, Any]:
    """Add the identity and checksum fields that :func:`verify_cell` checks."""
    return {**metrics, "cell_hash": cell_hash_value, "episodes_sha256": episodes_sha256(episodes)}


__all__ = ["IntegrityError", "cell_hash", "expected_from_config", "seal_metrics", "verify_cell", "verify_cells"]
