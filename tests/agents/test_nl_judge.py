"""The NL-assertion judge against an OpenAI-compatible server (tests/stub_openai.py here: the
boundary the judge really talks to). The server's verdict follows the conversation it is sent,
so the tests see the transcript travel and the verdict come back into the reward."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stub_openai import StubOpenAIServer

from flatscore.agents.nl_judge import JudgeError, NLJudge, parse_verdicts, transcript
from flatscore.backends.openai_backend import OpenAIBackend
from flatscore.domains import domain_class, load_domain
from flatscore.engine.records import Termination
from flatscore.engine.scoring import Evaluator


def _judge_reply(body: dict[str, Any], n: int) -> tuple[int, dict[str, Any]]:
    """Met when the conversation mentions a refund; answers prose when asked about 'garble'."""
    prompt = body["messages"][-1]["content"]
    wanted = json.loads(prompt.split("expectedOutcomes:\n", 1)[1])
    if "garble" in prompt:
        text = "I think it went fine."
    else:
        met = "refund" in prompt.split("expectedOutcomes:", 1)[0]
        results = [{"expectedOutcome": w, "reasoning": "checked", "metExpectation": met} for w in wanted]
        text = "```json\n" + json.dumps({"results": results}) + "\n```"
    return 200, {"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {}}


@pytest.fixture(scope="module")
def judge_url() -> Iterator[str]:
    server = StubOpenAIServer(_judge_reply)
    yield server.url
    server.close()


@pytest.fixture(scope="module")
def retail(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = domain_class("retail").generate(Path(tmp_path_factory.mktemp("judge")) / "retail", seed=5)
    return load_domain("retail", path)


def _nl_task(domain, assertions: list[str]):  # type: ignore[no-untyped-def]
    task = domain.tasks()[0]
    criteria = task.evaluation_criteria.model_copy(
        update={"nl_assertions": assertions, "reward_basis": ["NL_ASSERTION"]}
    )
    return task.model_copy(update={"evaluation_criteria": criteria})


def _grade(domain, judge, said: str, assertions: list[str]) -> dict:  # type: ignore[no-untyped-def]
    task = _nl_task(domain, assertions)
    trajectory = [{"role": "assistant", "content": said}]
    return Evaluator(domain, judge=judge).evaluate(
        task, domain.environment_for(task), trajectory, Termination.AGENT_STOP
    )


def test_judge_grades_nl_assertions_through_the_server(retail, judge_url: str) -> None:
    judge = NLJudge(OpenAIBackend(judge_url, "judge-model", max_retries=0))
    met = _grade(retail, judge, "Your refund is on its way.", ["agent confirms the refund"])
    assert met["components"] == {"NL_ASSERTION": 1.0} and met["reward"] == 1.0 and met["skipped"] == []
    assert met["nl_assertions"] == [{"assertion": "agent confirms the refund", "met": True, "reasoning": "checked"}]
    unmet = _grade(retail, judge, "Goodbye.", ["agent confirms the refund"])
    assert unmet["components"] == {"NL_ASSERTION": 0.0} and unmet["reward"] == 0.0


def test_without_a_judge_or_with_a_garbled_answer_the_component_is_skipped(retail, judge_url: str) -> None:
    plain = _grade(retail, None, "Your refund is on its way.", ["agent confirms the refund"])
    assert plain["skipped"] == ["NL_ASSERTION"] and plain["reward"] == 1.0
    judge = NLJudge(OpenAIBackend(judge_url, "judge-model", max_retries=0))
    garbled = _grade(retail, judge, "garble", ["agent confirms the refund"])
    assert garbled["skipped"] == ["NL_ASSERTION"] and "not the JSON verdict list" in garbled["nl_judge_error"]


def test_transcript_and_parsing_follow_tau2s_judge_format() -> None:
    lines = transcript([{"role": "assistant", "content": None}, {"role": "tool", "content": "ok"}])
    assert lines == "assistant: None\ntool: ok"
    assert [v.met for v in parse_verdicts('{"results": [{"metExpectation": true}, {"metExpectation": "yes"}]}')] == [
        True,
        False,
    ]
    with pytest.raises(JudgeError):
        parse_verdicts("no json here")


def test_cli_cell_with_a_judge_grades_nl_assertions(judge_url: str, tmp_path: Path, tau2_data) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    data = tau2_data("retail")  # tau2's retail tasks have NL assertions in their reward basis
    out = tmp_path / "cell"
    done = subprocess.run(
        [sys.executable, "-m", "flatscore.cli", "episodes", "--domain", "retail", "--data", str(data),
         "--tasks", "2,3", "--judge-base-url", judge_url, "--judge-model", "judge-model",
         "--out", str(out), "--no-progress"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert all("NL_ASSERTION" in r["reward_info"]["components"] for r in records)
    assert all(r["reward_info"]["skipped"] == [] for r in records)
    assert json.loads((out / "cell.json").read_text())["nl_judge"]["model"] == "judge-model"
