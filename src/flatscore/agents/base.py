"""The agent and user interfaces the engine drives.

Both are *generators*: ``respond`` may ``yield`` :class:`~flatscore.backends.base.ModelRequest`
objects and is resumed with the matching :class:`~flatscore.backends.base.ModelResponse`;
its ``return`` value is the turn's output. Oracle agents and scripted users simply return
without yielding. This keeps the episode loop free of any model code and lets one driver
batch the model calls of many concurrent episodes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Generator

from ..backends.base import ModelRequest, ModelResponse
from ..domains.tasks import Task
from ..domains.toolkit import ToolSpec

#: tau2-bench's stop token: a user (or agent) message containing it ends the conversation.
STOP_TOKEN = "###STOP###"
TRANSFER_TOKEN = "###TRANSFER###"
#: tau2-bench's user simulator ends the conversation on this one too (the scenario ran out).
OUT_OF_SCOPE_TOKEN = "###OUT-OF-SCOPE###"


@dataclass
class ToolCall:
    """A parsed call. ``arguments`` is a dict, or the raw string where it was not a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] | str

    def to_openai(self) -> dict[str, Any]:
        import json

        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": args}}


@dataclass
class TurnOutput:
    """What one side said in a turn: text, tool calls, or an unparseable attempt at a call."""

    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    #: Set when the output looked like a tool call but could not be parsed: the parse error.
    malformed: str | None = None
    #: The model's raw text, kept for the trajectory (None for oracle agents).
    raw: str | None = None
    stop: bool = False
    usage: dict[str, float] = field(default_factory=dict)
    #: The channel a malformed turn is recorded in: the model's (``malformed_call``), or the
    #: server's (``server_bad_answer``) where the server's answer itself could not be read.
    malformed_channel: str = "malformed_call"
    #: The server's answer as received (server backends only): kept in the turn's log entry.
    server: dict[str, Any] | None = None
    #: What the server's tool-call parsing got wrong in this turn, as (channel, tool, detail):
    #: recorded by the engine, never counted toward the budget (they are not the model's errors).
    server_events: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class AgentView:
    """What the agent may see: its own conversation, its tools, the policy.

    ``task`` is present for oracle agents only (expert, noisy expert); the engine leaves it
    None for model agents so that no ground truth can leak into a prompt.
    """

    domain: str
    policy: str
    messages: list[dict[str, Any]]
    tools: dict[str, ToolSpec]
    user_tools: dict[str, ToolSpec]
    turn: int
    seed: int
    episode_id: str
    task: Task | None = None


@dataclass
class UserView:
    """What the user simulator sees: the task's scenario, its conversation, its own tools."""

    domain: str
    task: Task
    messages: list[dict[str, Any]]
    tools: dict[str, ToolSpec]
    turn: int
    seed: int
    episode_id: str


Turn = Generator[ModelRequest, ModelResponse, TurnOutput]


class Agent(ABC):
    """A customer-service agent. One instance serves many episodes; keep per-episode state keyed by episode_id."""

    #: Whether the agent needs ground truth (the engine passes ``task`` only where True).
    oracle: bool = False
    name: str = "agent"

    @abstractmethod
    def respond(self, view: AgentView) -> Turn:
        """Produce the next turn. May yield model requests."""
        if False:  # pragma: no cover - makes every override a generator by contract
            yield

    def end_episode(self, episode_id: str) -> None:
        """Drop per-episode state."""

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name}


class UserSimulator(ABC):
    name: str = "user"

    @abstractmethod
    def respond(self, view: UserView) -> Turn:
        if False:  # pragma: no cover
            yield

    def end_episode(self, episode_id: str) -> None:
        """Drop per-episode state."""

    def describe(self) -> dict[str, Any]:
        return {"user": self.name}


def run_turn(turn: Turn, answer: Any) -> TurnOutput:
    """Run a turn that must not need a model (oracles, scripted users, tests)."""
    try:
        request = next(turn)
    except StopIteration as done:
        return done.value
    raise RuntimeError(f"{answer!r}: turn asked for a model but none is available: {request!r}")
