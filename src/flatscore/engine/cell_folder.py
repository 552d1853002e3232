"""The cell folder's format, owned here: its file names, how to find cells, how to read episodes.

A cell folder holds ``cell.json`` (identity), ``episodes.jsonl`` (one JSON object per line,
appended atomically), ``metrics.json`` (sealed summary), and what later stages add beside them
(the loader's ``episodes.summary.npz``, MLflow's ``tracking.json`` marker). Engine, tracking and
analysis all read these files; they take the names and the one reading policy from here, so the
format can change in one place.

One policy for a bad line, everywhere a cell is *read*: a line is complete only once its newline
is written, so a last line without one is a torn write (:class:`TornEpisodeLine`), and a complete
line that is not a JSON object is corruption (:class:`CorruptEpisodeLine`); both name the file and
the line, and readers refuse the file rather than guess. So does a second line with an episode's
identity, ``(task_id, trial)`` (:func:`duplicate_message`): it would be counted twice. Only the writer cuts a torn tail, when it
resumes a killed run (:class:`flatscore.engine.store.EpisodeStore`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:  # orjson parses episode lines several times faster; the standard library is the fallback
    import orjson

    loads_line = orjson.loads
    DECODE_ERRORS: tuple[type[BaseException], ...] = (orjson.JSONDecodeError, ValueError, TypeError)
except ImportError:  # pragma: no cover - orjson is a dependency
    loads_line = json.loads
    DECODE_ERRORS = (ValueError, TypeError)

CELL_FILE = "cell.json"
EPISODES_FILE = "episodes.jsonl"
METRICS_FILE = "metrics.json"
SUMMARY_FILE = "episodes.summary.npz"
MARKER_FILE = "tracking.json"
CHANNEL_TABLE_FILE = "channels_by_task.csv"
#: Held (``flock``) by the one process writing the folder; it holds the holder's pid, host and start.
WRITER_LOCK_FILE = ".writer.lock"
#: Where a rerun with changed settings moves the stale files: ``.superseded/<old cell hash>/``.
SUPERSEDED_DIR = ".superseded"
#: The folder under a results folder that holds every cell (nested or flat below it).
CELLS_DIR = "cells"


#: The fields that identify an episode in its cell: every record has them.
IDENTITY_FIELDS = ("task_id", "trial")


class CorruptEpisodeLine(ValueError):
    """A complete line of an ``episodes.jsonl`` is not a JSON object."""

    def __init__(self, path: Path, lineno: int, reason: str) -> None:
        self.path, self.lineno, self.reason = Path(path), lineno, reason
        super().__init__(f"{self.path}:{lineno}: {reason}")


class TornEpisodeLine(CorruptEpisodeLine):
    """The last line of an ``episodes.jsonl`` lacks its newline: a write was cut off."""


def duplicate_message(path: str | os.PathLike[str], first: int, second: int, task_id: Any, trial: Any) -> str:
    """The one wording for an episode stored twice (its identity, (task_id, trial), is unique in a cell)."""
    return (
        f"{path}: lines {first} and {second} are the same episode (task_id={task_id!r}, trial={trial}); "
        "an episode is stored once (a copied line, or two writers)"
    )


def iter_cell_dirs(root: str | os.PathLike[str]) -> Iterator[Path]:
    """Every cell folder (one holding ``cell.json``) under ``root``, at any depth, sorted.

    ``root`` is a results folder (its ``cells/`` is searched) or a folder of cells itself. The
    workflow nests cells (``cells/<model>/<precision>/<domain>/K<b>/repair-<x>/shard<i>``), so
    the search is recursive; stale results moved under ``.superseded/`` are not cells.
    """
    root = Path(root)
    base = root / CELLS_DIR if (root / CELLS_DIR).is_dir() else root
    if not base.is_dir():
        return
    for path in sorted(base.rglob(CELL_FILE)):
        if path.is_file() and SUPERSEDED_DIR not in path.relative_to(base).parts:
            yield path.parent


def split_episode_lines(path: str | os.PathLike[str], raw: bytes) -> list[bytes]:
    """The complete lines of ``raw`` (``path``'s bytes), blank ones included so that list index + 1
    is the line number; raises :class:`TornEpisodeLine` on a torn tail.

    For readers that loop over the lines themselves because they are hot (the analysis loader
    parses millions of lines); everyone else uses :func:`iter_episode_lines`.
    """
    lines = raw.split(b"\n")
    if lines[-1].strip():
        raise TornEpisodeLine(Path(path), len(lines), "last line has no newline (a write was cut off)")
    lines.pop()
    return lines


def iter_episode_lines(path: str | os.PathLike[str]) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` for each non-blank line; raises :class:`TornEpisodeLine` on a torn tail."""
    path = Path(path)
    for lineno, line in enumerate(split_episode_lines(path, path.read_bytes()), start=1):
        if line.strip():
            yield lineno, line


def parse_episode_line(path: Path, lineno: int, line: bytes) -> dict[str, Any]:
    """One line as a dict, or :class:`CorruptEpisodeLine` naming the file, line and reason.

    orjson first (fast); a line it refuses is tried with the standard library, which also reads
    the ``NaN``/``Infinity`` that :class:`~flatscore.engine.records.EpisodeRecord`'s ``json.dumps``
    may write, so every line the writer writes is read back.
    """
    try:
        record = loads_line(line)
    except DECODE_ERRORS as exc:
        try:  # the writer's json.dumps writes NaN/Infinity, which orjson refuses: they are valid lines
            record = json.loads(line)
        except ValueError:
            raise CorruptEpisodeLine(path, lineno, f"not valid JSON ({exc})") from None
    if not isinstance(record, dict):
        raise CorruptEpisodeLine(path, lineno, f"expected a JSON object, got {type(record).__name__}")
    missing = [key for key in IDENTITY_FIELDS if key not in record]
    if missing:  # an episode is known by these; without them it is not an episode record
        raise CorruptEpisodeLine(path, lineno, f"not an episode record (no {', '.join(missing)})")
    return record


def read_episode_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every episode record of ``path`` in file order, under the one policy above."""
    path = Path(path)
    for lineno, line in iter_episode_lines(path):
        yield parse_episode_line(path, lineno, line)


def read_json(path: str | os.PathLike[str]) -> Any:
    """A cell's JSON file (cell.json, metrics.json, the marker)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
