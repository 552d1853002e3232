"""The LLM tool-calling agent: system prompt + chat history + tool schemas -> one model request.

Each turn yields exactly one :class:`ModelRequest` (``seed=view.seed``,
``cache_key=f"{episode_id}:agent"``, ``tools=[spec.openai_schema() ...]``) and parses the
answer: a server's answer as it arrived (:mod:`.server_answer`: its ``tool_calls`` when it sent
any, vLLM ``--tool-call-parser hermes``, else the Hermes ``<tool_call>`` blocks of its content,
with what the server's parsing missed or got off the format), an in-process model's text with
:mod:`.toolcall_parser`.

Two prompt styles (:meth:`LLMAgent.system_message`):

* ``compact=True`` (the demo model): one short instruction line and no policy text, because the
  demo chat template already renders the tool signatures compactly and the tiny model's
  context is small. The demo model is trained on demonstrations made with this same prompt.
* ``compact=False`` (real models): tau2-bench's agent instructions and the full policy.

In dual-control domains (telecom: ``view.user_tools`` non-empty) both styles list the user's
phone actions by signature and the phrasing the scripted user understands
(``Please do this on your phone: toggle_airplane_mode()``, see :mod:`.user_requests`).
"""

from __future__ import annotations

from typing import Any

from ..backends.base import InfrastructureError, ModelRequest
from ..domains.toolkit import ToolSpec
from .base import Agent, AgentView, Turn, TurnOutput
from .server_answer import parse_server_answer
from .toolcall_parser import parse_hermes, parse_openai
from .user_requests import REQUEST_PREFIX

#: tau2-bench's agent instruction (the "llm_agent" system prompt), followed by the policy.
FULL_INSTRUCTION = """You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."""


def user_tools_text(user_tools: dict[str, ToolSpec], compact: bool) -> str:
    """How the agent learns which actions the user can perform on their own phone."""
    if not user_tools:
        return ""
    sigs = [spec.signature() for spec in user_tools.values()]
    if compact:
        return f"The user can do on their phone: {', '.join(sigs)}. Ask with: {REQUEST_PREFIX} name(arg=value)"
    lines = "\n".join(f"- {sig}: {_first_line(spec.description)}" for sig, spec in zip(sigs, user_tools.values()))
    return (
        "The user has a phone and can perform these actions on it (you cannot call them yourself):\n"
        f"{lines}\n"
        "To ask the user to perform one, write in your message, for example: "
        f"{REQUEST_PREFIX} {next(iter(user_tools.values())).name}(...)\n"
        'with keyword arguments as JSON values, e.g. name(arg="value", n=1).'
    )


def _first_line(text: str) -> str:
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


class LLMAgent(Agent):
    """A model agent. ``compact`` selects the demo-model prompt; see the module docstring."""

    name = "llm"

    def __init__(
        self,
        compact: bool = False,
        max_new_tokens: int | None = 256,
        use_server_tool_calls: bool = True,
        role: str = "agent",
    ) -> None:
        self.compact = bool(compact)
        self.max_new_tokens = int(max_new_tokens) if max_new_tokens else 256
        self.use_server_tool_calls = use_server_tool_calls
        self.role = role

    def system_message(
        self,
        domain: str,
        policy: str,
        tools: dict[str, ToolSpec] | None = None,
        user_tools: dict[str, ToolSpec] | None = None,
    ) -> str:
        """The system prompt (deterministic: demonstrations and episodes share it)."""
        user_part = user_tools_text(user_tools or {}, self.compact)
        if self.compact:
            text = f"You are a {domain} customer service agent. Help the user with the tools, following the policy."
            return text + ("\n" + user_part if user_part else "")
        parts = [f"<instructions>\n{FULL_INSTRUCTION}\n</instructions>"]
        if user_part:
            parts.append(f"<user_device>\n{user_part}\n</user_device>")
        parts.append(f"<policy>\n{(policy or '').strip()}\n</policy>")
        return "\n".join(parts)

    def request(self, view: AgentView) -> ModelRequest:
        system = self.system_message(view.domain, view.policy, view.tools, view.user_tools)
        return ModelRequest(
            messages=[{"role": "system", "content": system}, *view.messages],
            tools=[spec.openai_schema() for spec in view.tools.values()],
            seed=view.seed,
            max_new_tokens=self.max_new_tokens,
            role=self.role,
            cache_key=f"{view.episode_id}:{self.role}",
        )

    def respond(self, view: AgentView) -> Turn:
        response = yield self.request(view)
        if response.error:
            raise InfrastructureError(f"model request failed: {response.error}")
        if self.use_server_tool_calls and response.server is not None:
            out = parse_server_answer(response.server, turn=view.turn, tools_offered=bool(view.tools))
        elif self.use_server_tool_calls and response.tool_calls:
            out = parse_openai(response.text, response.tool_calls, turn=view.turn)
        else:
            out = parse_hermes(response.text, turn=view.turn)
            out.server = response.server
        out.usage = usage_of(response)
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "agent": self.name,
            "prompt": "compact" if self.compact else "full",
            "max_new_tokens": self.max_new_tokens,
            "server_tool_calls": self.use_server_tool_calls,
        }


def usage_of(response: Any) -> dict[str, float]:
    return {
        "prompt_tokens": float(response.prompt_tokens),
        "completion_tokens": float(response.completion_tokens),
        "prefill_tokens": float(response.prefill_tokens),
        "seconds": float(response.seconds),
    }


__all__ = ["FULL_INSTRUCTION", "LLMAgent", "TurnOutput", "user_tools_text"]
