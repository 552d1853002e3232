"""The cell folder's one owner: recursive discovery and one policy for a torn or corrupt line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from flatscore.engine.cell_folder import (
    CELL_FILE,
    CorruptEpisodeLine,
    TornEpisodeLine,
    iter_cell_dirs,
    read_episode_records,
)


def _cell(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / CELL_FILE).write_text("{}")
    return path


def test_finds_nested_workflow_cells_and_skips_superseded(tmp_path: Path) -> None:
    nested = _cell(tmp_path / "cells" / "demo" / "int4" / "retail" / "K10" / "repair-off" / "shard0")
    flat = _cell(tmp_path / "cells" / "expert")
    _cell(nested / ".superseded" / "0123abcd")
    (tmp_path / "cells" / "not-a-cell").mkdir()
    assert list(iter_cell_dirs(tmp_path)) == sorted([nested, flat])
    assert list(iter_cell_dirs(tmp_path / "cells")) == sorted([nested, flat])
    assert list(iter_cell_dirs(tmp_path / "missing")) == []


def test_reads_records_in_order_skipping_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"task_id": "a", "trial": 0}\n\n{"task_id": "b", "trial": 1}\n')
    assert [r["task_id"] for r in read_episode_records(path)] == ["a", "b"]


def test_torn_last_line_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"task_id": "a", "trial": 0}\n{"task_id": "b", "tri')
    with pytest.raises(TornEpisodeLine, match=r"episodes.jsonl:2: last line has no newline"):
        list(read_episode_records(path))


@pytest.mark.parametrize("bad", ["garbage", "[1, 2]", '"text"'])
def test_corrupt_complete_line_is_refused(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"task_id": "a", "trial": 0}\n' + bad + "\n")
    with pytest.raises(CorruptEpisodeLine, match=r"episodes.jsonl:2: "):
        list(read_episode_records(path))


def test_reads_the_nan_that_the_writers_json_dumps_writes(tmp_path: Path) -> None:
    """EpisodeRecord lines are json.dumps'ed (NaN/Infinity allowed); orjson refuses those, the reader must not."""
    path = tmp_path / "episodes.jsonl"
    path.write_text('{"task_id": "a", "trial": 0, "reward": NaN, "wall_s": Infinity}\n')
    (record,) = read_episode_records(path)
    assert math.isnan(record["reward"]) and math.isinf(record["wall_s"])
