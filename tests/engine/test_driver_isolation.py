"""The episode driver gives each episode its own answer or its own request's failure."""

from __future__ import annotations

from flatscore.backends.base import Backend, InfrastructureError, ModelRequest, ModelResponse
from flatscore.engine.runner import drive


class _OneBadRequest(Backend):
    """Answers every request but the one whose last message says FAIL (a backend with independent requests)."""

    def generate(self, requests):  # pragma: no cover - the driver uses generate_each
        raise AssertionError("the driver must ask for per-request answers")

    def generate_each(self, requests: list[ModelRequest]):
        return [
            InfrastructureError("HTTP 400") if "FAIL" in r.messages[-1]["content"] else ModelResponse(text="ok")
            for r in requests
        ]


class _Episode:
    """The smallest thing the driver plays: asks once, ends with what it got."""

    def __init__(self, name: str) -> None:
        self.episode_id = name

    def run(self):
        try:
            response = yield ModelRequest(messages=[{"role": "user", "content": self.episode_id}], role="agent")
        except InfrastructureError as error:
            return (self.episode_id, f"failed: {error}")
        return (self.episode_id, response.text)


def test_one_failed_request_ends_only_its_episode() -> None:
    done: list[tuple[str, str]] = []
    episodes = [_Episode(name) for name in ("a", "FAIL-b", "c", "d")]
    drive(episodes, {"agent": _OneBadRequest()}, done.append, max_in_flight=4)
    assert sorted(done) == [("FAIL-b", "failed: HTTP 400"), ("a", "ok"), ("c", "ok"), ("d", "ok")]


def test_a_batch_backend_failure_reaches_every_episode_of_the_step() -> None:
    """The default generate_each: a backend that runs a step as one batch fails it as a whole."""

    class _Down(Backend):
        def generate(self, requests):
            raise InfrastructureError("batch failed")

    done: list[tuple[str, str]] = []
    drive([_Episode("a"), _Episode("b")], {"agent": _Down()}, done.append, max_in_flight=2)
    assert sorted(done) == [("a", "failed: batch failed"), ("b", "failed: batch failed")]
