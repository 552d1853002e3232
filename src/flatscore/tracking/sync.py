"""Catch up with the tracking store: log every cell whose marker does not record its current content.

A cell whose logging failed (store unreachable, a crash) is left *pending*; :func:`sync_results`
logs each pending cell once and leaves the others alone, so running it again is cheap and never
duplicates a run.
"""

from __future__ import annotations

import os
from typing import Any

from flatscore.engine.cell_folder import iter_cell_dirs
from flatscore.tracking.cell_logger import read_marker, try_log_cell
from flatscore.tracking.cell_reader import content_sha256
from flatscore.tracking.store import resolve_tracking_uri


def is_pending(cell_dir: str | os.PathLike[str], tracking_uri: str | None = None) -> bool:
    """A cell is pending unless its marker records the current content (and the same URI)."""
    m = read_marker(cell_dir)
    if not m or m.get("content_sha256") != content_sha256(cell_dir):
        return True
    return tracking_uri is not None and m.get("uri") != tracking_uri


def sync_results(
    results_dir: str | os.PathLike[str],
    tracking_uri: str | None = None,
    experiment_name: str | None = None,
    **kwargs: Any,
) -> dict[str, int]:
    """Log every pending cell under ``<results_dir>/cells`` (at any depth) once.

    Returns counts: ``cells`` (seen), ``logged`` (pending and now logged), ``up_to_date``
    (marker current, not touched), ``failed`` (still pending).
    """
    uri = resolve_tracking_uri(tracking_uri, results_dir)
    counts = {"cells": 0, "logged": 0, "up_to_date": 0, "failed": 0}
    for d in iter_cell_dirs(results_dir):
        counts["cells"] += 1
        if not is_pending(d, uri):
            counts["up_to_date"] += 1
            continue
        if try_log_cell(d, uri, experiment_name, **kwargs) is None:
            counts["failed"] += 1
        else:
            counts["logged"] += 1
    return counts
