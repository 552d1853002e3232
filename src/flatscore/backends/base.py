"""The inference interface every backend implements.

Episodes never call a model directly: an agent (or an LLM user) *yields* a
:class:`ModelRequest` and is resumed with a :class:`ModelResponse`. The driver collects the
pending requests of many concurrent episodes and hands them to a backend in one
``generate`` call, which is what lets the transformers backend batch steps of different
episodes together and the HTTP backend keep N requests in flight.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


class InfrastructureError(RuntimeError):
    """Inference could not be done (server down past all retries, timeout, bad response).

    Never a model error: the engine ends the episode with termination reason
    ``infrastructure_error`` and it is excluded from, and reported beside, the score.
    """


class ContextOverflowError(InfrastructureError):
    """The prompt no longer fits the model's context window (a server refused it as too long).

    Not an infrastructure failure: the conversation outgrew what the model can read, which is the
    model's limit. The engine ends the episode with termination ``context_overflow``, scored as a
    failure (as a run that hit ``max_steps`` is), and never retries it.
    """


@dataclass
class ModelRequest:
    """One generation: an OpenAI-style chat plus tool schemas, decoded prefix-consistently."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    #: Seed derived from (episode seed, turn): with sampling, equal prefixes give equal outputs.
    seed: int = 0
    max_new_tokens: int = 256
    #: Who asks: "agent" or "user" (the driver routes to that role's backend).
    role: str = "agent"
    #: A stable key of the conversation (episode id + role) so a backend can reuse its KV cache.
    cache_key: str | None = None


@dataclass
class ModelResponse:
    """The raw text the model produced (tool calls still inside it) and accounting data."""

    text: str
    #: Tool calls already parsed by a server (OpenAI tool_calls); None when parsing is ours.
    tool_calls: list[dict[str, Any]] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: Prompt tokens actually run through the model (smaller than prompt_tokens with KV reuse).
    prefill_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None
    #: A server's answer as it arrived, before any parsing: ``content`` and ``tool_calls`` (each
    #: only if the message had the key) and the choice's ``finish_reason``. Kept in the episode
    #: log so a turn can be re-parsed offline; None for in-process backends (they keep ``text``).
    server: dict[str, Any] | None = None


class Backend(ABC):
    """A model behind a batch interface. ``generate`` answers requests in order."""

    name: str = "backend"

    @abstractmethod
    def generate(self, requests: list[ModelRequest]) -> list[ModelResponse]:
        """Answer every request. Raise InfrastructureError only for failures of the infrastructure."""

    def generate_each(self, requests: list[ModelRequest]) -> list[ModelResponse | InfrastructureError]:
        """Answer every request, each with its response or its own infrastructure failure.

        The episode driver calls this: a request that fails must fail only its own episode, not
        every episode whose request happened to share the step. A backend that runs a step as one
        batch (in-process transformers) fails or succeeds as a whole, which is this default;
        backends whose requests are independent (HTTP) override it.
        """
        try:
            return list(self.generate(requests))
        except InfrastructureError as error:
            return [error] * len(requests)

    def release(self, cache_key: str) -> None:
        """Forget state (e.g. a KV cache) kept for a finished conversation."""

    def close(self) -> None:
        """Free resources (processes, sockets, model weights)."""

    def describe(self) -> dict[str, Any]:
        """Identity for tracking (model path/id, precision, decoding)."""
        return {"backend": self.name}
