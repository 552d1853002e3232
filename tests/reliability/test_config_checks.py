"""Problems the schema cannot see are refused before any job runs, in one line naming the field."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from flatscore.config_checks import file_problems

REPO = Path(__file__).resolve().parents[2]


def _base(tmp_path: Path) -> dict:
    return {
        "results": str(tmp_path / "results"),
        "domains": {"retail": {"source": "synthetic"}},
        "models": {"demo": {"kind": "demo"}},
    }


def test_a_good_config_has_no_problem(tmp_path):
    assert list(file_problems(_base(tmp_path))) == []


def test_missing_domain_folder_and_missing_tasks_file(tmp_path):
    config = _base(tmp_path)
    config["domains"]["retail"] = {"source": "path", "path": str(tmp_path / "nowhere")}
    assert list(file_problems(config)) == [
        f"config: domains.retail.path: {tmp_path / 'nowhere'} is not a folder "
        "(expected a tau2-bench domain data folder)"
    ]
    (tmp_path / "empty").mkdir()
    config["domains"]["retail"]["path"] = str(tmp_path / "empty")
    assert [p.split(": ")[1] for p in file_problems(config)] == ["domains.retail.path"]
    assert "has no tasks.json" in next(file_problems(config))


def test_local_model_folders_must_hold_a_model_hub_ids_are_left_alone(tmp_path):
    config = _base(tmp_path)
    config["models"]["real"] = {"kind": "hf", "id": "Qwen/Qwen3-0.6B", "quantized": {"int4": str(tmp_path / "q")}}
    problems = list(file_problems(config))
    assert len(problems) == 1 and problems[0].startswith("config: models.real.quantized.int4: ")
    (tmp_path / "q").mkdir()
    (tmp_path / "q" / "config.json").write_text("{}")
    assert list(file_problems(config)) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere: an unwritable folder cannot be made here")
def test_unwritable_results_as_a_user(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    config = _base(tmp_path) | {"results": str(locked / "results")}
    assert next(file_problems(config)).startswith("config: results: ")


def test_results_under_a_file_cannot_be_written(tmp_path):
    """Checked as any user (root included): a path whose parent is a file can never be created."""
    (tmp_path / "a-file").write_text("x")
    config = _base(tmp_path) | {"results": str(tmp_path / "a-file" / "results")}
    assert list(file_problems(config)) == [
        f"config: results: {tmp_path / 'a-file' / 'results'} cannot be written "
        "(expected a folder this user may create or write)"
    ]


def test_snakemake_refuses_a_missing_domain_folder_before_any_job(tmp_path):
    """Before: the dry run planned 32 jobs and the job failed inside its log, after Snakemake had
    removed that job's previous output."""
    config = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config["results"] = "results"
    config["domains"] = {"retail": {"source": "path", "path": str(tmp_path / "no-such-domain")}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
        + ["--configfile", str(tmp_path / "config.yaml"), "-n", "--cores", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0
    assert re.search(r"^config: domains\.retail\.path: .*no-such-domain is not a folder", out, re.M), out[-2000:]
    assert len(out.splitlines()) < 10, out
    assert not (tmp_path / "results").exists()


def test_cli_output_that_cannot_be_written_is_one_line(tmp_path, capsys):
    """Before: a 17-24-line traceback."""
    from flatscore.cli import main

    (tmp_path / "a-file").write_text("x")
    assert (
        main(["generate-domain", "--domain", "retail", "--out", str(tmp_path / "a-file" / "d"), "--n-tasks", "20"]) == 2
    )
    err = capsys.readouterr().err
    assert err.strip() == f"flatscore: error: cannot write {tmp_path / 'a-file' / 'd'}: Not a directory"
