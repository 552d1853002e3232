"""Read result cells (``<results>/cells/<cell_id>/{cell.json,episodes.jsonl}``) into tidy frames.

One pass over each ``episodes.jsonl`` fills two tables:

- ``episodes``: one row per episode, the cell's identity columns (categories) + the episode's
  scalar fields, one int16 column per error channel and ``hallucinated_tool``;
- ``error_events``: one row per error event (with the tool name), keyed like ``episodes``.

Only the fields the analysis needs are kept (``messages`` is parsed by orjson but never copied).
An unparseable line (truncated write, corrupt byte) raises :class:`CorruptRecordError` naming
the file and the line: results are never silently dropped. The parser itself lives in
:mod:`flatscore.analysis.episodes_parser` (shared with the summary writer); the cell folder's
names and its reading policy are :mod:`flatscore.engine.cell_folder`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flatscore.analysis.episodes_parser import (
    COUNT_DTYPE,
    EPISODE_DTYPES,
    EVENT_FIELDS,
    CorruptRecordError,
    cell_arrays,
    parse_episodes,
)
from flatscore.analysis.summary import read_summary
from flatscore.engine.cell_folder import CELL_FILE, EPISODES_FILE, iter_cell_dirs, read_json
from flatscore.engine.records import CHANNELS, HALLUCINATION_CHANNELS

#: Identity of a cell (its result-changing coordinates). ``cell_id`` is the folder name.
CELL_COLUMNS: tuple[str, ...] = ("cell_id", "cell_hash", "study", "model", "precision", "domain", "budget", "repair")
#: What each cell's arm ran on (cell.json's ``arm_*`` fields, see flatscore.models.arm): descriptive
#: columns of the cells frame only, for the report's Arms table. "" where a cell predates them.
ARM_INFO_COLUMNS: tuple[str, ...] = ("arm_scheme", "arm_backend", "arm_dtype", "arm_compute", "arm_user")
#: Columns that identify an *arm*: cells sharing them are pooled (e.g. several seeds).
ARM_KEYS: list[str] = ["study", "model", "domain", "budget", "repair", "precision"]
REFERENCE_PRECISION = "full"
#: Column of both frames: 0 for the study's own cells, r > 0 for the A/A replicate r of a
#: full-precision cell (``replicates`` in the config). Replicates are not pooled into any arm:
#: :func:`split_replicates` keeps them apart for the noise floor.
REPLICATE = "replicate"


@dataclass
class StudyData:
    cells: pd.DataFrame  # one row per cell folder
    episodes: pd.DataFrame  # one row per episode
    error_events: pd.DataFrame  # one row per error event

    @property
    def channels(self) -> list[str]:
        """Channel names present (without the ``ch_`` prefix), ``hallucinated_tool`` included."""
        return channel_columns(self.episodes)


def find_cell_dirs(results_dir: Path) -> list[Path]:
    """Every cell folder under ``<results>/cells`` (sorted, deterministic), nested ones included.

    The workflow nests cells (``cells/<model>/<precision>/<domain>/K<b>/repair-<x>/shard<i>``), so
    a one-level glob found none of them; :func:`~flatscore.engine.cell_folder.iter_cell_dirs`
    searches at any depth and skips results moved under ``.superseded/``.
    """
    return list(iter_cell_dirs(results_dir))


def _read_cell_json(cell_dir: Path) -> dict[str, Any]:
    path = cell_dir / CELL_FILE
    try:
        meta = read_json(path)
    except (OSError, ValueError) as exc:
        raise CorruptRecordError(path, None, str(exc)) from exc
    missing = [k for k in ("model", "precision", "domain", "budget", "repair") if k not in meta]
    if missing:
        raise CorruptRecordError(path, None, f"missing keys {missing}")
    return meta


def _arm_info(meta: dict[str, Any]) -> dict[str, str]:
    """A cell's ``arm_*`` fields; a cell from before them keeps what its identity says (backend, dtype)."""
    info = {key: str(meta.get(key) or "") for key in ARM_INFO_COLUMNS}
    info["arm_backend"] = info["arm_backend"] or str(meta.get("backend") or "")
    info["arm_dtype"] = info["arm_dtype"] or str(meta.get("dtype") or "")
    info["arm_user"] = user_label(meta.get("identity") or {})
    return info


def user_label(identity: dict[str, Any]) -> str:
    """Which user simulator a cell's episodes met, from its identity: the scripted user adds no
    ``user_*`` key (so ``scripted``); an LLM user names its served model and temperature."""
    model = identity.get("user_model")
    if not model:
        return "scripted"
    parts = Path(str(model)).parts
    name = "/".join(parts[-2:]) if len(parts) > 1 else str(model)
    return f"llm: {name} (temperature {identity.get('user_temperature', 0)})"


def _cat(values: list | np.ndarray) -> pd.Categorical:
    return pd.Categorical(values)


def _cell_data(
    d: Path, path: Path, channels: list[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, set]]:
    """A cell's arrays: from its summary when that is intact and matches the JSONL, else parsed."""
    cached = read_summary(d)
    if cached is not None:
        return cached
    cols, ev, seen = parse_episodes(path, channels)
    return (*cell_arrays(cols, ev), seen)


def load_cells(cell_dirs: Iterable[Path | str]) -> StudyData:
    """Load every cell folder into :class:`StudyData` (episodes, error_events, cells).

    A cell with an intact summary of its current ``episodes.jsonl`` (checked by SHA-256, see
    :mod:`flatscore.analysis.summary`) is read from it; any other cell is parsed line by line.
    Both give the same frames.
    """
    dirs = [Path(d) for d in cell_dirs]
    metas, ep_parts, ev_parts = [], [], []
    channels = list(CHANNELS)
    for d in dirs:
        meta = _read_cell_json(d)
        path = d / EPISODES_FILE
        if not path.exists():
            raise CorruptRecordError(path, None, f"{EPISODES_FILE} missing")
        cols, ev, seen = _cell_data(d, path, channels)
        for key in ("budget", "domain", "repair"):
            vals = {v for v in seen[key] if v is not None}
            if vals and vals != {meta[key]}:
                raise CorruptRecordError(
                    path, None, f"episodes disagree with cell.json on {key}: {sorted(map(str, vals))} vs {meta[key]!r}"
                )
        for c in list(cols):
            if c.startswith("ch_") and c[3:] not in channels:
                channels.append(c[3:])
        metas.append(
            {
                "cell_id": d.name,
                "cell_hash": str(meta.get("cell_hash", d.name)),
                "study": str(meta.get("study", "")),
                "model": str(meta["model"]),
                "precision": str(meta["precision"]),
                "domain": str(meta["domain"]),
                "budget": int(meta["budget"]),
                "repair": bool(meta["repair"]),
                "trials": int(meta.get("trials", 0) or 0),
                "seed": int(meta.get("seed", 0) or 0),
                "replicate": int(meta.get("replicate", 0) or 0),
                "path": str(d),
                "n_lines": len(cols["task_id"]),
                **_arm_info(meta),
            }
        )
        ep_parts.append(cols)
        ev_parts.append(ev)

    cells = pd.DataFrame(
        metas, columns=[*CELL_COLUMNS, "trials", "seed", "replicate", "path", "n_lines", *ARM_INFO_COLUMNS]
    )
    n_per_cell = np.array([len(p["task_id"]) for p in ep_parts], dtype=np.int64)
    n_ev_per_cell = np.array([len(p["row"]) for p in ev_parts], dtype=np.int64)

    def cell_columns(counts: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for col in CELL_COLUMNS:
            if col == "budget":
                out[col] = np.repeat(cells[col].to_numpy(dtype=np.int16), counts)
            elif col == "repair":
                out[col] = np.repeat(cells[col].to_numpy(dtype=bool), counts)
            else:
                cat = pd.Categorical(cells[col].astype(str))
                out[col] = pd.Categorical.from_codes(np.repeat(cat.codes, counts), categories=cat.categories)
        return out

    def concat(key: str, parts: list[dict[str, np.ndarray]], dtype: Any) -> np.ndarray:
        """One column over all cells; a cell without it (a channel it never saw) counts 0."""
        arrays = [p[key] if key in p else np.zeros(len(next(iter(p.values()))), dtype=dtype) for p in parts]
        return np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)

    ep = cell_columns(n_per_cell)
    ep["task_id"] = _cat(concat("task_id", ep_parts, object))
    for k in ("trial", "seed", "reward", "scored"):
        ep[k] = concat(k, ep_parts, EPISODE_DTYPES[k])
    ep["termination"] = _cat(concat("termination", ep_parts, object))
    ep["errors_counted"] = concat("errors_counted", ep_parts, EPISODE_DTYPES["errors_counted"])
    for c in channels:
        ep[f"ch_{c}"] = concat(f"ch_{c}", ep_parts, COUNT_DTYPE)
    ep["ch_hallucinated_tool"] = sum(ep[f"ch_{c}"] for c in HALLUCINATION_CHANNELS).astype(np.int16)
    for k in ("agent_tool_calls", "user_tool_calls", "steps"):
        ep[k] = concat(k, ep_parts, EPISODE_DTYPES[k])
    ep[REPLICATE] = np.repeat(cells[REPLICATE].to_numpy(dtype=np.int16), n_per_cell)
    episodes = pd.DataFrame(ep)

    # error events: global episode row = cell offset + row within the cell
    offsets = np.concatenate([[0], np.cumsum(n_per_cell)[:-1]]) if len(n_per_cell) else np.zeros(0, np.int64)
    rows = np.concatenate([p["row"] + off for p, off in zip(ev_parts, offsets)]) if ev_parts else np.zeros(0, np.int64)
    evd = cell_columns(n_ev_per_cell)
    evd["task_id"] = pd.Categorical.from_codes(
        episodes["task_id"].cat.codes.to_numpy()[rows], categories=episodes["task_id"].cat.categories
    )
    evd["trial"] = episodes["trial"].to_numpy()[rows]
    evd["episode_row"] = rows
    evd[REPLICATE] = episodes[REPLICATE].to_numpy()[rows]
    for k in EVENT_FIELDS:
        if k == "step":
            evd[k] = concat(k, ev_parts, np.int16)
        elif k == "counted":
            evd[k] = concat(k, ev_parts, bool)
        else:
            evd[k] = _cat(concat(k, ev_parts, object))
    error_events = pd.DataFrame(evd)
    return StudyData(cells=cells, episodes=episodes, error_events=error_events)


def split_replicates(data: StudyData) -> tuple[StudyData, pd.DataFrame]:
    """The study without its A/A replicates, and the replicates' episodes.

    Every table that existed before replicates is computed from the first part, so turning
    ``replicates`` on adds the noise floor and changes no other number.
    """
    ep, ev = data.episodes, data.error_events
    keep = ep[REPLICATE].to_numpy() == 0
    if keep.all():
        return data, ep.iloc[:0]
    new_row = np.cumsum(keep) - 1  # an event's episode_row is a position in the episodes frame
    events = ev[ev[REPLICATE].to_numpy() == 0].copy()
    events["episode_row"] = new_row[events["episode_row"].to_numpy()]
    main = StudyData(
        cells=data.cells[data.cells[REPLICATE] == 0].reset_index(drop=True),
        episodes=ep[keep].reset_index(drop=True),
        error_events=events.reset_index(drop=True),
    )
    return main, ep[~keep].reset_index(drop=True)


def load_episodes(cell_dirs: Iterable[Path | str]) -> pd.DataFrame:
    return load_cells(cell_dirs).episodes


def load_error_events(cell_dirs: Iterable[Path | str]) -> pd.DataFrame:
    return load_cells(cell_dirs).error_events


def channel_columns(episodes: pd.DataFrame) -> list[str]:
    """Channel names present in an episodes frame (without the ``ch_`` prefix)."""
    return [c[3:] for c in episodes.columns if c.startswith("ch_")]
