"""An LLM user simulator: role-plays the task's ``user_scenario`` on the same backends.

Optional (the embedded default uses the scripted user). Its requests carry ``role="user"``
and ``cache_key=f"{episode_id}:user"`` so the driver can route them to a user backend and the
transformers backend keeps its KV cache apart from the agent's. The prompt follows
tau2-bench's user simulator guidelines: one message at a time, reveal information only when
needed, ``###STOP###`` when the goal is reached, ``###TRANSFER###`` when transferred, and
``###OUT-OF-SCOPE###`` when the scenario does not say what to do next (tau2's simulator ends
the conversation on any of the three). A study may replace the guidelines with its own text;
their digest is part of the user's identity, so changing them reruns the cells they touch.

The user's history is the engine's ``user_history``: the agent's messages have role
"user" and the simulator's own ones role "assistant", so it is passed to the model as is.
In telecom the user's phone tools go in ``tools``; tool calls come back as ``tool_calls``.
A user output that looks like a broken tool call is kept as plain text (with ``malformed``
set), so the conversation goes on.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..backends.base import InfrastructureError, ModelRequest
from ..domains.tasks import Task
from .base import OUT_OF_SCOPE_TOKEN, STOP_TOKEN, TRANSFER_TOKEN, Turn, UserSimulator, UserView
from .llm import usage_of
from .toolcall_parser import parse_hermes, parse_openai

USER_GUIDELINES = f"""You are playing the role of a customer contacting a customer service agent.
Follow the scenario below. Rules:
- Write one message at a time, as the customer would, in plain language.
- Do not give away all the information at once: only what the agent needs for the current step.
- Never invent information that is not in the scenario; if asked for something you do not know, say so.
- If you have tools (your phone), use them when the agent asks you to perform an action, then report what you see.
- When your goal is reached, or it cannot be reached, end the conversation with {STOP_TOKEN}.
- If you are transferred to another agent, answer with {TRANSFER_TOKEN}.
- If the scenario does not tell you what to do next, answer with {OUT_OF_SCOPE_TOKEN}."""

#: Tokens after which tau2's simulator ends the conversation (besides STOP_TOKEN, which the
#: engine already checks in every user message).
ENDING_TOKENS = (TRANSFER_TOKEN, OUT_OF_SCOPE_TOKEN)


def scenario_text(task: Task) -> str:
    scenario = task.user_scenario
    ins = task.instructions
    parts = []
    if scenario.persona:
        parts.append(f"Persona: {scenario.persona}")
    if ins.reason_for_call:
        parts.append(f"Reason for call: {ins.reason_for_call}")
    if ins.known_info:
        parts.append(f"Known info: {ins.known_info}")
    if ins.unknown_info:
        parts.append(f"Unknown info: {ins.unknown_info}")
    if ins.task_instructions:
        parts.append(f"Task instructions: {ins.task_instructions}")
    return "\n".join(parts)


class LLMUser(UserSimulator):
    name = "llm_user"

    def __init__(self, max_new_tokens: int = 128, role: str = "user", guidelines: str | None = None) -> None:
        self.max_new_tokens = int(max_new_tokens)
        self.role = role
        #: the study's own guidelines (a prompt file), or the built-in ones
        self.guidelines = guidelines if guidelines is not None else USER_GUIDELINES

    def system_message(self, task: Task) -> str:
        return f"{self.guidelines}\n\n<scenario>\n{scenario_text(task)}\n</scenario>"

    def request(self, view: UserView) -> ModelRequest:
        return ModelRequest(
            messages=[{"role": "system", "content": self.system_message(view.task)}, *view.messages],
            tools=[spec.openai_schema() for spec in view.tools.values()],
            seed=view.seed,
            max_new_tokens=self.max_new_tokens,
            role=self.role,
            cache_key=f"{view.episode_id}:{self.role}",
        )

    def respond(self, view: UserView) -> Turn:
        response = yield self.request(view)
        if response.error:
            raise InfrastructureError(f"user model request failed: {response.error}")
        if response.tool_calls:
            out = parse_openai(response.text, response.tool_calls, turn=view.turn)
        else:
            out = parse_hermes(response.text, turn=view.turn)
        if out.malformed is not None:
            out.content = (response.text or "").strip()
            out.tool_calls = []
        if not view.tools and out.tool_calls:
            # no phone tools in this domain: a call is just odd text
            out.content = (response.text or "").strip()
            out.tool_calls = []
        if out.content is not None and any(token in out.content for token in ENDING_TOKENS):
            out.stop = True
        out.usage = usage_of(response)
        return out

    def describe(self) -> dict[str, Any]:
        """The user's part of a cell's identity: every key prefixed, so none shadows the agent's."""
        return {
            "user": self.name,
            "user_max_new_tokens": self.max_new_tokens,
            "user_prompt_sha256": hashlib.sha256(self.guidelines.encode("utf-8")).hexdigest()[:16],
        }


__all__ = ["ENDING_TOKENS", "LLMUser", "USER_GUIDELINES", "scenario_text"]
