"""Read result cells (``<results>/cells/<cell_id>/{cell.json,episodes.jsonl}``) into tidy frames.

One pass over each ``episodes.jsonl`` fills two tables:

- ``episodes``: one row per episode, the cell's identity columns (categories) + the episode's
  scalar fields, one int16 column per error channel and ``hallucinated_tool``;
- ``error_events``: one row per error event (with the tool name), keyed like ``episodes``.

Only the fields the analysis needs are kept (``messages`` is parsed by orjson but never copied).
An unparseable line (truncated write, corrupt byte) raises :class:`CorruptRecordError` naming
the file and the line: results are never silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

try:  # orjson is ~5x faster than json on these records; fall back transparently.
    import orjson

    _loads = orjson.loads
    _DECODE_ERRORS: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError, TypeError)
except ImportError:  # pragma: no cover - exercised only where orjson is absent
    orjson = None
    _loads = json.loads
    _DECODE_ERRORS = (ValueError, TypeError)

from flatscore.engine.cell_folder import iter_cell_dirs
from flatscore.engine.records import CHANNELS, HALLUCINATION_CHANNELS

#: Identity of a cell (its result-changing coordinates). ``cell_id`` is the folder name.
CELL_COLUMNS: tuple[str, ...] = ("cell_id", "cell_hash", "study", "model", "precision", "domain", "budget", "repair")
#: Columns that identify an *arm*: cells sharing them are pooled (e.g. several seeds).
ARM_KEYS: list[str] = ["study", "model", "domain", "budget", "repair", "precision"]
REFERENCE_PRECISION = "full"
EVENT_FIELDS = ("step", "channel", "side", "tool", "counted")
COUNT_DTYPE = "int16"


class CorruptRecordError(ValueError):
    """A line of an ``episodes.jsonl`` (or a ``cell.json``) could not be parsed."""

    def __init__(self, path: Path, lineno: int | None, reason: str):
        self.path = Path(path)
        self.lineno = lineno
        where = f"{self.path}:{lineno}" if lineno is not None else str(self.path)
        super().__init__(f"corrupt result record at {where}: {reason}")


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
    path = cell_dir / "cell.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorruptRecordError(path, None, str(exc)) from exc
    missing = [k for k in ("model", "precision", "domain", "budget", "repair") if k not in meta]
    if missing:
        raise CorruptRecordError(path, None, f"missing keys {missing}")
    return meta


def _parse_episodes(path: Path, channels: list[str]) -> tuple[dict[str, list], dict[str, list], dict[str, set]]:
    """Parse one JSONL file into column lists (episodes) and event column lists."""
    cols: dict[str, list] = {
        k: []
        for k in (
            "task_id",
            "trial",
            "seed",
            "reward",
            "scored",
            "termination",
            "errors_counted",
            "agent_tool_calls",
            "user_tool_calls",
            "steps",
        )
    }
    chan_lists: dict[str, list] = {c: [] for c in channels}
    ev: dict[str, list] = {"row": [], **{k: [] for k in EVENT_FIELDS}}
    seen: dict[str, set] = {"budget": set(), "domain": set(), "repair": set()}
    extra_channels: set[str] = set()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CorruptRecordError(path, None, str(exc)) from exc
    if raw and not raw.endswith(b"\n"):
        # A record is only complete once its newline is written (atomic append contract).
        last = raw.rsplit(b"\n", 1)[-1]
        try:
            _loads(last)
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(path, raw.count(b"\n") + 1, f"truncated last line ({exc})") from exc
    c_task, c_trial, c_seed, c_rew, c_sc, c_term, c_err = (
        cols["task_id"],
        cols["trial"],
        cols["seed"],
        cols["reward"],
        cols["scored"],
        cols["termination"],
        cols["errors_counted"],
    )
    c_atc, c_utc, c_steps = cols["agent_tool_calls"], cols["user_tool_calls"], cols["steps"]
    ev_row, ev_step, ev_ch, ev_side, ev_tool, ev_cnt = (
        ev["row"],
        ev["step"],
        ev["channel"],
        ev["side"],
        ev["tool"],
        ev["counted"],
    )
    row = 0
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = _loads(line)
            c_task.append(rec["task_id"])
            c_trial.append(rec["trial"])
            c_seed.append(rec.get("seed", -1))
            c_rew.append(rec["reward"])
            c_sc.append(rec["scored"])
            c_term.append(rec["termination"])
            c_err.append(rec["errors_counted"])
            c_atc.append(rec.get("agent_tool_calls", 0))
            c_utc.append(rec.get("user_tool_calls", 0))
            c_steps.append(rec.get("steps", 0))
            ch = rec["channels"]
            for c in channels:
                chan_lists[c].append(ch.get(c, 0))
            if len(ch) != len(channels):
                extra_channels.update(k for k in ch if k not in chan_lists)
            for e in rec.get("error_events") or ():
                ev_row.append(row)
                ev_step.append(e.get("step", -1))
                ev_ch.append(e["channel"])
                ev_side.append(e.get("side", ""))
                ev_tool.append(e.get("tool", ""))
                ev_cnt.append(e.get("counted", True))
            seen["budget"].add(rec.get("budget"))
            seen["domain"].add(rec.get("domain"))
            seen["repair"].add(rec.get("repair"))
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(path, lineno, f"unparseable JSON line ({exc})") from exc
        except (KeyError, AttributeError) as exc:
            raise CorruptRecordError(path, lineno, f"record lacks field {exc}") from exc
        row += 1
    if extra_channels:  # channels beyond the known ones: second (rare) pass keeps them all
        return _parse_episodes(path, channels + sorted(extra_channels))
    cols.update({f"ch_{c}": v for c, v in chan_lists.items()})
    return cols, ev, seen


def _cat(values: list | np.ndarray) -> pd.Categorical:
    return pd.Categorical(values)


def _objects(values: Iterable) -> np.ndarray:
    """A 1-D object array of ``values`` (never reshaped into 2-D, whatever the values are)."""
    values = list(values)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


#: Per-episode numeric columns and the dtype each is loaded as (``ch_*`` are COUNT_DTYPE too).
EPISODE_DTYPES: dict[str, Any] = {
    "trial": np.int16,
    "seed": np.int64,
    "reward": np.float64,
    "scored": bool,
    "errors_counted": np.int16,
    "agent_tool_calls": np.int16,
    "user_tool_calls": np.int16,
    "steps": np.int16,
}


def cell_arrays(cols: dict[str, list], ev: dict[str, list]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One cell's parsed column lists as arrays in the dtypes of the frames.

    Converting per cell (not after concatenating every cell's lists) gives the same values,
    element by element, and lets a cell's summary (:mod:`flatscore.analysis.summary`) store
    exactly what the loader would build from its ``episodes.jsonl``. ``reward`` stays float64
    so sums stay exact; ``task_id`` and the event strings are ``str``-ed as they always were.
    """
    ep: dict[str, np.ndarray] = {
        "task_id": _objects(str(t) for t in cols["task_id"]),
        "termination": _objects(cols["termination"]),
    }
    for key, dtype in EPISODE_DTYPES.items():
        ep[key] = np.asarray(cols[key], dtype=dtype)
    for key, values in cols.items():
        if key.startswith("ch_"):
            ep[key] = np.asarray(values, dtype=COUNT_DTYPE)
    evd: dict[str, np.ndarray] = {
        "row": np.asarray(ev["row"], dtype=np.int64),
        "step": np.asarray(ev["step"], dtype=np.int16),
        "counted": np.asarray(ev["counted"], dtype=bool),
    }
    for key in ("channel", "side", "tool"):
        evd[key] = _objects(str(v) for v in ev[key])
    return ep, evd


def _cell_data(
    d: Path, path: Path, channels: list[str]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, set]]:
    """A cell's arrays: from its summary when that is intact and matches the JSONL, else parsed."""
    # imported here: the summary module imports this one
    from flatscore.analysis.summary import read_summary

    cached = read_summary(d)
    if cached is not None:
        return cached
    cols, ev, seen = _parse_episodes(path, channels)
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
        path = d / "episodes.jsonl"
        if not path.exists():
            raise CorruptRecordError(path, None, "episodes.jsonl missing")
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
                "path": str(d),
                "n_lines": len(cols["task_id"]),
            }
        )
        ep_parts.append(cols)
        ev_parts.append(ev)

    cells = pd.DataFrame(metas, columns=[*CELL_COLUMNS, "trials", "seed", "path", "n_lines"])
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
    for k in EVENT_FIELDS:
        if k == "step":
            evd[k] = concat(k, ev_parts, np.int16)
        elif k == "counted":
            evd[k] = concat(k, ev_parts, bool)
        else:
            evd[k] = _cat(concat(k, ev_parts, object))
    error_events = pd.DataFrame(evd)
    return StudyData(cells=cells, episodes=episodes, error_events=error_events)


def load_episodes(cell_dirs: Iterable[Path | str]) -> pd.DataFrame:
    return load_cells(cell_dirs).episodes


def load_error_events(cell_dirs: Iterable[Path | str]) -> pd.DataFrame:
    return load_cells(cell_dirs).error_events


def channel_columns(episodes: pd.DataFrame) -> list[str]:
    """Channel names present in an episodes frame (without the ``ch_`` prefix)."""
    return [c[3:] for c in episodes.columns if c.startswith("ch_")]
