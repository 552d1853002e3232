"""The NL-assertion judge: an LLM on any OpenAI-compatible server grades a task's NL assertions.

tau2 grades a task's ``nl_assertions`` with one LLM call per episode: the whole conversation as
``role: content`` lines (tool calls and tool results included), the list of assertions, and a
JSON answer with one verdict per assertion; the component is 1 exactly when every verdict the
judge returned is "met" (no assertions: 1). This judge keeps those semantics with its own
prompt and any :class:`~flatscore.backends.base.Backend` (e.g. the OpenAI backend pointed at
a vLLM server). Without a judge, the scorer lists the component under ``skipped``.

A judge answer that is not the JSON asked for raises :class:`JudgeError`; the scorer then
records the component as skipped with the reason, rather than guessing a verdict.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..backends.base import Backend, ModelRequest
from ..domains.tasks import Task

_INSTRUCTIONS = (
    "You grade a recorded customer-service conversation between an agent and a customer against "
    "a list of expected outcomes. Judge each expected outcome on its own, from the conversation "
    "alone. Answer with one JSON object and nothing else, of the form "
    '{"results": [{"expectedOutcome": "<the outcome, copied>", "reasoning": "<one or two sentences>", '
    '"metExpectation": true or false}]}, one entry per expected outcome, in the order given.'
)
_OBJECT = re.compile(r"\{.*\}", re.S)


class JudgeError(RuntimeError):
    """The judge's answer is not the verdict list asked for."""


@dataclass(frozen=True)
class Verdict:
    assertion: str
    met: bool
    reasoning: str


def transcript(trajectory: list[dict[str, Any]]) -> str:
    """The conversation as tau2 shows it to its judge: one ``role: content`` line per message."""
    return "\n".join(f"{entry.get('role')}: {entry.get('content')}" for entry in trajectory)


def parse_verdicts(text: str) -> list[Verdict]:
    """The verdicts of a judge answer (a JSON object, possibly wrapped in prose or a code fence)."""
    match = _OBJECT.search(text or "")
    try:
        data = json.loads(match.group(0) if match else text)
        results = data["results"]
        return [
            Verdict(str(r.get("expectedOutcome", "")), r["metExpectation"] is True, str(r.get("reasoning", "")))
            for r in results
        ]
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise JudgeError(f"judge answer is not the JSON verdict list: {text[:200]!r}") from exc


class NLJudge:
    """Callable as the scorer's ``judge``: ``judge(task, trajectory, assertions) -> [met, ...]``."""

    def __init__(self, backend: Backend, max_new_tokens: int = 1024) -> None:
        self.backend = backend
        self.max_new_tokens = max_new_tokens
        self.last: list[Verdict] = []

    def request(self, trajectory: list[dict[str, Any]], assertions: list[str]) -> ModelRequest:
        body = f"conversation:\n{transcript(trajectory)}\n\nexpectedOutcomes:\n{json.dumps(assertions)}"
        return ModelRequest(
            messages=[{"role": "system", "content": _INSTRUCTIONS}, {"role": "user", "content": body}],
            max_new_tokens=self.max_new_tokens,
            role="judge",
        )

    def __call__(self, task: Task, trajectory: list[dict[str, Any]], assertions: list[str]) -> list[bool]:
        if not assertions:
            return []
        (answer,) = self.backend.generate([self.request(trajectory, assertions)])
        self.last = parse_verdicts(answer.text)
        return [v.met for v in self.last]

    def describe(self) -> dict[str, Any]:
        return {"nl_judge": self.backend.describe()}
