"""Benchmark: load + aggregate 1,000,000 synthetic episodes; goals < 30 s wall and < 4 GB peak.

Writes real cell folders (cell.json + episodes.jsonl with noisy-expert-like records, messages
included) with the same generator the tests use, then times the real path the workflow runs:
``aggregate(cell_dirs, out_dir)`` = load every JSONL + all tables + plots + summary.

    python benchmarks/bench_aggregate.py [--episodes 1000000] [--workdir /tmp/flatscore_bench] [--keep]

Peak memory is the process's max RSS (resource.getrusage), measured in a fresh child process
that only aggregates (generation does not count against it).

The cells carry ``episodes.summary.npz`` as the episodes command leaves them (write_study
writes them with the same function; their cost is in the generation time, not the goal). A
second child then aggregates the same cells with the summaries removed (cells from before
summaries: every JSONL parsed line by line) for the comparison; the goal is judged on the first.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import result

GOAL_S = 30.0
GOAL_BYTES = 4 * 1024**3


def generate(workdir: Path, episodes: int) -> list[Path]:
    from flatscore.analysis.synthetic import SyntheticStudy, write_study

    # 2 models x 3 precisions x 2 domains x 3 budgets x 2 repair = 72 cells; tasks x trials fill the rest
    models, precs, domains, budgets, repairs = (
        ("m7b", "m8b"),
        ("full", "int8", "int4"),
        ("retail", "telecom"),
        (10, 5, 2),
        (False, True),
    )
    n_cells = len(models) * len(precs) * len(domains) * len(budgets) * len(repairs)
    trials = 8
    n_tasks = max(2, math.ceil(episodes / (n_cells * trials)))
    spec = SyntheticStudy(
        models=models,
        precisions=precs,
        domains=domains,
        budgets=budgets,
        repairs=repairs,
        n_tasks=n_tasks,
        trials=trials,
        study="bench",
    )
    return write_study(spec, workdir / "results")


def child(workdir: Path) -> None:
    """Aggregate only; print a JSON line with wall time, phases and peak RSS."""
    t0 = time.perf_counter()
    from flatscore.analysis import aggregate, find_cell_dirs, load_cells

    t_import = time.perf_counter() - t0
    dirs = find_cell_dirs(workdir / "results")
    t1 = time.perf_counter()
    paths = aggregate(dirs, workdir / "aggregate")
    wall = time.perf_counter() - t1
    # loader alone, on a realistic share (a quarter of the cells), for the phase split
    t2 = time.perf_counter()
    data = load_cells(dirs[: max(1, len(dirs) // 4)])
    load_share = time.perf_counter() - t2
    ru = resource.getrusage(resource.RUSAGE_SELF)
    peak = ru.ru_maxrss * 1024  # Linux: KiB
    cpu = ru.ru_utime + ru.ru_stime
    print(
        json.dumps(
            {
                "wall_s": wall,
                "import_s": t_import,
                "peak_rss_bytes": peak,
                "cpu_s": cpu,
                "cells": len(dirs),
                "load_quarter_s": load_share,
                "episodes_quarter": len(data.episodes),
                "outputs": len(paths),
            }
        )
    )


def run_child(workdir: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--workdir", str(workdir)],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ.copy(),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=1_000_000)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/flatscore_bench"))
    ap.add_argument("--keep", action="store_true", help="keep the generated cells")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.workdir)
        return
    if args.workdir.exists():
        shutil.rmtree(args.workdir)
    t = time.perf_counter()
    dirs = generate(args.workdir, args.episodes)
    gen_s = time.perf_counter() - t
    n_ep = sum((d / "episodes.jsonl").read_bytes().count(b"\n") for d in dirs)
    size = sum((d / "episodes.jsonl").stat().st_size for d in dirs)
    print(f"generated {n_ep:,} episodes in {len(dirs)} cells ({size / 1e9:.2f} GB JSONL) in {gen_s:.1f} s")
    load_start = os.getloadavg()[0]
    res = run_child(args.workdir)
    wall, peak = res["wall_s"], res["peak_rss_bytes"]
    print(
        f"aggregate(): wall {wall:.1f} s (goal < {GOAL_S:.0f} s: ratio {wall / GOAL_S:.2f}); "
        f"peak RSS {peak / 1024**3:.2f} GB (goal < 4 GB: ratio {peak / GOAL_BYTES:.2f}); "
        f"+ {res['import_s']:.1f} s imports; process CPU time {res['cpu_s']:.1f} s (incl. the loader re-run), "
        f"load average {load_start:.1f} at start, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores"
    )
    print(
        f"loader alone: {res['episodes_quarter']:,} episodes in {res['load_quarter_s']:.1f} s "
        f"({res['episodes_quarter'] / res['load_quarter_s']:,.0f} episodes/s)"
    )
    from flatscore.analysis.summary import SUMMARY_FILE

    for d in dirs:
        (d / SUMMARY_FILE).unlink()
    old = run_child(args.workdir)
    print(
        f"same cells without summaries (parsed line by line): wall {old['wall_s']:.1f} s, "
        f"peak RSS {old['peak_rss_bytes'] / 1024**3:.2f} GB, process CPU {old['cpu_s']:.1f} s; "
        f"with / without = {wall / old['wall_s']:.2f}"
    )
    print(f"{'PASS' if wall < GOAL_S and peak < GOAL_BYTES else 'MISS'}")
    result(
        "aggregate",
        max(wall / GOAL_S, peak / GOAL_BYTES),
        "<=1 (max of wall/30s, peak/4GB)",
        wall < GOAL_S and peak < GOAL_BYTES,
        wall_s=f"{wall:.1f}",
        peak_gb=f"{peak / 1024**3:.2f}",
        cpu_s=f"{res['cpu_s']:.1f}",
        wall_without_summaries_s=f"{old['wall_s']:.1f}",
        load1_start=f"{load_start:.1f}",
    )
    if not args.keep:
        shutil.rmtree(args.workdir)


if __name__ == "__main__":
    main()
