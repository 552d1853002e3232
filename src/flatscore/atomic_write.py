"""Atomic file writes: readers see the old file or the new one, never half of either.

Used by every layer that leaves a file others read while it may be rewritten (a cell's
metrics.json and cell.json, the loader's summary, MLflow markers, a server's announcement);
it depends on nothing else in the package, so any layer may use it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: Path, write: Callable[[IO[Any]], None], binary: bool = False) -> None:
    """Call ``write`` on a temp file beside ``path``, fsync, then rename over ``path``, so
    readers never see half a file and a failed write leaves the old one in place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write JSON atomically (see write_atomic)."""

    def dump(handle: IO[Any]) -> None:
        json.dump(payload, handle, indent=2, sort_keys=True, default=str)
        handle.write("\n")

    write_atomic(path, dump)
