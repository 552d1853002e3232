"""Integrity of a cell's results before anything is aggregated.

Every cell's ``metrics.json`` carries the cell hash and the SHA-256 of its
``episodes.jsonl``. The aggregate stage refuses — with an error naming the cell and the
problem — results that were truncated or edited after the fact, that belong to another
cell, or whose identity does not match what the study's config asks for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .cell import cell_hash, episodes_sha256


class IntegrityError(ValueError):
    """A cell's results cannot be trusted as they are."""


def _load(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise IntegrityError(f"{path.parent}: {path.name} is missing") from None
    except ValueError as exc:
        raise IntegrityError(f"{path}: not valid JSON ({exc})") from None


def verify_cell(cell_dir: Path, expected: dict[str, Any] | None = None) -> dict[str, Any]:
    cell_dir = Path(cell_dir)
    cell = _load(cell_dir / "cell.json")
    metrics = _load(cell_dir / "metrics.json")
    episodes = cell_dir / "episodes.jsonl"
    if not episodes.exists():
        raise IntegrityError(f"{cell_dir}: episodes.jsonl is missing")
    chash = cell.get("cell_hash")
    if metrics.get("cell_hash") != chash:
        raise IntegrityError(f"{cell_dir}: metrics.json is for cell {metrics.get('cell_hash')}, cell.json for {chash}")
    if metrics.get("episodes_sha256") != episodes_sha256(episodes):
        raise IntegrityError(f"{cell_dir}: episodes.jsonl does not match its checksum (truncated or edited)")
    count = 0
    with open(episodes, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            try:
                record = json.loads(line)
            except ValueError:
                raise IntegrityError(f"{episodes}: line {number} is not valid JSON") from None
            if record.get("cell") != chash:
                raise IntegrityError(f"{episodes}: line {number} belongs to cell {record.get('cell')}, not {chash}")
            count += 1
    if count != metrics.get("n_episodes"):
        raise IntegrityError(f"{cell_dir}: {count} episodes on disk, metrics.json counted {metrics.get('n_episodes')}")
    for key, value in (expected or {}).items():
        if cell.get(key) != value:
            raise IntegrityError(f"{cell_dir}: cell.json has {key}={cell.get(key)!r}, the config asks for {value!r}")
    return cell


def verify_cells(cell_dirs: Iterable[Path], expected: dict[str, dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    expected = expected or {}
    return [verify_cell(Path(d), expected.get(str(d))) for d in cell_dirs]


def seal_metrics(metrics: dict[str, Any], cell_hash_value: str, episodes: Path) -> dict[str, Any]:
    """Add the identity and checksum fields that :func:`verify_cell` checks."""
    return {**metrics, "cell_hash": cell_hash_value, "episodes_sha256": episodes_sha256(episodes)}


__all__ = ["IntegrityError", "cell_hash", "seal_metrics", "verify_cell", "verify_cells"]
