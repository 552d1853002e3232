"""Oracle agents: the expert solves a task from its ground truth; the noisy expert errs on purpose.

The expert is the solvability check (reward 1 on every task) and the source of the demo
model's training demonstrations. The noisy expert injects errors of chosen channels at
chosen rates, so the error accounting, the budget, the repair and the statistics can be
tested against *known* error counts, and so power can be estimated before spending GPU time.

Both are deterministic functions of the conversation and the turn seed: they keep only
the position in the plan, which the conversation fully determines.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..domains.tasks import Action
from .base import Agent, AgentView, ToolCall, Turn, TurnOutput
from .repair import is_repair_message
from .user_requests import format_user_request

CLOSING = "Is there anything else I can help you with?"
TRANSFER_MESSAGE = "YOU ARE BEING TRANSFERRED TO A HUMAN AGENT. PLEASE HOLD ON."


@dataclass
class _PlanState:
    next_action: int = 0
    #: What the last turn did: ("action", i) for a real step, ("noise", channel) for an injected error.
    last: tuple[str, Any] | None = None
    closed: bool = False


#: How the expert says a value the task asks it to communicate: ``plain`` (the value alone) or
#: ``quoted`` (the tool result's text from the field's key to the value, ``"amount":84.1``).
ANSWER_FORMS = ("plain", "quoted")


def check_answer_form(answer_form: str) -> str:
    """``answer_form`` if it is one of :data:`ANSWER_FORMS`; else a ValueError naming the field."""
    if answer_form not in ANSWER_FORMS:
        raise ValueError(f"answer_form: expected one of {list(ANSWER_FORMS)}, got {answer_form!r}")
    return answer_form


def quoted_value(value: str, tool_texts: Sequence[str]) -> str:
    """``value`` as the latest tool result holding it writes it, from its field's key on
    (``"amount":84.1``, ``"tracking_id":["857914367572"``); the value alone where no key precedes it.

    Why: a demo model answers by copying from the tool result, and what it copies wrongly is a
    value's first token (its answers were "154.1" for 84.1 and "154.5" for a tracking number).
    Written from the key on, the answer starts with the field's name, a token that occurs once in
    the result, and the value is the continuation of that place, which the copy head learns
    well. Where a value stands at several keys, the last one counts (an order's payment comes
    after its items, one of which may cost the same).
    """
    pattern = re.compile(r'"[A-Za-z_][A-Za-z0-9_]*":\[?"?' + re.escape(value) + r"(?![0-9]|\.[0-9])")
    for text in reversed(tool_texts):
        found = list(pattern.finditer(text))
        if found:
            return found[-1].group(0)
    return value


def closing_message(view: AgentView, answer_form: str = "plain") -> str:
    """The expert's last message: done, with the values the task asks it to say (``answer_form``)."""
    info = []
    if view.task is not None and view.task.evaluation_criteria is not None:
        info = list(view.task.evaluation_criteria.communicate_info or [])
    done = "Your request has been handled."
    if info:
        if check_answer_form(answer_form) == "quoted":
            tool_texts = [str(m.get("content") or "") for m in view.messages if m.get("role") == "tool"]
            info = [quoted_value(value, tool_texts) for value in info]
        done += " The information you asked for: " + ", ".join(info) + "."
    return f"{done} {CLOSING}"


class ExpertAgent(Agent):
    """Replays the task's ground-truth actions; asks the user to perform the user-side ones."""

    oracle = True
    name = "expert"

    def __init__(self, answer_form: str = "plain") -> None:
        """``answer_form``: one of :data:`ANSWER_FORMS`, how the closing message says the values
        the task asks for (see :func:`quoted_value`)."""
        self.answer_form = check_answer_form(answer_form)
        self._states: dict[str, _PlanState] = {}

    def _state(self, view: AgentView) -> _PlanState:
        return self._states.setdefault(view.episode_id, _PlanState())

    def end_episode(self, episode_id: str) -> None:
        self._states.pop(episode_id, None)

    def _advance(self, state: _PlanState, view: AgentView) -> None:
        """Move past the last real action. A ground-truth action that fails is not retried:
        tau2's gold replay ignores such failures too (its data holds a few)."""
        if state.last is not None and state.last[0] == "action":
            state.next_action = state.last[1] + 1

    def _act(self, action: Action, index: int, state: _PlanState, turn: int) -> TurnOutput:
        state.last = ("action", index)
        if action.requestor == "user":
            return TurnOutput(content=format_user_request(action.name, action.arguments))
        return TurnOutput(
            tool_calls=[ToolCall(id=f"call_{turn}_0", name=action.name, arguments=dict(action.arguments))]
        )

    def _close(self, state: _PlanState, view: AgentView) -> TurnOutput:
        state.last = ("close", None)
        actions = view.task.actions if view.task else []
        if actions and actions[-1].name == "transfer_to_human_agents":
            return TurnOutput(content=TRANSFER_MESSAGE)
        return TurnOutput(content=closing_message(view, self.answer_form))

    def respond(self, view: AgentView) -> Turn:
        assert view.task is not None, "the expert is an oracle: the engine must pass the task"
        state = self._state(view)
        self._advance(state, view)
        actions = view.task.actions
        if state.next_action >= len(actions):
            return self._close(state, view)
        return self._step(actions[state.next_action], state, view)
        yield  # pragma: no cover - a generator by contract

    def _step(self, action: Action, state: _PlanState, view: AgentView) -> TurnOutput:
        """The turn for the next planned action (the noisy expert may err instead)."""
        return self._act(action, state.next_action, state, view.turn)


@dataclass
class NoiseRates:
    """Per-channel probabilities of an injected error before each real agent-side action."""

    invented_tool: float = 0.0
    other_side_tool: float = 0.0
    invalid_arguments: float = 0.0
    tool_error: float = 0.0
    malformed_call: float = 0.0
    #: After a hallucinated call: chance of recovering at once without / with the repair message.
    recover_plain: float = 0.5
    recover_repair: float = 0.95
    extra: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in (
            "invented_tool",
            "other_side_tool",
            "invalid_arguments",
            "tool_error",
            "malformed_call",
            "recover_plain",
            "recover_repair",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"noise rate '{name}': expected a probability in [0, 1], got {value!r}")
        if (
            self.invented_tool + self.other_side_tool + self.invalid_arguments + self.tool_error + self.malformed_call
            > 1.0
        ):
            raise ValueError("noise rates: the injected-error probabilities must sum to at most 1")


def _invented_name(name: str, rng: random.Random) -> str:
    stem = name.split("_")
    choices = [
        name.rstrip("s") + ("" if name.endswith("s") else "s"),
        "_".join(stem[:-1]) if len(stem) > 2 else name + "_v2",
        "lookup_" + "_".join(stem[1:]) if len(stem) > 1 else "lookup_" + name,
        name.replace("_", ""),
    ]
    return rng.choice([c for c in choices if c and c != name] or [name + "_x"])


class NoisyExpertAgent(ExpertAgent):
    """The expert with injected errors: every injected event is one error of a known channel.

    Each injected event happens *instead of* the real step at that turn; the next turn
    recovers (does the real step). After a hallucinated tool, recovery is not certain: with
    probability ``recover_plain`` (or ``recover_repair`` when the last tool result is the
    repair message) it recovers, otherwise it hallucinates again — which is what an error
    budget punishes and what the repair is meant to fix.
    """

    name = "noisy_expert"

    def __init__(self, rates: NoiseRates) -> None:
        super().__init__()
        self.rates = rates
        #: Injected events per episode (channel -> count): the ground truth the tests check against.
        self.injected: dict[str, dict[str, int]] = {}

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name, **{k: v for k, v in vars(self.rates).items() if k != "extra"}}

    def _inject(
        self, channel: str, action: Action, view: AgentView, state: _PlanState, rng: random.Random
    ) -> TurnOutput:
        counts = self.injected.setdefault(view.episode_id, {})
        counts[channel] = counts.get(channel, 0) + 1
        state.last = ("noise", channel)
        cid = f"call_{view.turn}_0"
        if channel == "invented_tool":
            return TurnOutput(tool_calls=[ToolCall(cid, _invented_name(action.name, rng), dict(action.arguments))])
        if channel == "other_side_tool":
            name = rng.choice(sorted(view.user_tools))
            return TurnOutput(tool_calls=[ToolCall(cid, name, {})])
        if channel == "invalid_arguments":
            args = dict(action.arguments)
            required = sorted(k for k in args if is_required_argument(view, action.name, k))
            if required and rng.random() < 0.5:
                args.pop(rng.choice(required))
            else:
                args["unexpected_argument"] = True
            return TurnOutput(tool_calls=[ToolCall(cid, action.name, args)])
        if channel == "tool_error":
            args = dict(action.arguments)
            key = rng.choice(_identifier_args(action))
            args[key] = "#UNKNOWN-" + str(rng.randrange(10**6))
            return TurnOutput(tool_calls=[ToolCall(cid, action.name, args)])
        raw = '<tool_call>{"name": "' + action.name + '", "arguments": ' + json.dumps(action.arguments)[:-1]
        return TurnOutput(malformed="unterminated tool call JSON", raw=raw)

    def _step(self, action: Action, state: _PlanState, view: AgentView) -> TurnOutput:
        rng = random.Random(view.seed)
        last_was_hallucination = (
            state.last is not None
            and state.last[0] == "noise"
            and state.last[1] in ("invented_tool", "other_side_tool")
        )
        if last_was_hallucination:
            repaired = is_repair_message(str(view.messages[-1].get("content", ""))) if view.messages else False
            recover = self.rates.recover_repair if repaired else self.rates.recover_plain
            if rng.random() >= recover and action.requestor == "assistant":
                return self._inject("invented_tool", action, view, state, rng)
            return self._act(action, state.next_action, state, view.turn)
        if action.requestor == "assistant" and (state.last is None or state.last[0] != "noise"):
            draw = rng.random()
            for channel in ("invented_tool", "other_side_tool", "invalid_arguments", "tool_error", "malformed_call"):
                rate = getattr(self.rates, channel)
                if draw < rate and self._applicable(channel, action, view):
                    return self._inject(channel, action, view, state, rng)
                draw -= rate
        return self._act(action, state.next_action, state, view.turn)

    @staticmethod
    def _applicable(channel: str, action: Action, view: AgentView) -> bool:
        if channel == "other_side_tool":
            return bool(view.user_tools)
        if channel == "tool_error":
            return bool(_identifier_args(action))
        return True


def _identifier_args(action: Action) -> list[str]:
    """String arguments that name a record (ids, emails): corrupting one gives a domain error."""
    return sorted(k for k, v in action.arguments.items() if isinstance(v, str) and ("id" in k or "email" in k))


def is_required_argument(view: AgentView, tool: str, arg: str) -> bool:
    """Whether ``tool``'s argument schema requires ``arg`` (False for an unknown tool or argument)."""
    spec = view.tools.get(tool)
    field_info = spec.arguments_model.model_fields.get(arg) if spec else None
    return bool(field_info is not None and field_info.is_required())
