"""A prompt longer than the model's context window ends the episode as the model's failure.

vLLM answers such a request with HTTP 400 ("This model's maximum context length is N tokens.
However, your prompt contains ..."): before, that became an infrastructure error, the episode
was retried and then dropped from the score, so a cell of a small-context model lost its long
episodes silently (seen on the demo model served by vLLM: every retail episode dropped).
"""

from __future__ import annotations

import pytest
from stub_openai import StubOpenAIServer

from flatscore.backends.base import ContextOverflowError, InfrastructureError, ModelRequest
from flatscore.backends.openai_backend import OpenAIBackend

#: The body vLLM 0.32 (CPU build) sent for the demo model's long retail prompts.
VLLM_OVERFLOW_BODY = {
    "error": {
        "message": "This model's maximum context length is 1024 tokens. However, your prompt contains 1031 input "
        "tokens, which exceeds this limit even without any output tokens. Please reduce the length of the input prompt.",
        "type": "BadRequestError",
        "param": "input_tokens",
        "code": 400,
    }
}


def _overflow_for_long_prompts(body: dict, n: int) -> tuple[int, dict]:
    """vLLM's refusal for a prompt past the context; another 400 for a short one."""
    if len(body["messages"]) > 1:
        return 400, VLLM_OVERFLOW_BODY
    return 400, {"error": {"message": "tool_choice must be auto", "code": 400}}


@pytest.fixture()
def server():
    stub = StubOpenAIServer(_overflow_for_long_prompts)
    yield stub.url, stub.requests
    stub.close()


def test_overflow_is_its_own_error_and_not_retried(server):
    url, hits = server
    backend = OpenAIBackend(url, "m", max_retries=3, backoff_s=0.01)
    long = ModelRequest(messages=[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], seed=1)
    other = ModelRequest(messages=[{"role": "user", "content": "a"}], seed=1)
    answers = backend.generate_each([long, other])
    backend.close()
    assert isinstance(answers[0], ContextOverflowError)
    assert "maximum context length is 1024" in str(answers[0])
    # any other 400 stays an infrastructure error (the request itself was wrong)
    assert isinstance(answers[1], InfrastructureError) and not isinstance(answers[1], ContextOverflowError)
    assert len(hits) == 2, "neither was retried"
