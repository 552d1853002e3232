"""Real SLURM runs: Snakemake's slurm executor against the one-node cluster of .ci/slurm/setup.sh.

Nothing is mocked: jobs go through sbatch to a running slurmctld/slurmd. Skipped, saying why,
where SLURM is not installed or no node is idle. Set it up with `sudo bash .ci/slurm/setup.sh`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CI_PROFILE = REPO / "profiles" / "slurm-ci"
TIMEOUT = 600

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(4 * TIMEOUT)]


def _slurm_reason() -> str | None:
    """Why SLURM cannot be used here, or None if a node is idle."""
    for tool in ("sinfo", "sbatch", "squeue", "scontrol"):
        if shutil.which(tool) is None:
            return f"`{tool}` not found: no SLURM here (run `sudo bash .ci/slurm/setup.sh`)"
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return "`sinfo` timed out: slurmctld not answering (run `sudo bash .ci/slurm/setup.sh`)"
    if out.returncode != 0:
        return f"`sinfo` failed ({out.stderr.strip() or out.returncode}): slurmctld not running?"
    states = [line.split()[1] for line in out.stdout.splitlines() if len(line.split()) == 2]
    if not any(s.rstrip("*") in ("idle", "mixed") for s in states):
        return f"no idle SLURM node (sinfo node states: {states or 'none'})"
    return None


@pytest.fixture(scope="module")
def slurm() -> None:
    reason = _slurm_reason()
    if reason:
        pytest.skip(reason)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # The profile reads partition/account from FLATSCORE_SLURM_*; CI defaults are debug/root.
    for var in [k for k in env if k.startswith("SLURM_")]:
        env.pop(var)
    return env


def _snakemake(
    workdir: Path, *args: str, profile: Path = CI_PROFILE, timeout: int = TIMEOUT
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", "--profile", str(profile), "--directory", str(workdir), *args]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout, env=_env())


SUBMITTED = re.compile(r"submitted with SLURM jobid (\d+)")


def _job_ids(log: str) -> list[str]:
    return SUBMITTED.findall(log)


def _job_record(job_id: str) -> dict[str, str]:
    """`scontrol show job` as a dict (finished jobs stay visible for MinJobAge = 300 s)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, f"scontrol does not know job {job_id}: {out.stderr}"
    return dict(tok.split("=", 1) for tok in out.stdout.split() if "=" in tok)


TOY = textwrap.dedent(
    """
    rule all:
        input: "out/b.txt", "out/c.txt"

    rule a:
        output: "out/a.txt"
        resources: mem_mb=200, runtime=5
        shell: "echo job=${{SLURM_JOB_ID:-none}} host=$(hostname) > {output}"

    rule b:
        input: "out/a.txt"
        output: "out/b.txt"
        resources: mem_mb=200, runtime=5
        shell: "cat {input} > {output}; echo job=${{SLURM_JOB_ID:-none}} >> {output}"

    rule c:
        output: "out/c.txt"
        resources: mem_mb=200, runtime=5
        shell: "echo c > {output}"

    rule broken:
        output: "out/broken.txt"
        resources: mem_mb=200, runtime=5
        shell: "echo about to fail >&2; exit 3"
    """
)


def test_toy_workflow_runs_through_sbatch(slurm: None, tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(TOY)
    res = _snakemake(tmp_path)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    for name in ("a", "b", "c"):
        assert (tmp_path / "out" / f"{name}.txt").is_file(), name
    ids = _job_ids(log)
    assert len(ids) == 3, f"expected 3 sbatch submissions (a, b, c), saw {ids}:\n{log[-3000:]}"
    for job_id in ids:
        rec = _job_record(job_id)
        assert rec["JobState"] == "COMPLETED", rec
        assert rec["Partition"] == "debug", rec
        assert rec["WorkDir"] == str(tmp_path), rec
    # The rule's shell really ran inside a SLURM allocation whose id sbatch returned.
    a_job = (tmp_path / "out" / "a.txt").read_text().split()[0].split("=")[1]
    assert a_job in ids, (a_job, ids)
    b_lines = (tmp_path / "out" / "b.txt").read_text().splitlines()
    assert b_lines[-1].split("=")[1] in ids and b_lines[-1].split("=")[1] != a_job


def test_failing_job_is_reported_failed(slurm: None, tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(TOY)
    res = _snakemake(tmp_path, "out/broken.txt", "out/c.txt")
    log = res.stdout + res.stderr
    assert res.returncode != 0, log[-4000:]
    assert (tmp_path / "out" / "c.txt").is_file(), "keep-going: the healthy job still ran"
    assert not (tmp_path / "out" / "broken.txt").exists()
    ids = _job_ids(log)
    assert len(ids) == 2, ids
    states = {job_id: _job_record(job_id)["JobState"] for job_id in ids}
    assert sorted(states.values()) == ["COMPLETED", "FAILED"], states
    failed = next(j for j, s in states.items() if s == "FAILED")
    # The plugin reports the failure with the SLURM job id and state (read with squeue) ...
    assert f"SLURM-job '{failed}' failed, SLURM status is: 'FAILED'" in log, log[-3000:]
    assert "Error in rule broken" in log
    # ... and keeps the failed job's SLURM log, which holds the rule's own stderr and exit status.
    slurm_log = tmp_path / "logs" / "slurm" / "rule_broken" / f"{failed}.log"
    assert slurm_log.is_file(), sorted(map(str, (tmp_path / "logs").rglob("*")))
    text = slurm_log.read_text()
    assert "about to fail" in text and "non-zero exit status 3" in text, text[-2000:]


# ---- the real workflow ------------------------------------------------------------------------

WORKFLOW = REPO / "Snakefile"
TEST_CONFIG = REPO / ".test" / "config" / "config.yaml"
TIMING = re.compile(r"(time|seconds|duration|elapsed|wall|_s$|per_s|per_sec|tokens_s|timestamp|date|run_id)", re.I)


def _comparable(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not TIMING.search(k) and not k.endswith(("hash", "sha256"))}


def _aggregate_csvs(results: Path) -> dict[str, Path]:
    # the aggregate folder itself: a copy logged as MLflow artifacts lands under results/ with a
    # sqlite store but on the server with a tracking server, and is not the run's output
    return {
        str(p.relative_to(results)): p for p in sorted(results.rglob("aggregate/*.csv")) if "mlartifacts" not in p.parts
    }


def _frame(path: Path):
    import pandas as pd

    df = pd.read_csv(path)
    keep = [c for c in df.columns if not TIMING.search(str(c))]
    df = df[keep]
    return df.sort_values(list(df.columns)).reset_index(drop=True) if len(df.columns) else df


def _ci_threads() -> list[str]:
    """The CI profile's set-threads, as CLI arguments: the local run uses the same thread counts,
    so that float reductions (and with them greedy decoding) are the same in both runs."""
    import yaml

    prof = yaml.safe_load((CI_PROFILE / "config.yaml").read_text())
    return [f"{rule}={n}" for rule, n in (prof.get("set-threads") or {}).items()]


def _deterministic_config(dst: Path, tracking: dict | None = None) -> Path:
    """The tiny study's config, with a generous training guard (training runs its fixed step
    count in both runs; a busy SLURM node must not fail it) and, where given, another tracking store."""
    import yaml

    cfg = yaml.safe_load(TEST_CONFIG.read_text())
    for spec in cfg.get("models", {}).values():
        if spec.get("kind") == "demo":
            spec["max_seconds"] = 3600
    if tracking:
        cfg["tracking"] = tracking
    dst.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dst


def _tracking_server(request: pytest.FixtureRequest) -> str | None:
    """The MLflow server on PostgreSQL (tests/conftest.py), or None where PostgreSQL is absent:
    the SLURM comparison then still runs, logging into sqlite."""
    try:
        return request.getfixturevalue("mlflow_pg_server")
    except pytest.skip.Exception:
        return None


@pytest.mark.skipif(
    not (WORKFLOW.exists() and TEST_CONFIG.exists()),
    reason="workflow not present (Snakefile / .test/config/config.yaml)",
)
def test_tiny_study_on_slurm_equals_local(slurm: None, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The cluster deployment end to end: the SLURM run's cell jobs log over HTTP into an MLflow
    server on PostgreSQL (where .ci/postgres/setup.sh started one), the local run into sqlite."""
    import uuid

    import pandas.testing as pdt

    server = _tracking_server(request)
    experiment = f"slurm-{uuid.uuid4().hex[:8]}"
    configs = {
        "local": _deterministic_config(tmp_path / "config.yaml"),
        "slurm": _deterministic_config(
            tmp_path / "config-slurm.yaml", {"uri": server, "experiment": experiment} if server else None
        ),
    }
    runs = {}
    for name, profile, extra in (
        ("local", REPO / "profiles" / "local", ["--cores", "2", "--set-threads", *_ci_threads()]),
        ("slurm", CI_PROFILE, []),
    ):
        config = configs[name]
        work = tmp_path / name
        work.mkdir()
        cmd = [
            sys.executable,
            "-m",
            "snakemake",
            "--snakefile",
            str(WORKFLOW),
            "--profile",
            str(profile),
            "--directory",
            str(work),
            "--configfile",
            str(config),
            *extra,
        ]
        res = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=3 * TIMEOUT, env=_env())
        log = res.stdout + res.stderr
        (tmp_path / f"{name}.log").write_text(log)
        assert res.returncode == 0, f"{name} run failed:\n{log[-5000:]}"
        if name == "slurm":
            ids = _job_ids(log)
            assert ids, f"no sbatch submissions in the slurm run:\n{log[-3000:]}"
            assert _job_record(ids[-1])["JobState"] == "COMPLETED"
        runs[name] = _aggregate_csvs(work)
    # Per cell, too: the episode counts, tokens and error-channel counts of every metrics.json
    # (timings and the hashes over timed records excluded).
    local_cells = sorted((tmp_path / "local").rglob("cells/**/metrics.json"))
    assert local_cells, "the local run wrote no cells"
    for m in local_cells:
        other = tmp_path / "slurm" / m.relative_to(tmp_path / "local")
        a, b = (_comparable(json.loads(x.read_text())) for x in (m, other))
        assert a == b, (
            str(m.relative_to(tmp_path / "local")),
            {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)},
        )
    if server:  # every cell logged once into the server, finished
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=server)
        exp = client.get_experiment_by_name(experiment)
        cells = [
            r
            for r in client.search_runs([exp.experiment_id], max_results=1000)
            if r.data.tags.get("flatscore.kind") == "cell"
        ]
        hashes = [r.data.tags["flatscore.cell_hash"] for r in cells]
        assert len(cells) == len(set(hashes)) == len(local_cells), (len(cells), len(set(hashes)), len(local_cells))
        assert all(r.info.status == "FINISHED" for r in cells)
    assert runs["local"], "the local run wrote no aggregate CSVs"
    assert runs["local"].keys() == runs["slurm"].keys()
    for rel, path in runs["local"].items():
        pdt.assert_frame_equal(_frame(path), _frame(runs["slurm"][rel]), check_exact=False, rtol=1e-9, obj=rel)
