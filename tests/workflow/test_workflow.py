"""The tiny study (.test/config) through Snakemake for real: every stage, MLflow, stale-only reruns.

One module-scoped run (a few minutes on 2 cores) is inspected by several tests; the rerun
tests then change the config the way a user would and check what Snakemake plans and does.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEFILE = REPO / "Snakefile"


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(SNAKEFILE),
        "--directory",
        str(workdir),
        "--configfile",
        str(workdir / "config.yaml"),
        *args,
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if check and result.returncode != 0:
        logs = "\n".join(f"--- {p}\n{p.read_text()[-2000:]}" for p in (workdir / "results" / "logs").rglob("*.log"))
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stderr[-4000:]}\n{logs[-6000:]}")
    return result


def planned_jobs(dry_run_output: str) -> dict[str, int]:
    """Job counts from the 'Job stats' table of a dry run."""
    counts: dict[str, int] = {}
    table = dry_run_output.split("Job stats:")[-1]
    for line in table.splitlines():
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match and match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("study")
    shutil.copy(REPO / ".test" / "config" / "config.yaml", workdir / "config.yaml")
    snakemake(workdir, "--cores", "2")
    return workdir


def _cell_dirs(workdir: Path) -> list[Path]:
    return sorted(p.parent for p in (workdir / "results" / "cells").rglob("metrics.json"))


def _mlflow_runs(workdir: Path, experiment: str):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{workdir / 'results' / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment}"
    return client.search_runs([exp.experiment_id], max_results=10000)


def test_every_cell_has_results_and_an_mlflow_run(study):
    config = yaml.safe_load((study / "config.yaml").read_text())
    cells = _cell_dirs(study)
    expected = (
        len(config["models"])
        * len(config["precisions"])
        * len(config["domains"])
        * len(config["budgets"])
        * len(config["repair"])
        * config["trial_shards"]
    )
    assert len(cells) == expected == 24
    runs = _mlflow_runs(study, config["tracking"]["experiment"])
    cell_runs = [r for r in runs if "flatscore.cell_hash" in r.data.tags]
    by_hash = {r.data.tags["flatscore.cell_hash"]: r for r in cell_runs}
    assert len(cell_runs) == len(by_hash) == expected, "one run per cell, none duplicated"
    for cell in cells:
        info = json.loads((cell / "cell.json").read_text())
        metrics = json.loads((cell / "metrics.json").read_text())
        lines = (cell / "episodes.jsonl").read_text().splitlines()
        assert len(lines) == metrics["n_episodes"] == config["tasks_per_domain"] * config["trials"]
        run = by_hash[info["cell_hash"]]
        assert run.data.params["precision"] == info["precision"]
        assert run.data.params["budget"] == str(info["budget"])
        assert run.data.metrics["n_episodes"] == metrics["n_episodes"]
        assert "success_rate" in run.data.metrics and "channel_invented_tool" in run.data.metrics
        assert run.data.tags.get("flatscore.study_run_id"), "cell runs name their study run"
        # the run spans its episodes' time, not the seconds logging took
        assert run.info.end_time - run.info.start_time >= 1000 * max_episode_wall(cell)


def max_episode_wall(cell) -> float:
    return max(
        json.loads(line)["timing"]["wall_seconds"] for line in (cell / "episodes.jsonl").read_text().splitlines()
    )


def test_tables_cover_every_cell_and_plots_are_images(study):
    agg = study / "results" / "aggregate"
    with open(agg / "success.csv") as handle:
        rows = list(csv.DictReader(handle))
    keys = {(r["precision"], r["domain"], str(r["budget"]), str(r["repair"])) for r in rows}
    assert len(keys) == 24
    from PIL import Image

    for name in ("budget_curves", "amplification", "repair", "first_divergence", "noise_floor", "tost_curve"):
        path = agg / "plots" / f"{name}.png"
        with Image.open(path) as image:
            assert image.width > 100 and image.height > 100
        assert path.stat().st_size > 2000
    assert not list(agg.glob("*.png")), "the figures live once, in plots/"
    summary = (agg / "summary.md").read_text()
    links = re.findall(r"\]\(([^)]+\.png)\)", summary)
    assert links and all((agg / link).is_file() for link in links), links
    assert "K=10" in summary or "K = 10" in summary or "budget" in summary.lower()
    index = (study / "results" / "report" / "index.md").read_text()
    for name in ("budget_curves", "amplification", "repair"):
        assert f"plots/{name}.png)" in index


def test_the_study_run_holds_the_aggregate_tables_and_headline_figures(study):
    config = yaml.safe_load((study / "config.yaml").read_text())
    runs = _mlflow_runs(study, config["tracking"]["experiment"])
    (study_run,) = [r for r in runs if r.data.tags.get("flatscore.kind") == "study"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{study / 'results' / 'mlflow.db'}")
    names = {a.path for a in client.list_artifacts(study_run.info.run_id, "aggregate")}
    for table in ("noise_floor", "mcnemar", "tost", "divergence_summary", "divergence_channels"):
        assert f"aggregate/{table}.csv" in names
    with open(study / "results" / "aggregate" / "divergence_summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 16  # int4 and fp8 vs full in every (domain, budget, repair)
    row = rows[0]
    where = f"{row['model']}/{row['domain']}/K{row['budget']}/repair-{'on' if row['repair'] == 'True' else 'off'}"
    metric = study_run.data.metrics[f"share_diverged/{where}/{row['precision']}"]
    assert metric == float(row["share_diverged"])


def test_budget_counterfactual_equals_the_real_tight_runs(study):
    with open(study / "results" / "aggregate" / "counterfactual.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows, "the K=2 cells must be compared with the K=10 counterfactual"
    for row in rows:
        assert int(row["n"]) > 0 and row["n_agree"] == row["n"], row
        assert float(row["agreement"]) == 1.0, row


def test_quantized_model_is_really_4_bit(study):
    int4 = study / "results" / "models" / "demo" / "int4"
    config = json.loads((int4 / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    full_size = sum(p.stat().st_size for p in (study / "results" / "models" / "demo" / "full").glob("*.safetensors"))
    int4_size = sum(p.stat().st_size for p in int4.glob("*.safetensors"))
    assert int4_size < full_size


def test_the_fp8_arm_was_quantized_by_the_workflow_and_names_its_backend(study):
    """FP8 weights on disk (llmcompressor's FP8 dynamic scheme through the quantize rule), and each
    fp8 cell says it ran in process with the FP8 arithmetic emulated (the rounding is real)."""
    from safetensors import safe_open

    fp8 = study / "results" / "models" / "demo" / "fp8"
    with safe_open(str(next(fp8.glob("*.safetensors"))), "pt") as tensors:
        dtypes = {str(tensors.get_tensor(k).dtype) for k in tensors.keys() if k.endswith("proj.weight")}
    assert dtypes == {"torch.float8_e4m3fn"}, dtypes
    cells = [c for c in _cell_dirs(study) if "/fp8/" in str(c)]
    assert len(cells) == 8
    for cell in cells:
        info = json.loads((cell / "cell.json").read_text())
        assert info["arm_scheme"] == "fp8_dynamic" and "in process" in info["arm_backend"], info
        assert "emulat" in info["arm_compute"], info["arm_compute"]


def test_nothing_changed_means_nothing_to_do(study):
    result = snakemake(study, "-n", "--cores", "2")
    assert "Nothing to be done" in result.stdout + result.stderr


def test_changing_one_budget_reruns_only_its_cells_without_duplicate_runs(study):
    config = yaml.safe_load((study / "config.yaml").read_text())
    config["budgets"] = [10, 3]
    (study / "config.yaml").write_text(yaml.safe_dump(config))
    plan = snakemake(study, "-n", "--cores", "2")
    jobs = planned_jobs(plan.stdout)
    assert jobs.get("episodes") == 12, jobs
    assert not {"train_demo", "quantize", "generate_domain", "expert_demos"} & set(jobs), jobs
    planned_cells = re.findall(r"output: (\S+/metrics\.json)", plan.stdout)
    assert planned_cells and all("/K3/" in p for p in planned_cells)
    snakemake(study, "--cores", "2")
    runs = _mlflow_runs(study, config["tracking"]["experiment"])
    hashes = [r.data.tags["flatscore.cell_hash"] for r in runs if "flatscore.cell_hash" in r.data.tags]
    assert len(hashes) == len(set(hashes)) == 36
    report = study / "report.html"
    snakemake(study, "--report", str(report))
    assert report.stat().st_size > 10_000
