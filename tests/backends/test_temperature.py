"""``backend.temperature`` reaches the agent's backend: 0 is greedy and keeps the identity it always had."""

from __future__ import annotations

from flatscore.backends.transformers_backend import TransformersBackend
from flatscore.models.llm_factory import LLMAgentSettings, make_llm_agent


def test_zero_temperature_is_the_greedy_backend_with_its_old_identity(tiny_model_dir):
    _, backends = make_llm_agent(LLMAgentSettings(model=str(tiny_model_dir), temperature=0.0))
    assert backends["agent"].describe() == TransformersBackend(str(tiny_model_dir), max_batch=1).describe()
    assert backends["agent"].describe()["do_sample"] is False


def test_a_positive_temperature_samples_and_enters_the_identity(tiny_model_dir):
    _, backends = make_llm_agent(LLMAgentSettings(model=str(tiny_model_dir), temperature=0.7))
    described = backends["agent"].describe()
    assert described["do_sample"] is True and described["temperature"] == 0.7
