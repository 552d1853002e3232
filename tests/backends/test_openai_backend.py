"""OpenAIBackend against real server processes: transformers serve, and a stdlib fault server."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from flatscore.agents.toolcall_parser import parse_openai
from flatscore.backends.base import InfrastructureError, ModelRequest
from flatscore.backends.openai_backend import OpenAIBackend
from flatscore.backends.serve import ManagedServer, transformers_serve_command, transformers_serve_env
from flatscore.backends.testing import SAMPLE_TOOLS as TOOLS


def _reqs(n: int, tools=None) -> list[ModelRequest]:
    return [
        ModelRequest(
            messages=[{"role": "user", "content": f"msg{i}"}], tools=tools or [], seed=i, cache_key=f"ep{i}:agent"
        )
        for i in range(n)
    ]


def test_transformers_serve_with_tools(tiny_model_dir, tmp_path):
    """The real `transformers serve` on the tiny model dir answers a request with tools."""
    from flatscore.backends.transformers_backend import TransformersBackend

    cmd = transformers_serve_command(str(tiny_model_dir))
    with ManagedServer(
        cmd,
        log_path=tmp_path / "serve.log",
        env={**transformers_serve_env(tmp_path / "hub"), "OMP_NUM_THREADS": "1"},
        startup_timeout_s=150,
    ) as srv:
        backend = OpenAIBackend(srv.base_url, model=str(tiny_model_dir), max_retries=1, timeout_s=60)
        req = ModelRequest(
            messages=[{"role": "user", "content": "Where is my order #W123?"}], tools=TOOLS, max_new_tokens=8
        )
        [resp] = backend.generate([req])
        backend.close()
    assert resp.completion_tokens >= 1 and resp.prompt_tokens > 0
    assert resp.error is None
    # The server rendered the same chat template (tools included) as the in-process backend.
    local = TransformersBackend(tiny_model_dir)
    assert resp.prompt_tokens == len(local.render(req))
    turn = parse_openai(resp.text, resp.tool_calls, turn=0)
    assert turn.content is not None or turn.tool_calls or turn.malformed


def test_tools_seed_usage_and_order(fake_server, tmp_path, monkeypatch):
    monkeypatch.setenv("FLATSCORE_TEST_KEY", "sk-secret-123")
    cmd, log = fake_server("ok", "--delay", "0.05")
    with ManagedServer(cmd, log_path=tmp_path / "srv.log") as srv:
        backend = OpenAIBackend(srv.base_url + "/v1", model="fake", api_key_env="FLATSCORE_TEST_KEY", max_in_flight=4)
        out = backend.generate(_reqs(9, TOOLS))
        backend.close()
    assert [r.text for r in out] == [f"echo:msg{i}" for i in range(9)]
    assert all(r.tool_calls[0]["function"]["name"] == "get_order_details" for r in out)
    assert [parse_openai(r.text, r.tool_calls, 0).tool_calls[0].arguments for r in out] == [
        {"seed": i} for i in range(9)
    ]
    assert out[0].prompt_tokens == 10 and out[0].completion_tokens == 3 and out[0].prefill_tokens == 6
    assert "auth=yes" in log.read_text()
    assert "sk-secret-123" not in repr(backend.describe()) and "sk-secret-123" not in repr(backend)


def test_concurrency_is_bounded(fake_server, tmp_path):
    cmd, _ = fake_server("ok", "--delay", "0.3")
    with ManagedServer(cmd, log_path=tmp_path / "srv.log") as srv:
        backend = OpenAIBackend(srv.base_url, model="fake", max_in_flight=4)
        t0 = time.perf_counter()
        backend.generate(_reqs(8))
        elapsed = time.perf_counter() - t0
        backend.close()
    # 8 requests of 0.3 s with 4 in flight: two waves (about 0.6 s), not 8 x 0.3 s, not one wave
    assert 0.55 < elapsed < 2.0, elapsed


def test_kill_and_restart_loses_nothing(fake_server, tmp_path):
    cmd, log = fake_server("ok", "--delay", "0.15")
    n = 24
    srv = ManagedServer(cmd, log_path=tmp_path / "srv.log")
    with srv:
        backend = OpenAIBackend(srv.base_url, model="fake", max_in_flight=4, backoff_s=0.2, max_retries=8, timeout_s=10)
        result: dict = {}

        def run():
            try:
                result["out"] = backend.generate(_reqs(n))
            except BaseException as exc:  # noqa: BLE001
                result["err"] = exc

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.4)  # some requests done, some in flight
        srv.kill()
        time.sleep(1.0)  # the server is down: clients see connection errors and back off
        srv.start()  # same port
        worker.join(60)
        assert not worker.is_alive()
    assert "err" not in result, result.get("err")
    out = result["out"]
    assert [r.text for r in out] == [f"echo:msg{i}" for i in range(n)]
    assert backend.retries > 0
    lines = log.read_text().splitlines()
    done = Counter(line.split()[1] for line in lines if line.startswith("done "))
    recv = Counter(line.split()[1] for line in lines if line.startswith("recv "))
    ids = {backend.request_id(r, backend.body(r)) for r in _reqs(n)}
    assert set(done) == ids  # every request was answered by the server...
    assert all(c == 1 for c in done.values()), done  # ...exactly once
    assert sum(recv.values()) >= n
    backend.close()


@pytest.mark.parametrize("mode", ["500", "badjson"])
def test_persistent_failure_raises_after_retries(fake_server, tmp_path, mode):
    cmd, log = fake_server(mode)
    with ManagedServer(cmd, log_path=tmp_path / "srv.log") as srv:
        backend = OpenAIBackend(srv.base_url, model="fake", max_retries=3, backoff_s=0.01)
        with pytest.raises(InfrastructureError, match="after 4 attempts"):
            backend.generate(_reqs(1))
        backend.close()
    assert sum(1 for line in log.read_text().splitlines() if line.startswith("recv")) == 4


def test_hanging_server_times_out(fake_server, tmp_path):
    cmd, log = fake_server("hang")
    with ManagedServer(cmd, log_path=tmp_path / "srv.log") as srv:
        backend = OpenAIBackend(srv.base_url, model="fake", max_retries=2, backoff_s=0.01, timeout_s=0.5)
        t0 = time.perf_counter()
        with pytest.raises(InfrastructureError, match="Timeout"):
            backend.generate(_reqs(1))
        assert time.perf_counter() - t0 < 5
        backend._pool.shutdown(wait=False)
    assert sum(1 for line in log.read_text().splitlines() if line.startswith("recv")) == 3


def test_transient_500_recovers(fake_server, tmp_path):
    cmd, _ = fake_server("flaky500")
    with ManagedServer(cmd, log_path=tmp_path / "srv.log") as srv:
        backend = OpenAIBackend(srv.base_url, model="fake", max_retries=2, backoff_s=0.01, max_in_flight=1)
        out = backend.generate(_reqs(3))
        backend.close()
    assert [r.text for r in out] == ["echo:msg0", "echo:msg1", "echo:msg2"]
    assert backend.retries == 3


def test_no_server_at_all():
    backend = OpenAIBackend("http://127.0.0.1:9", model="x", max_retries=1, backoff_s=0.01, timeout_s=1)
    with pytest.raises(InfrastructureError, match="ConnectError"):
        backend.generate(_reqs(2))
    backend.close()


@pytest.mark.slow
def test_episode_through_transformers_serve_matches_in_process(tmp_path):
    """A whole episode over HTTP (agent history with tool calls/results) equals the in-process run."""
    demo = pytest.importorskip("flatscore.models.demo")
    from flatscore.agents.llm import LLMAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.backends.transformers_backend import TransformersBackend
    from flatscore.domains import domain_class, load_domain
    from flatscore.engine.episode import EpisodeSettings
    from flatscore.engine.runner import run_cell
    from flatscore.engine.store import EpisodeStore

    model = demo.build_untrained_demo(tmp_path / "demo", size="tiny")
    domain = load_domain("retail", domain_class("retail").generate(tmp_path / "retail", seed=3, n_tasks=6))
    tasks = domain.tasks()[:2]
    settings = EpisodeSettings(max_errors=3, max_steps=6)
    runs = []
    with ManagedServer(
        transformers_serve_command(str(model)),
        log_path=tmp_path / "serve.log",
        env={**transformers_serve_env(tmp_path / "hub"), "OMP_NUM_THREADS": "1"},
        startup_timeout_s=150,
    ) as srv:
        for name, backend in (
            ("http", OpenAIBackend(srv.base_url, model=str(model), max_in_flight=2, max_retries=1)),
            ("local", TransformersBackend(model)),
        ):
            store = EpisodeStore(tmp_path / f"{name}.jsonl")
            run_cell(
                domain,
                tasks,
                LLMAgent(compact=True, max_new_tokens=16),
                ScriptedUser(),
                settings,
                1,
                0,
                store,
                backends={"agent": backend},
                max_in_flight=2,
                progress=False,
            )
            records = sorted(store.records(), key=lambda r: r["task_id"])
            assert all(r["termination"] != "infrastructure_error" for r in records), [r["termination"] for r in records]
            assert all(r["usage"]["completion_tokens"] > 0 and len(r["messages"]) >= 4 for r in records)
            runs.append([[m.get("content") for m in r["messages"]] for r in records])
    assert runs[0] == runs[1]


def test_a_failed_request_fails_only_itself(fake_server, tmp_path):
    """Requests sent together are independent on the wire: one answered 400 comes back as its own
    InfrastructureError beside the others' answers (generate failed the whole step, so with 8 in flight
    one bad task turned every episode batched with it into an infrastructure error)."""
    cmd, _ = fake_server("400onfail")
    requests = _reqs(4)
    requests[2].messages[-1]["content"] = "FAIL please"
    with ManagedServer(cmd, log_path=tmp_path / "srv.log") as srv:
        backend = OpenAIBackend(srv.base_url, model="fake", max_in_flight=4, max_retries=0)
        answers = backend.generate_each(requests)
        backend.close()
    assert isinstance(answers[2], InfrastructureError) and "HTTP 400" in str(answers[2])
    assert [a.text for i, a in enumerate(answers) if i != 2] == ["echo:msg0", "echo:msg1", "echo:msg3"]
