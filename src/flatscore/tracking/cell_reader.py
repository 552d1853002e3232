"""Reading a cell folder for logging: its name, its content checksum, params, metrics, channel table.

Everything here is a pure function of the cell folder (no MLflow): what a cell's run is made of.
The file names and the episode reading policy are the cell folder's own
(:mod:`flatscore.engine.cell_folder`): a torn or corrupt episodes line is refused, not skipped, so
a run never holds a silently shortened cell (the cell stays pending instead).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from flatscore.engine.cell_folder import (
    CELL_FILE,
    CELLS_DIR,
    EPISODES_FILE,
    METRICS_FILE,
    read_episode_records,
    read_json,
)
from flatscore.engine.records import CHANNELS
from flatscore.redact import is_secret_name

_BAD_NAME_CHARS = re.compile(r"[^/\w.\- :]")
_IDENTITY_KEYS = ("model", "precision", "domain", "budget", "repair")


def results_dir_of(cell_dir: Path) -> Path:
    """``<results>/cells/<cell_id>`` (or the workflow's nested
    ``<results>/cells/<model>/<precision>/.../shard<i>``) -> ``<results>``."""
    cell_dir = Path(cell_dir).resolve()
    for ancestor in cell_dir.parents:
        if ancestor.name == CELLS_DIR:
            return ancestor.parent
    return cell_dir.parent


def cell_run_name(cell_dir: Path, cell: dict[str, Any]) -> str:
    """The cell's name in MLflow (run name and ``flatscore.cell_id``), from its identity in cell.json.

    Every workflow cell folder is called ``shard<i>``, so the folder name alone names nothing:
    ``<model>/<precision>/<domain>/K<budget>/repair-<on|off>/shard<i>``. A flat CLI cell
    (``cells/<name>``) ends with its folder name instead of a shard, which keeps names unique
    across the flat cells of one results folder. A cell.json without those fields keeps the
    folder name.
    """
    cell_dir = Path(cell_dir)
    if any(cell.get(k) is None for k in _IDENTITY_KEYS):
        return cell_dir.name
    repair = "on" if cell["repair"] is True or str(cell["repair"]).lower() in ("true", "on", "1") else "off"
    parts = [str(cell["model"]), str(cell["precision"]), str(cell["domain"]), f"K{cell['budget']}", f"repair-{repair}"]
    return "/".join([*parts, cell_dir.name])


def content_sha256(cell_dir: str | os.PathLike[str]) -> str:
    """Checksum of what a cell's run is made of: cell.json, metrics.json, episodes.jsonl.

    One digest over the three files (each name, its bytes, a separator; a missing file hashes as
    empty), not a per-file checksum: the markers and the runs' ``flatscore.content_sha256`` tags
    already written hold this value, and a different one would re-log every cell.
    """
    digest = hashlib.sha256()
    for name in (CELL_FILE, METRICS_FILE, EPISODES_FILE):
        path = Path(cell_dir) / name
        digest.update(name.encode() + b"\0")
        if path.exists():
            with open(path, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
        digest.update(b"\0\0")
    return digest.hexdigest()


def read_cell(cell_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cell.json, metrics.json or {} while the cell is unfinished)."""
    metrics_path = Path(cell_dir) / METRICS_FILE
    return read_json(Path(cell_dir) / CELL_FILE), (read_json(metrics_path) if metrics_path.exists() else {})


def read_episodes(path: Path) -> list[dict[str, Any]]:
    """Every episode of an ``episodes.jsonl`` ([] if absent), under the cell folder's one policy:
    a torn or corrupt line raises :class:`~flatscore.engine.cell_folder.CorruptEpisodeLine`."""
    return list(read_episode_records(path)) if Path(path).exists() else []


def scalar_params(cell: dict[str, Any]) -> dict[str, str]:
    """Every scalar of cell.json (secrets dropped) as MLflow param strings."""
    out: dict[str, str] = {}
    for k, v in cell.items():
        if is_secret_name(k):
            continue
        if isinstance(v, (dict, list, tuple)):
            # Lists of scalars (seeds...) are useful as params too.
            if isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float, bool)) or x is None for x in v):
                v = json.dumps(list(v))
            else:
                continue
        name = _BAD_NAME_CHARS.sub("_", str(k))[:250]
        out[name] = ("" if v is None else str(v))[:6000]
    return out


def numeric_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """metrics.json's finite numbers (booleans as 0/1) under MLflow-safe names."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, bool):
            v = float(v)
        if not isinstance(v, (int, float)):
            continue
        v = float(v)
        if math.isinf(v):
            continue
        name = _BAD_NAME_CHARS.sub("_", str(k))[:250]
        out[name] = v
    return out


def channel_table_csv(episodes: list[dict[str, Any]]) -> str:
    """Per-task table: episodes, scored, successes, errors counted and each channel's count."""
    channels = list(CHANNELS)
    for ep in episodes:
        for ch in ep.get("channels") or {}:
            if ch not in channels:
                channels.append(ch)
    rows: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for ep in episodes:
        r = rows[str(ep.get("task_id", ""))]
        r["episodes"] += 1
        r["scored"] += 1 if ep.get("scored") else 0
        r["successes"] += 1 if ep.get("scored") and float(ep.get("reward") or 0) >= 1.0 - 1e-9 else 0
        r["errors_counted"] += int(ep.get("errors_counted") or 0)
        r["agent_tool_calls"] += int(ep.get("agent_tool_calls") or 0)
        for ch, n in (ep.get("channels") or {}).items():
            r[ch] += int(n or 0)
    cols = ["episodes", "scored", "successes", "errors_counted", "agent_tool_calls", *channels]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["task_id", *cols])
    total: dict[str, float] = defaultdict(float)
    for task in sorted(rows):
        w.writerow([task, *(int(rows[task][c]) for c in cols)])
        for c in cols:
            total[c] += rows[task][c]
    w.writerow(["__total__", *(int(total[c]) for c in cols)])
    return buf.getvalue()
