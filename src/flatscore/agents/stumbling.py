"""An oracle that slips and recovers: demonstrations of getting back on track after an error.

Why: the expert never errs, so a model trained only on its conversations has never seen a
conversation go on after an error result. The default demo model's successful episodes then
held no errors at all (17 of 40 held-out telecom tasks solved, every one error-free), and its
errors ended in failure: the error budget had nothing to hide, which is the study's subject.
This wrapper lets any expert slip before a real tool call, with a call that fails the way a
small model's do (an id copied with one character wrong, a required argument left out, a tool
name garbled), and then make the real call. The slipped call is marked (its call id starts with
:data:`SLIP_ID_PREFIX`) so training can keep it as context without learning to make it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from .base import Agent, AgentView, ToolCall, Turn, TurnOutput
from .expert import is_required_argument

#: Call ids of slipped calls begin with this; :func:`is_slip` reads it back from a conversation.
SLIP_ID_PREFIX = "slip_"

SLIP_KINDS = ("wrong_id", "missing_argument", "garbled_name")


def is_slip(message: dict[str, Any]) -> bool:
    """True for an assistant message whose tool call is a deliberate slip."""
    calls = message.get("tool_calls") or []
    return message.get("role") == "assistant" and any(str(c.get("id", "")).startswith(SLIP_ID_PREFIX) for c in calls)


@dataclass
class _Pending:
    real: TurnOutput | None = None
    slips: int = 0


@dataclass
class StumblingAgent(Agent):
    """``inner`` with a slip before a tool-call turn at probability ``rate`` (never twice in a row).

    Deterministic: each decision draws from the turn's seed and the episode id. At most ``max_slips`` per episode, so
    that an episode stays well inside the error budget.
    """

    inner: Agent
    rate: float
    max_slips: int = 2
    _pending: dict[str, _Pending] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"slip rate: expected a probability in [0, 1], got {self.rate!r}")
        self.oracle = self.inner.oracle
        self.name = f"stumbling_{self.inner.name}"

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "agent": self.name, "slip_rate": self.rate}

    def end_episode(self, episode_id: str) -> None:
        self._pending.pop(episode_id, None)
        self.inner.end_episode(episode_id)

    def respond(self, view: AgentView) -> Turn:
        pending = self._pending.setdefault(view.episode_id, _Pending())
        if pending.real is not None:
            real, pending.real = pending.real, None
            return real
        out = yield from self.inner.respond(view)
        # The turn seed alone is the same in every episode of a seed: add the episode's identity.
        rng = random.Random(f"{view.seed}/{view.episode_id}")
        if len(out.tool_calls) != 1 or pending.slips >= self.max_slips or rng.random() >= self.rate:
            return out
        slipped = slip(out.tool_calls[0], view, rng)
        if slipped is None:
            return out
        pending.real = out
        pending.slips += 1
        return TurnOutput(tool_calls=[slipped])


def slip(call: ToolCall, view: AgentView, rng: random.Random) -> ToolCall | None:
    """A failing variant of ``call`` of a kind that applies to it, or None where none does."""
    if not isinstance(call.arguments, dict):
        return None
    ids = sorted(k for k, v in call.arguments.items() if isinstance(v, str) and _is_identifier(k, v))
    required = sorted(k for k in call.arguments if is_required_argument(view, call.name, k))
    kinds = [k for k, ok in zip(SLIP_KINDS, (bool(ids), bool(required), True)) if ok]
    kind = rng.choice(kinds)
    slip_id = f"{SLIP_ID_PREFIX}{view.turn}"
    args = dict(call.arguments)
    if kind == "wrong_id":
        key = rng.choice(ids)
        args[key] = _one_char_off(args[key], rng)
        return ToolCall(slip_id, call.name, args)
    if kind == "missing_argument":
        args.pop(rng.choice(required))
        return ToolCall(slip_id, call.name, args)
    name = _garbled(call.name, rng)
    if name in view.tools or name in view.user_tools:
        name = call.name + "s"
    return ToolCall(slip_id, name, args)


def _is_identifier(key: str, value: str) -> bool:
    return ("id" in key or "email" in key or "phone" in key) and any(ch.isalnum() for ch in value)


def _one_char_off(value: str, rng: random.Random) -> str:
    """``value`` with one digit (or, without digits, one letter) changed: a copy slip."""
    digits = [i for i, ch in enumerate(value) if ch.isdigit()]
    if digits:
        i = rng.choice(digits)
        return value[:i] + str((int(value[i]) + rng.randint(1, 9)) % 10) + value[i + 1 :]
    letters = [i for i, ch in enumerate(value) if ch.isalpha()]
    i = rng.choice(letters)
    replacement = rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != value[i].lower()])
    return value[:i] + replacement + value[i + 1 :]


def _garbled(name: str, rng: random.Random) -> str:
    """A plausible wrong tool name: a word dropped, or a plural."""
    words = name.split("_")
    if len(words) > 2 and rng.random() < 0.5:
        del words[rng.randrange(1, len(words))]
        return "_".join(words)
    return name + "s"
