"""Differential tests: tau2's own code and flatscore's parity mode answer the same calls alike.

Needs ../shared/tau2-bench, ../shared/tau2 and a tau2 venv (Python 3.12); skips, saying which
is missing, where one is absent. The fast test takes every third train task of each domain
(its gold actions, and its bad calls: well over 200 per domain); the slow one takes them all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_calls import bad_call_cases
from tau2_harness import (
    TAU2_DATA,
    TAU2_SOURCE,
    compare,
    gold_cases,
    missing_reason,
    run_flatscore,
    run_tau2,
    run_tau2_full,
    tau2_data_root,
)

pytestmark = pytest.mark.needs_tau2


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    return tau2_data_root(tmp_path_factory.mktemp("tau2-data"))


def _check(domain: str, cases: list[dict], data_root: Path, minimum_calls: int) -> None:
    calls = sum(len(c["calls"]) for c in cases)
    assert calls >= minimum_calls
    tally = compare(cases, run_tau2(domain, cases, data_root), run_flatscore(domain, cases, parity=True))
    print(f"{domain}: {calls} calls in {len(cases)} cases: {tally.line()}")
    assert tally.perfect, "\n".join([tally.line(), *tally.diffs])


@pytest.mark.parametrize("domain", ["retail", "telecom"])
def test_gold_actions_answer_and_grade_as_tau2(domain: str, data_root: Path) -> None:
    _check(domain, gold_cases(domain, every=3), data_root, minimum_calls=100)


@pytest.mark.parametrize("domain", ["retail", "telecom"])
def test_bad_calls_answer_and_grade_as_tau2(domain: str, data_root: Path) -> None:
    _check(domain, bad_call_cases(domain, every=3), data_root, minimum_calls=200)


@pytest.mark.slow
@pytest.mark.parametrize("domain", ["retail", "telecom"])
def test_every_train_task_answers_and_grades_as_tau2(domain: str, data_root: Path) -> None:
    _check(domain, gold_cases(domain), data_root, minimum_calls=300)
    _check(domain, bad_call_cases(domain), data_root, minimum_calls=2000)


def test_default_mode_differs_where_docs_say(data_root: Path) -> None:
    """Without parity the same gold calls read otherwise (compact JSON, rounded charges): the
    harness can tell the modes apart, so its perfect score in parity mode means something."""
    cases = gold_cases("retail", every=9)
    tally = compare(cases, run_tau2("retail", cases, data_root), run_flatscore("retail", cases, parity=False))
    assert tally.equal["text"] < tally.total["text"]
    assert any('{"order_id":"#W' in d for d in tally.diffs)  # flatscore's compact JSON


@pytest.mark.parametrize("domain", ["retail", "telecom"])
def test_parity_mode_shows_tau2s_tool_schemas(domain: str, data_root: Path) -> None:
    """Read from the checkout at run time, every tool's description and parameter schema (and the
    tools' order) equals what tau2's own code builds and sends."""
    from flatscore.domains import load_domain
    from flatscore.domains.tau2_checkout import described_specs

    theirs = run_tau2_full(domain, [], data_root)["schemas"]
    env = load_domain(domain, TAU2_DATA / domain).fresh_environment()
    for side in ("assistant", "user"):
        specs = env.tool_specs(side)
        ours = (
            [s.openai_schema() for s in described_specs(specs, str(TAU2_SOURCE), domain, side).values()]
            if specs
            else []
        )
        assert len(ours) == len(theirs[side])
        for mine, tau2s in zip(ours, theirs[side], strict=True):
            assert mine == tau2s, mine["function"]["name"]
