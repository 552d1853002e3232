"""A cell's episodes as columns (``episodes.summary.npz``): what the loader needs, parsed once.

Why: aggregating a study re-parsed every ``episodes.jsonl`` in full, messages included, to
keep a dozen scalar fields and the error events: most of the aggregate's time for 1M episodes.
The episodes command now writes this summary when a cell ends (before ``metrics.json``), with
the same parser and conversions the loader uses, so reading it gives the same frames.

The JSONL stays the record; the summary is only a cache of it, and is used only when it is
provably of the current file: it stores the SHA-256 and size of the ``episodes.jsonl`` it was
built from and a digest of its own arrays, and :func:`read_summary` returns ``None`` (so the
loader parses the JSONL as before, with its error messages) whenever any of them disagrees, the
format or the channel list changed, or the file does not load. The integrity checks of the
aggregate stage (:mod:`flatscore.engine.integrity`) are unchanged and still read the JSONL.

No summary is written for a cell the loader would not read cleanly (corrupt line, a channel
outside :data:`~flatscore.engine.records.CHANNELS`, non-string terminations): those keep the
line-by-line path, errors included.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from flatscore.analysis.episodes_parser import CorruptRecordError, cell_arrays, parse_episodes
from flatscore.atomic_write import write_atomic
from flatscore.engine.cell import episodes_sha256
from flatscore.engine.cell_folder import EPISODES_FILE, SUMMARY_FILE, read_episode_records
from flatscore.engine.records import CHANNELS

__all__ = ["EPISODES_FILE", "FORMAT", "SUMMARY_FILE", "build_summary", "read_summary", "write_summary"]
FORMAT = 1
#: Columns stored as (sorted unique strings, int32 codes): npz holds no Python objects.
_STRING_COLUMNS = ("ep_task_id", "ep_termination", "ev_channel", "ev_side", "ev_tool")


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(f"{key}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _only_known_channels(path: Path) -> bool:
    """Whether every record's channels are known ones (the loader spots others only by count)."""
    known = set(CHANNELS)
    return all(set(record["channels"]) <= known for record in read_episode_records(path))


def build_summary(path: Path) -> dict[str, np.ndarray] | None:
    """The arrays of ``path``'s summary, or None where the cell must keep the line-by-line path."""
    path = Path(path)
    try:
        cols, ev, seen = parse_episodes(path, list(CHANNELS))
        ep, evd = cell_arrays(cols, ev)
    except (CorruptRecordError, ValueError, TypeError, OverflowError):
        return None
    if not _only_known_channels(path) or not all(isinstance(v, str) for v in ep["termination"]):
        return None
    arrays: dict[str, np.ndarray] = {f"ep_{k}": v for k, v in ep.items()}
    arrays.update({f"ev_{k}": v for k, v in evd.items()})
    for key in _STRING_COLUMNS:
        values = arrays.pop(key)
        cats, codes = np.unique(values.astype(str), return_inverse=True)
        if not np.array_equal(cats.astype(object)[codes], values):  # e.g. trailing NULs numpy would drop
            return None
        arrays[f"{key}__cats"], arrays[f"{key}__codes"] = cats, codes.astype(np.int32)
    arrays["seen"] = np.array(json.dumps({k: sorted(v, key=repr) for k, v in seen.items()}))
    return arrays


def write_summary(cell_dir: Path) -> Path | None:
    """Write ``<cell_dir>/episodes.summary.npz`` for its current ``episodes.jsonl`` (atomically).

    Returns the path, or None (and removes a stale summary) where the cell keeps the
    line-by-line path. Call it once the JSONL is complete: the summary is bound to its bytes.
    """
    cell_dir = Path(cell_dir)
    episodes, target = cell_dir / EPISODES_FILE, cell_dir / SUMMARY_FILE
    if not episodes.exists():
        return None
    size, sha = episodes.stat().st_size, episodes_sha256(episodes)
    arrays = build_summary(episodes)
    if arrays is None:
        target.unlink(missing_ok=True)
        return None
    arrays["format"] = np.array(FORMAT)
    arrays["channels"] = np.array(list(CHANNELS))
    arrays["episodes_sha256"] = np.array(sha)
    arrays["episodes_size"] = np.array(size)
    arrays["digest"] = np.array(_digest(arrays))
    write_atomic(target, lambda handle: np.savez(handle, **arrays), binary=True)
    return target


def read_summary(cell_dir: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, set]] | None:
    """(episode arrays, event arrays, seen values) as the loader builds them, or None.

    None whenever the summary is absent, unreadable, of another format or channel list, edited
    (its digest), or not of the current ``episodes.jsonl`` (size, then SHA-256).
    """
    cell_dir = Path(cell_dir)
    target, episodes = cell_dir / SUMMARY_FILE, cell_dir / EPISODES_FILE
    if not target.exists():
        return None
    try:
        with np.load(target, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
        digest = str(arrays.pop("digest"))
        if (
            _digest(arrays) != digest
            or int(arrays["format"]) != FORMAT
            or arrays["channels"].tolist() != list(CHANNELS)
            or int(arrays["episodes_size"]) != episodes.stat().st_size
            or str(arrays["episodes_sha256"]) != episodes_sha256(episodes)
        ):
            return None
        seen = {k: set(v) for k, v in json.loads(str(arrays["seen"])).items()}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for key in _STRING_COLUMNS:  # object arrays of str, as the parser's path builds them
        arrays[key] = arrays.pop(f"{key}__cats").astype(object)[arrays.pop(f"{key}__codes")]
    ep = {k[3:]: v for k, v in arrays.items() if k.startswith("ep_")}
    ev = {k[3:]: v for k, v in arrays.items() if k.startswith("ev_")}
    return ep, ev, seen
