"""Building the LLM agent and the backend that serves its model, from typed settings.

It lives with the models (not the agents) because it decides by the model folder: a demo model
(one with a flatscore manifest) gets the compact prompt unless a prompt is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from flatscore.agents.llm import LLMAgent
from flatscore.backends.base import Backend
from flatscore.models.manifest import MANIFEST_NAME


@dataclass(frozen=True)
class LLMAgentSettings:
    """Which model answers, through which backend, and how the agent prompts it."""

    model: str
    backend: Literal["transformers", "openai"] = "transformers"
    prompt: Literal["compact", "full"] | None = None
    base_url: str | None = None
    served_model: str | None = None
    max_in_flight: int = 1
    max_new_tokens: int = 256
    #: 0: greedy decoding. Above 0 the agent samples, each request from its own seed (episode, turn):
    #: what makes A/A replicates with independent seeds differ at all.
    temperature: float = 0.0


#: How long a refused connection is waited out: a killed vLLM server is restarted by its service
#: job on the same port, which takes 30-160 s on a CPU (cold compile cache) and less on a GPU.
SERVER_OUTAGE_S = 300.0


def make_llm_agent(settings: LLMAgentSettings) -> tuple[LLMAgent, dict[str, Backend]]:
    """The LLM agent and {role: backend}; without a prompt choice, a demo model's folder selects compact."""
    if not settings.model:
        raise ValueError("--model: required with --agent llm (a model folder or a Hugging Face id)")
    if settings.prompt:
        compact = settings.prompt == "compact"
    else:
        compact = (Path(settings.model) / MANIFEST_NAME).exists()
    agent = LLMAgent(compact=compact, max_new_tokens=settings.max_new_tokens)
    backend: Backend
    if settings.backend == "transformers":
        from flatscore.backends.transformers_backend import TransformersBackend

        if not Path(settings.model).exists():
            raise ValueError(
                f"--model: folder not found: {settings.model} (the transformers backend loads a local folder)"
            )
        backend = TransformersBackend(
            settings.model,
            max_batch=settings.max_in_flight,
            do_sample=settings.temperature > 0,
            temperature=settings.temperature if settings.temperature > 0 else 1.0,
        )
    else:
        from flatscore.backends.openai_backend import OpenAIBackend

        if not settings.base_url:
            raise ValueError(
                "--base-url: required with --backend openai (the server's URL, e.g. http://127.0.0.1:8000)"
            )
        backend = OpenAIBackend(
            settings.base_url,
            settings.served_model or settings.model,
            max_in_flight=settings.max_in_flight,
            temperature=settings.temperature,
            outage_s=SERVER_OUTAGE_S,
        )
    return agent, {"agent": backend}
