"""The command line's defaults are the study config's: what Snakemake's validation fills in.

The CLI takes its defaults from the schema (flatscore.config_defaults); this checks the outcome
independently, against the config that ``snakemake.utils.validate`` builds from a minimal study,
so an option whose default drifts from the workflow's (max_in_flight was 1 against 8,
augment_dbs 0 against 3) fails here.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from snakemake.utils import validate

from flatscore.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"

MINIMAL = {
    "study": "s",
    "results": "results",
    "domains": {"retail": {"source": "synthetic"}},
    "models": {"demo": {"kind": "demo"}},
    "precisions": ["full"],
    "budgets": [10],
    "repair": [False],
    "trials": 1,
    "seed": 0,
}

#: (command and its required arguments, option dest, path of the config key it mirrors)
MIRRORED = [
    (["episodes", "--domain", "retail", "--out", "x"], "max_in_flight", ("backend", "max_in_flight")),
    (["episodes", "--domain", "retail", "--out", "x"], "max_new_tokens", ("backend", "max_new_tokens")),
    (["episodes", "--domain", "retail", "--out", "x"], "max_steps", ("max_steps",)),
    (["episodes", "--domain", "retail", "--out", "x"], "data_seed", ("domains", "retail", "seed")),
    (["episodes", "--domain", "retail", "--out", "x"], "experiment", ("tracking", "experiment")),
    (["generate-domain", "--domain", "retail", "--out", "x"], "n_tasks", ("domains", "retail", "n_tasks")),
    (["generate-domain", "--domain", "retail", "--out", "x"], "seed", ("domains", "retail", "seed")),
    (["demos", "--domain", "retail=x", "--out", "x"], "augment_dbs", ("models", "demo", "augment_dbs")),
    (["demos", "--domain", "retail=x", "--out", "x"], "slip_rate", ("models", "demo", "slip_rate")),
    (["demos", "--domain", "retail=x", "--out", "x"], "prompt", ("models", "demo", "prompt")),
    (["train-demo", "--demos", "x", "--out", "x"], "size", ("models", "demo", "size")),
    (["train-demo", "--demos", "x", "--out", "x"], "seed", ("models", "demo", "seed")),
    (["train-demo", "--demos", "x", "--out", "x"], "max_seconds", ("models", "demo", "max_seconds")),
    (["train-demo", "--demos", "x", "--out", "x"], "steps", ("models", "demo", "steps")),
    (["generate-domain", "--domain", "retail", "--out", "x"], "ids", ("domains", "retail", "ids")),
    (["generate-domain", "--domain", "retail", "--out", "x"], "identities", ("domains", "retail", "identities")),
    (["generate-domain", "--domain", "retail", "--out", "x"], "user_details", ("domains", "retail", "user_details")),
    (["quantize", "--model", "m", "--out", "x"], "n_calibration", ("quantization", "n_calibration")),
    (["init-tracking"], "experiment", ("tracking", "experiment")),
    (["episodes", "--domain", "retail", "--out", "x"], "temperature", ("backend", "temperature")),
    (["episodes", "--domain", "retail", "--out", "x"], "user", ("user", "kind")),
    (["episodes", "--domain", "retail", "--out", "x"], "user_temperature", ("user", "temperature")),
    (["episodes", "--domain", "retail", "--out", "x"], "user_max_new_tokens", ("user", "max_new_tokens")),
    (["aggregate", "--cells", "c", "--out", "x"], "equivalence_margin", ("analysis", "equivalence_margin")),
    (["aggregate", "--cells", "c", "--out", "x"], "power_gaps", ("analysis", "power_gaps")),
    (["aggregate", "--cells", "c", "--out", "x"], "divergence_window", ("analysis", "divergence_window")),
    (["aggregate", "--cells", "c", "--out", "x"], "experiment", ("tracking", "experiment")),
]


@pytest.fixture(scope="module")
def validated() -> dict:
    config = copy.deepcopy(MINIMAL)
    config["quantization"] = {"int4": {"scheme": "w4a16"}}  # so that its group_size default is filled
    validate(config, str(SCHEMA))
    return config


@pytest.mark.parametrize("argv, dest, path", MIRRORED, ids=[f"{a[0]}.{d}" for a, d, _ in MIRRORED])
def test_cli_default_is_the_workflow_default(validated: dict, argv: list[str], dest: str, path: tuple) -> None:
    expected = validated
    for key in path:
        expected = expected[key]
    assert getattr(build_parser().parse_args(argv), dest) == expected


def test_quantize_group_size_is_the_schema_scheme_default(validated: dict) -> None:
    args = build_parser().parse_args(["quantize", "--model", "m", "--out", "x"])
    assert args.group_size == validated["quantization"]["int4"]["group_size"]


def test_augment_seed_shown_in_help_is_the_one_used() -> None:
    from flatscore.commands.models import AUGMENT_SEED0 as shown
    from flatscore.models.demo.demonstrations import AUGMENT_SEED0 as used

    assert shown == used


#: (command and its required arguments, option dest, path of the config key whose enum it takes)
ENUMERATED = [
    (["generate-domain", "--domain", "retail", "--out", "x"], "ids", ("domains", "*", "ids")),
    (["generate-domain", "--domain", "retail", "--out", "x"], "identities", ("domains", "*", "identities")),
    (["generate-domain", "--domain", "retail", "--out", "x"], "user_details", ("domains", "*", "user_details")),
    (["demos", "--domain", "retail=x", "--out", "x"], "augment_identities", ("models", "*", "augment_identities")),
    (["demos", "--domain", "retail=x", "--out", "x"], "answer_form", ("models", "*", "answer_form")),
    (["train-demo", "--demos", "x", "--out", "x"], "size", ("models", "*", "size")),
    (["episodes", "--domain", "retail", "--out", "x"], "user", ("user", "kind")),
]


@pytest.mark.parametrize("argv, dest, path", ENUMERATED, ids=[f"{a[0]}.{d}" for a, d, _ in ENUMERATED])
def test_cli_choices_are_the_schemas_enum(argv: list[str], dest: str, path: tuple) -> None:
    """Read from the schema file here, not through flatscore.config_defaults: every value the config
    accepts, the option accepts, and a value outside the enum makes the parser exit."""
    import yaml

    node = yaml.safe_load(SCHEMA.read_text())
    for key in path:
        node = node["additionalProperties"] if key == "*" else node["properties"][key]
    flag = "--" + dest.replace("_", "-")
    for value in node["enum"]:
        assert getattr(build_parser().parse_args([*argv, flag, value]), dest) == value
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, flag, "not-a-choice"])
