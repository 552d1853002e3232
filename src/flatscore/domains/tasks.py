"""tau2-bench's task format as pydantic models.

Field names follow tau2-bench's ``tasks*.json`` so that a user's own tau2-bench checkout
loads unchanged; unknown extra fields are kept (``extra="allow"``) so that newer tau2
releases do not break loading.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

RewardComponent = Literal["DB", "ENV_ASSERTION", "COMMUNICATE", "ACTION", "NL_ASSERTION", "NL_ASSERTIONS"]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class Action(_Loose):
    """One ground-truth call: who makes it (``requestor``), the tool and its arguments."""

    action_id: str = ""
    requestor: Literal["assistant", "user"] = "assistant"
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    info: str | None = None
    compare_args: list[str] | None = None


class EnvFunctionCall(_Loose):
    """A call into the environment outside the conversation (set-up or assertion)."""

    env_type: Literal["assistant", "user"]
    func_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class EnvAssertion(EnvFunctionCall):
    assert_value: bool = True
    message: str | None = None


class InitializationData(_Loose):
    agent_data: dict[str, Any] | None = None
    user_data: dict[str, Any] | None = None


class InitialState(_Loose):
    initialization_data: InitializationData | None = None
    initialization_actions: list[EnvFunctionCall] | None = None
    message_history: list[dict[str, Any]] | None = None


class Instructions(_Loose):
    domain: str | None = None
    reason_for_call: str = ""
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str | None = None


class UserScenario(_Loose):
    persona: str | None = None
    instructions: Instructions | str


class EvaluationCriteria(_Loose):
    actions: list[Action] | None = None
    env_assertions: list[EnvAssertion] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[RewardComponent] = Field(default_factory=lambda: ["DB", "COMMUNICATE"])


class Task(_Loose):
    id: str
    description: dict[str, Any] | None = None
    user_scenario: UserScenario
    ticket: str | None = None
    initial_state: InitialState | None = None
    evaluation_criteria: EvaluationCriteria | None = None

    @property
    def actions(self) -> list[Action]:
        return list(self.evaluation_criteria.actions or []) if self.evaluation_criteria else []

    @property
    def instructions(self) -> Instructions:
        ins = self.user_scenario.instructions
        return ins if isinstance(ins, Instructions) else Instructions(reason_for_call=ins)


class TaskFileError(ValueError):
    """A task file is missing, unreadable or not in tau2-bench's format."""


def load_tasks(path: Path) -> list[Task]:
    """Read a tau2-bench task list; errors name the file and the first bad field."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise TaskFileError(f"task file not found: {path}") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TaskFileError(f"task file {path} is not readable JSON: {exc}") from exc
    if not isinstance(raw, list):
        raise TaskFileError(f"task file {path}: expected a JSON list of tasks, got {type(raw).__name__}")
    tasks = []
    for index, item in enumerate(raw):
        try:
            tasks.append(Task.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise TaskFileError(f"task file {path}: task #{index} field '{loc}': {first['msg']}") from exc
    return tasks


def task_split(tasks_dir: Path, split: str | None) -> set[str] | None:
    """Task ids of ``split`` from tau2's ``split_tasks.json`` (None: no split file or no split)."""
    split_file = Path(tasks_dir) / "split_tasks.json"
    if split is None or not split_file.exists():
        return None
    splits = json.loads(split_file.read_text())
    if split not in splits:
        raise TaskFileError(f"{split_file}: no split named '{split}' (have: {', '.join(splits)})")
    return set(map(str, splits[split]))
