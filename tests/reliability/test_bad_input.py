"""Bad input is refused, never a crash: property tests (hypothesis) over the four ways input gets in.

1. study configs (mutations of .test/config/config.yaml) against the workflow's JSON schema;
2. model outputs through the tool-call parser;
3. tool arguments through every domain tool, via the engine's call path;
4. task files (mutations of a valid tasks.json) through `flatscore episodes`.

Each test counts the cases it tried; the counts are printed as FIGURE lines for docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
BASE_CONFIG = yaml.safe_load((REPO / ".test" / "config" / "config.yaml").read_text())
COUNTS: Counter = Counter()

FAST = settings(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture], derandomize=True
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)

# ---------------------------------------------------------------------------------------------
# 1. configs

#: (field, bad value) pairs; the refusal must name the field.
BAD_FIELDS = {
    "study": [3, "", "has space", None, ["x"]],
    "results": ["/etc", "../x", "results/../../x", "/", "a b", 7, "~/r", ""],
    "domains": [
        {},
        [],
        {"airline": {"source": "synthetic"}},
        {"retail": {"source": "web"}},
        {"retail": {"source": "path"}},
        {"retail": {"source": "synthetic", "n_tasks": 2}},
        "retail",
    ],
    "models": [{}, {"m": {"kind": "gguf"}}, {"m": {"kind": "hf"}}, {"bad name!": {"kind": "demo"}}, ["demo"]],
    "precisions": [[], ["int4"], ["full", "int3"], ["full", "full"], "full", [4]],
    "budgets": [[], [0], [-1], [10, 10], ["10"], [2.5], 10, [True]],
    "repair": [[], ["yes"], [0], "false", [True, True]],
    "trials": [0, -3, "2", 1.5, None],
    "seed": ["0", 1.5, None],
    "trial_shards": [0, "1"],
    "max_steps": [0, 3, "200"],
    "tasks_per_domain": [0, "4"],
    "backend": [{"kind": "vllm-ish"}, {"max_in_flight": 0}, {"max_new_tokens": 4}, {"bogus": 1}, "transformers"],
    "tracking": [{"uri": 5}, {"experiment": ""}, {"token": "x"}],
    "analysis": [{"equivalence_margin": 0}, {"equivalence_margin": 2}, {"power_gaps": [0]}],
}
BAD_CASES = [(field, value) for field, values in BAD_FIELDS.items() for value in values]


def _refusal(config: dict) -> str | None:
    from snakemake.utils import validate

    try:
        validate(copy.deepcopy(config), str(SCHEMA))
    except Exception as exc:  # WorkflowError
        return str(exc)
    return None


def test_valid_config_is_accepted():
    assert _refusal(BASE_CONFIG) is None


@settings(FAST, max_examples=120)
@given(case=st.sampled_from(BAD_CASES), extra=st.sampled_from([None, "missing", "unknown_key"]))
def test_bad_configs_are_refused_naming_the_field(case, extra):
    field, value = case
    config = copy.deepcopy(BASE_CONFIG)
    config[field] = value
    if extra == "missing":  # a second problem does not hide the first
        config.pop("seed" if field != "seed" else "study")
    elif extra == "unknown_key":
        config["budgetz"] = [1]
    message = _refusal(config)
    COUNTS["config"] += 1
    assert message is not None, f"accepted bad {field}={value!r}"
    if extra is None:
        assert f"['{field}']" in message or f"'{field}'" in message, message


@settings(FAST, max_examples=60)
@given(
    field=st.sampled_from(
        ["study", "results", "domains", "models", "precisions", "budgets", "repair", "trials", "seed"]
    )
)
def test_missing_required_field_is_named(field):
    config = copy.deepcopy(BASE_CONFIG)
    config.pop(field)
    message = _refusal(config)
    COUNTS["config"] += 1
    assert message is not None and f"'{field}' is a required property" in message


@pytest.mark.parametrize("field, value", [("results", "/etc"), ("budgets", [0])])
def test_snakemake_dry_run_refuses_a_bad_config_in_one_line(field, value, tmp_path):
    config = copy.deepcopy(BASE_CONFIG)
    config[field] = value
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "--directory",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "config.yaml"),
            "-n",
            "--cores",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0
    # one line naming the key (snakemake.utils.validate's own report printed the whole schema)
    assert re.search(rf"^config: {field}(\.\d+)?: ", out, re.M), out[-2000:]
    assert len(out.splitlines()) < 10, out
    assert not (tmp_path / "results").exists() and not Path("/etc/cells").exists()
    COUNTS["config_snakemake"] += 1
    print(f"\n[{field}={value!r}] -> " + next(line for line in out.splitlines() if line.startswith("config: ")))


# ---------------------------------------------------------------------------------------------
# 2. model outputs through the parser

VALID_CALL = '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W123"}}\n</tool_call>'


def _check_turn(out) -> None:
    from flatscore.agents.base import TurnOutput

    assert isinstance(out, TurnOutput)
    # the parser's last-resort handler must never be what answered
    assert not (out.malformed or "").startswith("parser error"), out.malformed
    assert out.malformed is None or (isinstance(out.malformed, str) and len(out.malformed) <= 200)
    for call in out.tool_calls or []:
        assert isinstance(call.name, str) and call.name and isinstance(call.arguments, dict)
    if out.malformed is not None:
        assert not out.tool_calls, "a partly valid turn must not run a subset of its calls"
    json.dumps([c.to_openai() for c in out.tool_calls or []])  # what the engine logs must serialise


model_text = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace")),
    st.integers(0, len(VALID_CALL)).map(lambda n: VALID_CALL[:n]),  # truncated call
    st.tuples(st.text(max_size=40), st.integers(0, len(VALID_CALL))).map(
        lambda t: VALID_CALL[: t[1]] + t[0] + VALID_CALL
    ),
    json_values.map(lambda v: f"<tool_call>{json.dumps(v)}</tool_call>"),
    json_values.map(lambda v: "<tool_call>" + json.dumps({"name": "x", "arguments": v}) + "</tool_call>"),
    st.integers(10**4, 3 * 10**5).map(
        lambda n: '<tool_call>{"name": "calculate", "arguments": {"expression": "' + "9" * n + '"}}</tool_call>'
    ),  # huge arguments
    st.integers(50, 5000).map(lambda n: "<tool_call>" + "[" * n + "]" * n + "</tool_call>"),  # deep nesting
    st.text(
        alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF, blacklist_categories=("Cs",)), max_size=80
    ).map(lambda t: f'<tool_call>{{"name": "{t}", "arguments": {{"\u00e9": "{t}"}}}}</tool_call>'),
)


@settings(FAST, max_examples=400)
@given(text=model_text, turn=st.integers(0, 500))
def test_parse_hermes_never_raises(text, turn):
    from flatscore.agents.toolcall_parser import parse_hermes

    _check_turn(parse_hermes(text, turn=turn))
    COUNTS["model_output"] += 1


server_calls = st.one_of(
    st.none(),
    json_values,
    st.lists(
        st.fixed_dictionaries(
            {
                "id": st.text(max_size=5),
                "type": st.just("function"),
                "function": st.fixed_dictionaries(
                    {
                        "name": st.text(max_size=20) | json_values,
                        "arguments": json_values | json_values.map(json.dumps) | st.text(max_size=30),
                    }
                ),
            }
        ),
        max_size=3,
    ),
)


@settings(FAST, max_examples=300)
@given(text=st.none() | st.text(max_size=100) | json_values, calls=server_calls)
def test_parse_openai_never_raises(text, calls):
    from flatscore.agents.toolcall_parser import parse_openai

    _check_turn(parse_openai(text, calls, turn=1))
    COUNTS["model_output"] += 1


# ---------------------------------------------------------------------------------------------
# 3. tool arguments through every tool, via the engine


@pytest.fixture(scope="module")
def episodes(tmp_path_factory):
    """One live episode per domain (the engine's call path: Episode._execute)."""
    from flatscore.agents.expert import ExpertAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.domains import domain_class, load_domain
    from flatscore.engine.episode import Episode, EpisodeSettings
    from flatscore.engine.scoring import Evaluator

    root = tmp_path_factory.mktemp("tool_args")
    out = {}
    for name in ("retail", "telecom"):
        domain = load_domain(name, domain_class(name).generate(root / name, seed=0, n_tasks=20))
        task = domain.tasks()[0]
        out[name] = Episode(
            domain, task, ExpertAgent(), ScriptedUser(), EpisodeSettings(max_errors=10**9), 0, 0, Evaluator(domain)
        )
    return out


def _tool_names(episodes) -> list[tuple[str, str, str]]:
    names = []
    for dname, ep in episodes.items():
        for side in ("assistant", "user"):
            names += [(dname, side, tool) for tool in ep.env.tool_specs(side)]
    return names


@settings(FAST, max_examples=500)
@given(data=st.data())
def test_random_tool_arguments_give_a_result_or_an_error_channel(episodes, data):
    from flatscore.agents.base import ToolCall
    from flatscore.engine.records import CHANNELS

    dname, side, tool = data.draw(st.sampled_from(_tool_names(episodes)), label="tool")
    ep = episodes[dname]
    spec = ep.env.tool_specs(side)[tool]
    params = list(((spec.openai_schema().get("function") or {}).get("parameters") or {}).get("properties") or {})
    known = st.dictionaries(st.sampled_from(params), json_values, max_size=len(params)) if params else st.just({})
    args = data.draw(
        st.one_of(known, st.dictionaries(st.text(max_size=6), json_values, max_size=3), json_values), label="arguments"
    )
    entry = ep._execute(side, ToolCall("c0", tool, args))
    COUNTS["tool_args"] += 1
    assert isinstance(entry["content"], str)
    if entry["error"]:
        COUNTS["tool_args_error"] += 1
        assert entry["channel"] in CHANNELS
        # a domain error or a schema refusal, not a tool that crashed on input it should have refused
        assert "exception" not in entry, f"{dname}.{tool}({args!r}) crashed: {entry}"
    else:
        COUNTS["tool_args_result"] += 1


# ---------------------------------------------------------------------------------------------
# 4. task files through `flatscore episodes`


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    from flatscore.domains import domain_class

    return domain_class("retail").generate(tmp_path_factory.mktemp("tasks") / "retail", seed=1, n_tasks=12)


def _mutate(tasks: list, draw) -> tuple[str, bool]:
    """A mutated tasks.json text and whether it is surely invalid."""
    kind = draw(st.sampled_from(["truncate", "top_type", "drop_key", "retype", "garbage", "dup_nested", "bytes"]))
    text = json.dumps(tasks)
    if kind == "truncate":
        return text[: draw(st.integers(0, len(text) - 1))], True
    if kind == "top_type":
        return json.dumps(draw(json_values.filter(lambda v: not isinstance(v, list)))), True
    if kind == "bytes":
        return draw(st.binary(min_size=1, max_size=64)).decode("latin-1"), False
    tasks = copy.deepcopy(tasks)
    i = draw(st.integers(0, len(tasks) - 1))
    keys = sorted(tasks[i])
    if kind == "drop_key":
        key = draw(st.sampled_from(keys))
        tasks[i].pop(key)
        return json.dumps(tasks), key in ("id", "user_scenario")
    if kind == "retype":
        key = draw(st.sampled_from(keys))
        tasks[i][key] = draw(json_values)
        return json.dumps(tasks), False
    if kind == "garbage":
        tasks[i] = draw(json_values)
        return json.dumps(tasks), not isinstance(tasks[i], dict)
    # dup_nested: replace a random nested value deep in the task with a random JSON value
    node = tasks[i]
    path = []
    while isinstance(node, dict) and node:
        key = draw(st.sampled_from(sorted(node)))
        path.append(key)
        if not isinstance(node[key], dict) or draw(st.booleans()):
            node[key] = draw(json_values)
            break
        node = node[key]
    return json.dumps(tasks), False


def _run_cli(argv: list[str]) -> tuple[int, str]:
    from flatscore.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code
    return int(code or 0), err.getvalue()


@settings(FAST, max_examples=100)
@given(data=st.data())
def test_mutated_task_files_are_refused_cleanly(task_dir, tmp_path_factory, data):
    import shutil

    original = json.loads((task_dir / "tasks.json").read_text())
    case = tmp_path_factory.mktemp("case")
    shutil.copytree(task_dir, case / "retail")
    text, surely_invalid = _mutate(original, data.draw)
    (case / "retail" / "tasks.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    # in-process: an uncaught exception here is what a traceback would be
    code, err = _run_cli(
        [
            "episodes",
            "--domain",
            "retail",
            "--data",
            str(case / "retail"),
            "--agent",
            "expert",
            "--max-steps",
            "8",
            "--no-progress",
            "--out",
            str(case / "out"),
        ]
    )
    COUNTS["task_file"] += 1
    assert code in (0, 2), (code, err)
    if code == 2:
        COUNTS["task_file_refused"] += 1
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("flatscore: error:") and "Traceback" not in err, err
    else:
        COUNTS["task_file_accepted"] += 1
        assert not surely_invalid, "an invalid task file was accepted"


def test_task_file_refusal_as_a_process_has_no_traceback(task_dir, tmp_path):
    import shutil

    shutil.copytree(task_dir, tmp_path / "retail")
    tasks = json.loads((task_dir / "tasks.json").read_text())
    tasks[3].pop("id")
    (tmp_path / "retail" / "tasks.json").write_text(json.dumps(tasks))
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "flatscore.cli",
            "episodes",
            "--domain",
            "retail",
            "--data",
            str(tmp_path / "retail"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2 and result.stderr.startswith("flatscore: error:"), result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


def test_zz_report_counts():
    """Prints the case counts (runs last in this file)."""
    print(
        f"\nFIGURE bad-input cases tried: {dict(sorted(COUNTS.items()))}, total {sum(v for k, v in COUNTS.items() if k in ('config', 'model_output', 'tool_args', 'task_file'))}"
    )
