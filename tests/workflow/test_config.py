"""The study config: one default per key (the schema), what the rules make of it, and its documentation.

Fast: Snakemake only plans here (dry runs, ``-n -p`` prints the shell commands), nothing runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
README = REPO / "config" / "README.md"


def dry_run(workdir: Path, config: dict) -> str:
    """The shell commands Snakemake plans for ``config`` (nothing runs)."""
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(workdir),
            "--configfile",
            str(workdir / "config.yaml"),
            "-n",
            "-p",
            "--cores",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout + result.stderr


def prompts(output: str, model: str) -> dict[str, set[str]]:
    """{command: --prompt values} of a model's demonstrations (AWQ calibration data) and episodes."""
    found: dict[str, set[str]] = {"demos": set(), "episodes": set()}
    for line in output.splitlines():
        match = re.search(r"flatscore (demos|episodes) .*--prompt (\S+)", line)
        if not match:
            continue
        command, prompt = match.groups()
        mine = f"--out results/demos/{model}.jsonl" in line if command == "demos" else f"--model-name {model} " in line
        if mine:
            found[command].add(prompt)
    return found


def test_one_prompt_default_for_calibration_and_episodes(tmp_path):
    """A model without ``prompt`` is calibrated (its demonstrations) and evaluated on the same prompt:
    full for an ``hf`` model (it was compact for calibration, full for episodes), compact for the demo
    model as before."""
    config = {
        "study": "prompt",
        "results": "results",
        "domains": {"retail": {"source": "path", "path": str(tmp_path / "retail")}},
        "models": {"big": {"kind": "hf", "id": "org/big"}, "demo": {"kind": "demo"}},
        "precisions": ["full", "int4"],
        "quantization": {"int4": {"scheme": "w4a16"}},
        "budgets": [10],
        "repair": [False],
        "trials": 1,
        "seed": 0,
        "backend": {"kind": "openai", "base_url": "http://127.0.0.1:8000"},
    }
    (tmp_path / "retail").mkdir()
    (tmp_path / "retail" / "tasks.json").write_text("[]")  # the folder must exist (config_checks)
    output = dry_run(tmp_path, config)
    assert "flatscore quantize --model org/big" in output, "the hf model is quantized, calibrated on its demos"
    assert prompts(output, "big") == {"demos": {"full"}, "episodes": {"full"}}
    assert prompts(output, "demo") == {"demos": {"compact"}, "episodes": {"compact"}}


def schema_properties(node: dict, prefix: str = "", defs: dict | None = None) -> dict[str, dict]:
    """Every property of the schema by path (``<name>`` for a free key: a domain, a model)."""
    defs = defs if defs is not None else node.get("$defs", {})
    if "$ref" in node:
        node = defs[node["$ref"].split("/")[-1]]
    found = {}
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        found[path] = sub
        found.update(schema_properties(sub, path, defs))
    if isinstance(node.get("additionalProperties"), dict) and node["additionalProperties"].get("properties"):
        found.update(schema_properties(node["additionalProperties"], f"{prefix}.<name>", defs))
    return found


def readme_rows() -> dict[str, list[str]]:
    """config/README.md's table rows by key: ``| `key` | type | default | what it changes | identity |``."""
    rows = {}
    for line in README.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0].strip("`")] = cells
    return rows


def test_every_config_key_is_documented_with_its_default():
    """config/README.md has a row for every property of the schema, and each default it gives is the
    schema's, so the two cannot drift apart."""
    properties = schema_properties(yaml.safe_load(SCHEMA.read_text()))
    assert len(properties) > 40
    rows = readme_rows()
    missing = [path for path in properties if path not in rows]
    assert not missing, f"config/README.md does not describe: {missing}"
    for path, node in properties.items():
        if "default" in node:
            assert f"`{json.dumps(node['default'])}`" in rows[path][2], (path, node["default"], rows[path][2])
    assert not set(rows) - set(properties), "config/README.md describes keys the schema does not have"


@pytest.mark.parametrize(
    "path", ["Snakefile", *sorted(str(p.relative_to(REPO)) for p in REPO.glob("workflow/rules/*.smk"))]
)
def test_rules_carry_no_defaults_of_their_own(path):
    """Defaults live in the schema (validate fills them): a ``.get(key, default)`` in a rule is a copy that drifts."""
    lines = [line for line in (REPO / path).read_text().splitlines() if re.search(r"\.get\(", line)]
    assert not lines, f"{path}: read config[key] (the schema holds the default): {lines}"


def test_study_config_replaces_the_default_one(tmp_path):
    """``--configfile`` names the whole study: run where the default ``config/config.yaml`` lies (as
    a user does from the checkout), a config with only retail plans no telecom job and no model of
    the default's. Snakemake's ``configfile:`` directive merged the two (telecom cells were planned)."""
    (tmp_path / "config").mkdir()
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    default["models"] = {"defaultonly": default["models"][next(iter(default["models"]))]}
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(default))
    study = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    study["domains"] = {"retail": study["domains"]["retail"]}
    output = dry_run(tmp_path, study)
    assert "telecom" not in output
    assert "defaultonly" not in output
    assert re.search(r"flatscore episodes .*--domain retail", output)


def test_without_configfile_the_default_config_is_used(tmp_path):
    """With no ``--configfile`` the embedded default (config/config.yaml in the working directory) is the study."""
    (tmp_path / "config").mkdir()
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(default))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path), "-n"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "train_demo" in result.stdout + result.stderr


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda c: c.__setitem__("bogus_key", 1), "config: (top level): Additional properties are not allowed"),
        (lambda c: c["backend"].__setitem__("max_in_flight", 0), "config: backend.max_in_flight: 0 is less than"),
        (lambda c: c["domains"]["retail"].__setitem__("source", "web"), "config: domains.retail.source: 'web'"),
        (
            lambda c: c["domains"]["retail"].__setitem__("task_kinds", ["cancel", "refund"]),
            "config: domains.retail.task_kinds.1: 'refund' is not one of",
        ),
        (
            lambda c: c["domains"]["telecom"].__setitem__("task_kinds", ["cancel"]),
            "config: domains.telecom.task_kinds: only retail's generator has task_kinds",
        ),
        (
            lambda c: c["domains"]["telecom"].__setitem__("identities", "open"),
            "config: domains.telecom.identities: only retail's generator has identities",
        ),
        (
            lambda c: c["domains"]["telecom"].__setitem__("user_details", "json"),
            "config: domains.telecom.user_details: only retail's generator has user_details",
        ),
    ],
    ids=[
        "unknown-key",
        "out-of-range",
        "bad-enum",
        "unknown-task-kind",
        "task-kinds-on-telecom",
        "open-telecom",
        "json-details-telecom",
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path, change, expected):
    """A bad config is refused before any job with one line naming the key (it printed the whole
    schema, 322 lines, after snakemake.utils.validate's message)."""
    config = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    change(config)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(tmp_path)]
        + ["--configfile", str(tmp_path / "config.yaml"), "-n"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert expected in output
    assert len(output.splitlines()) < 10, output
    assert not (tmp_path / "results").exists()


def test_task_kinds_reach_the_generator_and_no_list_passes_none(tmp_path):
    """``domains.retail.task_kinds`` becomes the generator's ``--task-kinds``; a domain without
    the key is generated with every kind (no flag). ``identities`` and ``user_details`` become their flags. ``augment_identities`` and ``answer_form`` reach
    the demonstrations."""
    config = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
    config["domains"]["retail"]["task_kinds"] = ["tracking", "cancel"]
    config["domains"]["retail"]["identities"] = "open"
    config["domains"]["retail"]["user_details"] = "json"
    config["models"]["demo"]["augment_identities"] = "open"
    config["models"]["demo"]["answer_form"] = "quoted"
    output = dry_run(tmp_path, config)
    assert re.search(r"flatscore demos .*--augment-identities open --answer-form quoted ", output)
    lines = [line for line in output.splitlines() if "flatscore generate-domain" in line]
    retail = [line for line in lines if "--domain retail" in line]
    others = [line for line in lines if "--domain retail" not in line]
    assert len(retail) == 1 and "--task-kinds tracking,cancel " in retail[0]
    assert "--identities open --user-details json " in retail[0]
    assert others and not any("--task-kinds" in line for line in others)
    assert all("--identities pool --user-details prose " in line for line in others)


def test_replicates_add_full_precision_cells_and_leave_the_others_alone(tmp_path):
    """``replicates: 2`` plans two extra runs of every full-precision cell, each with ``--replicate r``
    in a folder of its own; the study's own cells are planned with the same commands as without."""
    config = {
        "study": "aa",
        "results": "results",
        "domains": {"retail": {"source": "path", "path": str(tmp_path / "retail")}},
        "models": {"big": {"kind": "hf", "id": "org/big", "quantized": {"int4": "org/big-int4"}}},
        "precisions": ["full", "int4"],
        "budgets": [10, 2],
        "repair": [False],
        "trials": 1,
        "seed": 0,
        "backend": {"kind": "openai", "base_url": "http://127.0.0.1:8000"},
    }

    def episodes(output: str) -> list[str]:
        return sorted(line for line in output.splitlines() if "flatscore episodes" in line)

    (tmp_path / "off").mkdir()
    (tmp_path / "on").mkdir()
    (tmp_path / "retail").mkdir()
    (tmp_path / "retail" / "tasks.json").write_text("[]")  # the folder must exist (config_checks)
    plain = episodes(dry_run(tmp_path / "off", config))
    with_aa = episodes(dry_run(tmp_path / "on", {**config, "replicates": 2}))
    replicas = [line for line in with_aa if "--replicate" in line]
    assert len(plain) == 4 and not any("--replicate" in line for line in plain)
    assert sorted(set(with_aa) - set(replicas)) == plain
    assert len(replicas) == 2 * 2 and all("--precision full" in line for line in replicas)
    for r in (1, 2):
        mine = [line for line in replicas if f"--replicate {r} " in line]
        assert len(mine) == 2 and all(f"/repair-off/replicate{r}/shard0 " in line for line in mine)
