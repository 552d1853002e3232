"""Workflow scale: a generated 1,000-cell config; ``snakemake -n`` < 5 s, no-op rerun < 10 s.

5 models x 2 precisions x 2 domains x 5 budgets x 2 repair x 5 trial shards = 1,000 cells,
validated against workflow/schemas and written as the *embedded* config of a copy of the
workflow (``config/config.yaml``): passed with ``--configfile`` it would be merged into the
default config and its ``demo`` model would add a sixth model (1,200 cells).

Measured, each a fresh ``python -m snakemake`` process:

1. ``snakemake -n`` on an empty results folder: the whole DAG (1,022 jobs) is planned and printed.
2. set-up (not timed as a goal): every output of the DAG is created (``--summary`` lists them;
   the ones the rules declare ``directory()`` are created as folders), then ``--touch`` marks
   them up to date job by job, in DAG order, recording each job's metadata (params, code,
   input, software) as a real run does, so the rerun's rerun-trigger checks have real records.
3. the no-op rerun: ``snakemake --cores 1`` (a real run, not a dry run) must report
   "Nothing to be done" and exit 0; ``snakemake -n`` again is printed beside it.

Hosts with the SLURM client but no reachable controller (this VM: ``.ci/slurm`` installs the
client; slurmctld is not running) pay a fixed stall in every Snakemake start: importing the
SLURM executor plugin runs ``scontrol show config`` (for an option's help text), which waits
about 9 s for the controller. It is nothing the workflow does, so (1) and (3) are also
measured with a stand-in ``scontrol`` first on PATH that answers at once, as a host without
SLURM or with a live controller does; both figures are printed, the goal is judged on both.

    python benchmarks/bench_workflow_scale.py
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from _common import WORKDIR, result

REPO = Path(__file__).resolve().parents[1]
DRY_GOAL_S, NOOP_GOAL_S = 5.0, 10.0
NOTHING_TO_DO = "Nothing to be done"


def make_config() -> dict:
    cfg = yaml.safe_load((REPO / ".test/config/config.yaml").read_text())
    cfg["models"] = {f"demo{i}": {"kind": "demo", "size": "tiny", "seed": i, "prompt": "compact"} for i in range(5)}
    cfg["precisions"] = ["full", "int4"]
    cfg["budgets"] = [10, 5, 3, 2, 1]
    cfg["repair"] = [False, True]
    cfg["trials"] = 5
    cfg["trial_shards"] = 5
    cfg["results"] = "results"  # relative to the copied workflow (the schema requires it)
    return cfg


def n_cells(cfg: dict) -> int:
    return (
        len(cfg["models"])
        * len(cfg["precisions"])
        * len(cfg["domains"])
        * len(cfg["budgets"])
        * len(cfg["repair"])
        * cfg["trial_shards"]
    )


def fast_scontrol_env(shim_dir: Path) -> dict[str, str]:
    """Environment whose ``scontrol`` fails at once (a host without a hung SLURM controller)."""
    shim_dir.mkdir(parents=True, exist_ok=True)
    shim = shim_dir / "scontrol"
    shim.write_text("#!/bin/sh\n# stand-in: a SLURM controller that answers at once (with an error)\nexit 1\n")
    shim.chmod(0o755)
    return {**os.environ, "PATH": f"{shim_dir}{os.pathsep}{os.environ.get('PATH', '')}"}


def snake(workdir: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``snakemake --cores 1 <extra>`` in ``workdir``; (wall s, CPU s of the process, output)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "1", *extra],
        check=False,
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if r.returncode:
        raise RuntimeError(f"snakemake {' '.join(extra)} failed:\n{r.stderr[-3000:]}")
    return wall, cpu, r.stdout + r.stderr


def scontrol_probe_s() -> float | None:
    """Wall time of the SLURM plugin's import-time probe here (None: no SLURM client, no probe)."""
    if shutil.which("sinfo") is None or shutil.which("scontrol") is None:
        return None
    t = time.perf_counter()
    subprocess.run(["scontrol", "show", "config"], check=False, capture_output=True, timeout=30)
    return time.perf_counter() - t


def create_outputs(workdir: Path) -> int:
    """Create every output the DAG would write; return how many ``metrics.json`` (cells) it has."""
    _, _, out = snake(workdir, "--summary")
    lines = [line for line in out.splitlines() if "\t" in line]
    assert lines[0].startswith("output_file\t"), lines[:1]
    files = [line.split("\t")[0] for line in lines[1:]]
    for f in files:
        path = workdir / f
        if not path.suffix:  # plots: the one directory() output; a wrong guess fails --touch loudly
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
    return sum(f.endswith("/metrics.json") for f in files)


def main() -> None:
    from snakemake.utils import validate

    wd = WORKDIR / "workflow_scale"
    shutil.rmtree(wd, ignore_errors=True)
    wd.mkdir(parents=True)
    for item in ("Snakefile", "workflow", "config", "envs", "containers"):
        src = REPO / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, wd / item)
    cfg = make_config()
    validate(dict(cfg), schema=str(REPO / "workflow/schemas/config.schema.yaml"))
    (wd / "config/config.yaml").write_text(yaml.safe_dump(cfg))
    fast = fast_scontrol_env(wd / "fast_scontrol")
    probe = scontrol_probe_s()

    dry, dry_cpu, out = snake(wd, "-n")
    dry_fast, dry_fast_cpu, _ = snake(wd, "-n", env=fast)
    jobs = next((line.split()[-1] for line in out.splitlines() if line.startswith("total")), "?")

    t = time.perf_counter()
    cells = create_outputs(wd)
    assert cells == n_cells(cfg) == 1000, (cells, n_cells(cfg))
    _, _, touched = snake(wd, "--touch", env=fast)
    setup_s = time.perf_counter() - t
    assert "not touched" not in touched, touched[-2000:]
    n_meta = sum(1 for p in (wd / ".snakemake/metadata").iterdir())

    noop, noop_cpu, out = snake(wd)
    assert NOTHING_TO_DO in out, f"the rerun planned work:\n{out[-3000:]}"
    noop_fast, noop_fast_cpu, out_fast = snake(wd, env=fast)
    assert NOTHING_TO_DO in out_fast, out_fast[-3000:]
    noop_dry, _, out_dry = snake(wd, "-n", env=fast)
    assert NOTHING_TO_DO in out_dry, out_dry[-3000:]

    print(
        f"{cells} cells, {jobs} jobs; scontrol probe here: "
        f"{'none (no SLURM client)' if probe is None else f'{probe:.2f} s'}"
    )
    print(
        f"snakemake -n (fresh):  {dry:.2f} s wall / {dry_cpu:.2f} s CPU as is; {dry_fast:.2f} s / "
        f"{dry_fast_cpu:.2f} s CPU with scontrol answering at once (goal < {DRY_GOAL_S:.0f} s)"
    )
    print(f"set-up: outputs created + --touch ({n_meta} metadata records) in {setup_s:.1f} s")
    print(
        f"no-op rerun snakemake --cores 1 ('{NOTHING_TO_DO}'): {noop:.2f} s wall / {noop_cpu:.2f} s CPU as is; "
        f"{noop_fast:.2f} s / {noop_fast_cpu:.2f} s CPU with scontrol answering at once (goal < {NOOP_GOAL_S:.0f} s); "
        f"-n on the finished study {noop_dry:.2f} s"
    )
    ratio = max(dry / DRY_GOAL_S, noop / NOOP_GOAL_S)
    ratio_fast = max(dry_fast / DRY_GOAL_S, noop_fast / NOOP_GOAL_S)
    result(
        "workflow_scale",
        ratio,
        "<=1 (time/goal)",
        ratio <= 1,
        ratio_fast_scontrol=f"{ratio_fast:.3f}",
        dry_s=f"{dry:.2f}",
        noop_s=f"{noop:.2f}",
        dry_fast_s=f"{dry_fast:.2f}",
        noop_fast_s=f"{noop_fast:.2f}",
        dry_cpu_s=f"{dry_cpu:.2f}",
        noop_cpu_s=f"{noop_cpu:.2f}",
    )


if __name__ == "__main__":
    main()
