"""The scripted user simulator: plays a task's scenario deterministically.

It opens with the reason for the call and what the user knows, gives its details again
when asked, performs on its own device every user tool the agent names (dual control), then
reports what it saw, and ends the call (``###STOP###``) when the agent closes or transfers.
It is patient but not endlessly: after ``patience`` agent messages in a row that neither
ask it to act nor close the call it hangs up, so a confused agent cannot loop forever.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .base import STOP_TOKEN, ToolCall, Turn, TurnOutput, UserSimulator, UserView
from .user_requests import parse_user_requests

_CLOSING = re.compile(r"anything else", re.IGNORECASE)
_TRANSFER = re.compile(r"transferr", re.IGNORECASE)


def _first_person(text: str) -> str:
    text = re.sub(r"\bYou are\b", "I am", text)
    text = re.sub(r"\byou are\b", "I am", text)
    text = re.sub(r"\bYou\b", "I", text)
    text = re.sub(r"\byour\b", "my", text)
    text = re.sub(r"\bYour\b", "My", text)
    return text


@dataclass
class _UserState:
    idle_turns: int = 0
    pending_report: list[str] | None = None


class ScriptedUser(UserSimulator):
    name = "scripted_user"

    def __init__(self, patience: int = 3) -> None:
        if patience < 1:
            raise ValueError(f"patience: expected an integer >= 1, got {patience!r}")
        self.patience = patience
        self._states: dict[str, _UserState] = {}

    def end_episode(self, episode_id: str) -> None:
        self._states.pop(episode_id, None)

    def opening(self, view: UserView) -> str:
        ins = view.task.instructions
        parts = [_first_person(ins.reason_for_call.strip())]
        if ins.known_info:
            parts.append(_first_person(ins.known_info.strip()))
        return " ".join(p for p in parts if p)

    def respond(self, view: UserView) -> Turn:
        state = self._states.setdefault(view.episode_id, _UserState())
        messages = view.messages
        if len(messages) <= 1:
            return TurnOutput(content=self.opening(view))
        last = messages[-1]
        if last.get("role") == "tool":
            # Report the results of the calls just made, in order.
            results = []
            for msg in reversed(messages):
                if msg.get("role") != "tool":
                    break
                results.append(f"{msg.get('name')}: {msg.get('content')}")
            results.reverse()
            return TurnOutput(content="I did that. " + " | ".join(results))
        agent_text = str(last.get("content") or "")
        requests = parse_user_requests(agent_text, view.tools)
        if requests:
            state.idle_turns = 0
            calls = [
                ToolCall(id=f"user_{view.turn}_{i}", name=name, arguments=args)
                for i, (name, args) in enumerate(requests)
            ]
            return TurnOutput(tool_calls=calls)
        if _TRANSFER.search(agent_text):
            return TurnOutput(content=STOP_TOKEN, stop=True)
        if _CLOSING.search(agent_text):
            return TurnOutput(content=f"No, that's all. Thank you! {STOP_TOKEN}", stop=True)
        state.idle_turns += 1
        if state.idle_turns >= self.patience:
            return TurnOutput(content=f"This is not getting anywhere. Goodbye. {STOP_TOKEN}", stop=True)
        return TurnOutput(content=self.opening(view))
        yield  # pragma: no cover
