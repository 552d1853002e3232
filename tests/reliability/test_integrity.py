"""Integrity: `flatscore aggregate` refuses a cell whose results cannot be trusted (exit 2, one clear
line naming the cell and the problem) and leaves what an earlier aggregate wrote untouched."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CELL = [
    "episodes",
    "--domain",
    "retail",
    "--agent",
    "noisy",
    "--noise",
    "invented_tool=0.2,tool_error=0.1",
    "--tasks",
    "first:6",
    "--trials",
    "2",
    "--seed",
    "2",
    "--no-progress",
]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flatscore.cli", *args], capture_output=True, text=True)


def _main(*args: str) -> subprocess.CompletedProcess:
    """`flatscore` in-process (the aggregate's imports cost seconds per process on a loaded box)."""
    import contextlib
    import io

    from flatscore.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> tuple[Path, list[Path], Path]:
    """Two good cells (K=10, K=2) and an aggregate written from them."""
    from flatscore.domains import domain_class

    root = tmp_path_factory.mktemp("integrity")
    data = domain_class("retail").generate(root / "data", seed=4, n_tasks=20)
    dirs = []
    for budget in ("10", "2"):
        out = root / "cells" / f"K{budget}"
        r = _cli(*CELL, "--budget", budget, "--data", str(data), "--out", str(out))
        assert r.returncode == 0, r.stderr
        dirs.append(out)
    agg = root / "aggregate"
    r = _cli("aggregate", "--cells", *map(str, dirs), "--out", str(agg))
    assert r.returncode == 0, r.stderr[-3000:]
    return root, dirs, agg


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()
    }


def _edit_line(path: Path, index: int, change) -> None:
    lines = path.read_text().splitlines()
    record = json.loads(lines[index])
    change(record)
    lines[index] = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    path.write_text("\n".join(lines) + "\n")


def _flip_reward(record: dict) -> None:
    record["reward"] = 1.0 - record["reward"]


TAMPER = {
    "truncated_last_line": (
        lambda d: (d / "episodes.jsonl").write_bytes((d / "episodes.jsonl").read_bytes()[:-40]),
        "does not match its checksum",
    ),
    "dropped_episode": (
        lambda d: (d / "episodes.jsonl").write_text(
            "".join((d / "episodes.jsonl").read_text().splitlines(keepends=True)[:-1])
        ),
        "does not match its checksum",
    ),
    "edited_reward": (lambda d: _edit_line(d / "episodes.jsonl", 0, _flip_reward), "does not match its checksum"),
    "appended_foreign_line": (
        lambda d: (d / "episodes.jsonl").write_text(
            (d / "episodes.jsonl").read_text() + json.dumps({"task_id": "x", "trial": 0, "cell": "other"}) + "\n"
        ),
        "does not match its checksum",
    ),
    "cell_hash_swapped": (
        lambda d: (d / "cell.json").write_text(
            json.dumps({**json.loads((d / "cell.json").read_text()), "cell_hash": "0123456789abcdef"})
        ),
        "does not hash to its cell_hash",
    ),
    "metrics_deleted": (lambda d: (d / "metrics.json").unlink(), "metrics.json is missing"),
    "metrics_garbled": (lambda d: (d / "metrics.json").write_text("{oops"), "not valid JSON"),
    "episodes_deleted": (lambda d: (d / "episodes.jsonl").unlink(), "episodes.jsonl is missing"),
}


def _resealed_foreign_cell(d: Path) -> None:
    """Episodes from another cell with a re-computed checksum: the per-line cell field still tells."""
    from flatscore.engine.cell import episodes_sha256

    _edit_line(d / "episodes.jsonl", 2, lambda r: r.__setitem__("cell", "feedfacefeedface"))
    metrics = json.loads((d / "metrics.json").read_text())
    metrics["episodes_sha256"] = episodes_sha256(d / "episodes.jsonl")
    (d / "metrics.json").write_text(json.dumps(metrics))


def _resealed_count(d: Path) -> None:
    from flatscore.engine.cell import episodes_sha256

    (d / "episodes.jsonl").write_text("".join((d / "episodes.jsonl").read_text().splitlines(keepends=True)[:-2]))
    metrics = json.loads((d / "metrics.json").read_text())
    metrics["episodes_sha256"] = episodes_sha256(d / "episodes.jsonl")
    (d / "metrics.json").write_text(json.dumps(metrics))


def _resealed_duplicate(d: Path) -> None:
    """An episode's line copied to the end and the checksum and count re-sealed: only the
    (task_id, trial) key tells that one episode would be counted twice."""
    from flatscore.engine.cell import episodes_sha256

    path = d / "episodes.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines) + lines[2])
    metrics = json.loads((d / "metrics.json").read_text())
    metrics["episodes_sha256"] = episodes_sha256(path)
    metrics["n_episodes"] += 1
    (d / "metrics.json").write_text(json.dumps(metrics))


TAMPER["resealed_duplicate_episode"] = (_resealed_duplicate, "are the same episode")
TAMPER["resealed_foreign_line"] = (_resealed_foreign_cell, "belongs to cell feedfacefeedface")
TAMPER["resealed_dropped_episodes"] = (_resealed_count, "episodes on disk, metrics.json counted")


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_aggregate_refuses_a_tampered_cell_and_touches_nothing(case, cells, tmp_path):
    _, dirs, agg = cells
    work = tmp_path / "cells"
    copies = [shutil.copytree(d, work / d.name) for d in dirs]
    out = tmp_path / "aggregate"
    shutil.copytree(agg, out)
    before_out = _snapshot(out)
    tamper, needle = TAMPER[case]
    tamper(copies[1])
    before_cells = _snapshot(work)
    run = _cli if case == "edited_reward" else _main  # one case as a real process, the rest in-process
    result = run("aggregate", "--cells", *map(str, copies), "--out", str(out))
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flatscore: error:"), result.stderr[-2000:]
    assert needle in lines[0] and str(copies[1]) in lines[0], lines[0]
    assert "Traceback" not in result.stderr
    assert _snapshot(out) == before_out, "a refused aggregate changed what was already written"
    assert _snapshot(work) == before_cells, "a refused aggregate changed a cell"


def test_untampered_cells_still_aggregate(cells, tmp_path):
    _, dirs, _ = cells
    result = _main("aggregate", "--cells", *map(str, dirs), "--out", str(tmp_path / "agg"))
    assert result.returncode == 0, result.stderr[-2000:]
    print(f"\nFIGURE integrity: {len(TAMPER)} tamperings refused through `flatscore aggregate`")


def test_relabelled_budget_is_refused(cells, tmp_path):
    """cell.json says K=10 but its identity (and its episodes) say K=2: refused before any loading."""
    _, dirs, _ = cells
    copy = shutil.copytree(dirs[1], tmp_path / "K2")
    cell = json.loads((copy / "cell.json").read_text())
    cell["budget"] = 10  # keep the hash
    (copy / "cell.json").write_text(json.dumps(cell))
    result = _main("aggregate", "--cells", str(dirs[0]), str(copy), "--out", str(tmp_path / "agg"))
    assert result.returncode == 2 and "budget=10 but its identity has 2" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "agg").exists() or not any((tmp_path / "agg").iterdir())


def test_edited_identity_with_the_old_hash_is_refused(cells, tmp_path):
    _, dirs, _ = cells
    copy = shutil.copytree(dirs[1], tmp_path / "K2")
    cell = json.loads((copy / "cell.json").read_text())
    cell["precision"] = "int4"  # relabel the arm, keep the hash
    (copy / "cell.json").write_text(json.dumps(cell))
    result = _main("aggregate", "--cells", str(dirs[0]), str(copy), "--out", str(tmp_path / "agg"))
    assert result.returncode == 2, result.stdout[-500:]
