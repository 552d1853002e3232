"""Workflow scale: a generated 1,000-cell config; ``snakemake -n`` < 5 s, no-op rerun < 10 s.

5 models x 2 precisions x 2 domains x 5 budgets x 2 repair x 5 trial shards = 1,000 cells,
written next to a copy of the workflow and validated against workflow/schemas (the Snakefile
validates it too). Times: (1) ``snakemake -n`` on a fresh results folder (the whole DAG),
(2) ``snakemake --touch`` creates every output, (3) ``snakemake -n`` again: the no-op rerun.
Aggregation of 1M episodes is bench_aggregate.py. Ratios printed = time / goal (<= 1 passes).

    python benchmarks/bench_workflow_scale.py
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from _common import WORKDIR, result

REPO = Path(__file__).resolve().parents[1]


def make_config(out: Path) -> dict:
    cfg = yaml.safe_load((REPO / ".test/config/config.yaml").read_text())
    cfg["models"] = {f"demo{i}": {"kind": "demo", "size": "tiny", "seed": i, "prompt": "compact"} for i in range(5)}
    cfg["precisions"] = ["full", "int4"]
    cfg["budgets"] = [10, 5, 3, 2, 1]
    cfg["repair"] = [False, True]
    cfg["trials"] = 5
    cfg["trial_shards"] = 5
    cfg["results"] = "results"  # relative to the copied workflow (the schema requires it)
    return cfg


def snake(workdir: Path, *extra: str) -> float:
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "bench_config.yaml", *extra],
                       cwd=workdir, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"snakemake {' '.join(extra)} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t


def main() -> None:
    from snakemake.utils import validate

    wd = WORKDIR / "workflow_scale"
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    for item in ("Snakefile", "workflow", "config", "envs", "containers"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / item)
    cfg = make_config(wd)
    validate(dict(cfg), schema=str(REPO / "workflow/schemas/config.schema.yaml"))
    (wd / "bench_config.yaml").write_text(yaml.safe_dump(cfg))
    n_cells = len(cfg["models"]) * 2 * len(cfg["domains"]) * 5 * 2 * cfg["trial_shards"]
    dry = snake(wd, "-n")
    # write every output of the DAG (--summary lists them), then --touch fixes their mtimes
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "bench_config.yaml",
                          "--summary"], cwd=wd, check=True, capture_output=True, text=True).stdout
    files = [line.split("\t")[0] for line in out.splitlines()[1:] if line.strip()]
    for f in files:
        path = wd / f
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    try:
        touch_s = snake(wd, "--touch") + time.perf_counter() - t
        noop = snake(wd, "-n")
    except RuntimeError as exc:  # known gap: see benchmarks/README.md
        print(f"{dry:.2f} s dry run; no-op rerun NOT measured: {exc}")
        result("workflow_scale", dry / 5, "<=1 (time/goal)", False, dry_s=f"{dry:.2f}", noop_s="not-measured")
        return
    print(f"{n_cells} cells: snakemake -n {dry:.2f} s (goal < 5 s), --touch {touch_s:.2f} s, "
          f"no-op rerun (-n after touch) {noop:.2f} s (goal < 10 s)")
    ok = dry < 5 and noop < 10
    result("workflow_scale", max(dry / 5, noop / 10), "<=1 (time/goal)", ok, dry_s=f"{dry:.2f}", noop_s=f"{noop:.2f}")


if __name__ == "__main__":
    main()
