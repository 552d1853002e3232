"""LLMAgent / LLMUser: one request per turn, prompts, parsing; end to end on the demo model."""

from __future__ import annotations

import pytest

from flatscore.agents.base import AgentView, UserView
from flatscore.agents.llm import LLMAgent
from flatscore.agents.llm_user import LLMUser
from flatscore.agents.toolcall_parser import format_hermes
from flatscore.agents.user_requests import REQUEST_PREFIX, parse_user_requests
from flatscore.backends.base import Backend, InfrastructureError, ModelRequest, ModelResponse
from flatscore.domains.retail.tools import RetailTools
from flatscore.domains.telecom.tools import TelecomTools
from flatscore.domains.telecom.user_tools import TelecomUserTools


class ScriptedBackend(Backend):
    """A backend that answers from a list (no model), recording what it was asked."""

    def __init__(self, answers: list[ModelResponse]):
        self.answers = list(answers)
        self.seen: list[ModelRequest] = []

    def generate(self, requests):
        self.seen.extend(requests)
        return [self.answers.pop(0) for _ in requests]


def run_turn_with(backend: Backend, gen):
    """Drive one generator turn through a backend, counting requests."""
    n = 0
    try:
        req = next(gen)
        while True:
            n += 1
            req = gen.send(backend.generate([req])[0])
    except StopIteration as done:
        return done.value, n


def _view(domain="retail", user_tools=None, tools=None, turn=3):
    return AgentView(
        domain=domain,
        policy="# Retail policy\nNever cancel a delivered order.",
        messages=[
            {"role": "assistant", "content": "Hi! How can I help you?"},
            {"role": "user", "content": "Cancel #W1"},
        ],
        tools=tools or dict(RetailTools.specs),
        user_tools=user_tools or {},
        turn=turn,
        seed=4242,
        episode_id="ep7",
    )


def test_one_request_per_turn_with_tools_seed_and_cache_key():
    call = format_hermes("get_order_details", {"order_id": "#W1"})
    backend = ScriptedBackend(
        [ModelResponse(text="Let me check.\n" + call, prompt_tokens=50, completion_tokens=9, prefill_tokens=20)]
    )
    out, n = run_turn_with(backend, LLMAgent(compact=False).respond(_view()))
    assert n == 1
    [req] = backend.seen
    assert req.seed == 4242 and req.cache_key == "ep7:agent" and req.role == "agent"
    assert req.messages[0]["role"] == "system" and req.messages[1:] == _view().messages
    assert {t["function"]["name"] for t in req.tools} == set(RetailTools.specs)
    assert req.tools[0] == next(iter(RetailTools.specs.values())).openai_schema()
    assert out.content == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in out.tool_calls] == [
        ("call_3_0", "get_order_details", {"order_id": "#W1"})
    ]
    assert out.usage["prompt_tokens"] == 50 and out.usage["prefill_tokens"] == 20


def test_full_prompt_has_policy_compact_does_not():
    full = LLMAgent(compact=False).system_message("retail", "POLICY TEXT HERE", RetailTools.specs, {})
    compact = LLMAgent(compact=True).system_message("retail", "POLICY TEXT HERE", RetailTools.specs, {})
    assert "POLICY TEXT HERE" in full and "<policy>" in full
    assert "POLICY TEXT HERE" not in compact and "retail" in compact
    assert len(compact) < 200
    # deterministic: demonstrations and episodes must share it
    assert compact == LLMAgent(compact=True).system_message("retail", "other", RetailTools.specs, {})


@pytest.mark.parametrize("compact", [True, False])
def test_telecom_lists_phone_actions_in_the_parseable_form(compact):
    agent = LLMAgent(compact=compact)
    text = agent.system_message("telecom", "policy", TelecomTools.specs, TelecomUserTools.specs)
    for spec in TelecomUserTools.specs.values():
        assert spec.signature() in text
    assert REQUEST_PREFIX in text
    # an agent message in the advertised form is understood by the scripted user's parser
    msg = f"{REQUEST_PREFIX} toggle_airplane_mode()"
    assert parse_user_requests(msg, TelecomUserTools.specs) == [("toggle_airplane_mode", {})]
    # and the user's tools are not offered as the agent's own
    backend = ScriptedBackend([ModelResponse(text=msg)])
    out, _ = run_turn_with(backend, agent.respond(_view("telecom", TelecomUserTools.specs, TelecomTools.specs)))
    assert out.content == msg and out.tool_calls == []
    assert not {t["function"]["name"] for t in backend.seen[0].tools} & set(TelecomUserTools.specs)


def test_server_tool_calls_are_used_and_malformed_reported():
    calls = [
        {"id": "x", "type": "function", "function": {"name": "get_order_details", "arguments": '{"order_id": "#W9"}'}}
    ]
    backend = ScriptedBackend(
        [
            ModelResponse(text="", tool_calls=calls),
            ModelResponse(text='<tool_call>{"name": "x", "arguments": {</tool_call>'),
        ]
    )
    agent = LLMAgent()
    out, _ = run_turn_with(backend, agent.respond(_view()))
    assert out.tool_calls[0].arguments == {"order_id": "#W9"}
    out, _ = run_turn_with(backend, agent.respond(_view()))
    assert out.malformed and out.tool_calls == [] and out.raw.startswith("<tool_call>")


def test_response_error_is_infrastructure():
    backend = ScriptedBackend([ModelResponse(text="", error="server gone")])
    with pytest.raises(InfrastructureError, match="server gone"):
        run_turn_with(backend, LLMAgent().respond(_view()))


def test_llm_user_requests_and_stop(synthetic_dirs):
    from flatscore.domains import load_domain

    domain = load_domain("telecom", synthetic_dirs["telecom"])
    task = domain.tasks()[0]
    view = UserView(
        domain="telecom",
        task=task,
        messages=[{"role": "user", "content": "Hi! How can I help?"}],
        tools=dict(TelecomUserTools.specs),
        turn=1,
        seed=9,
        episode_id="ep1",
    )
    user = LLMUser()
    backend = ScriptedBackend(
        [
            ModelResponse(text="My phone has no signal."),
            ModelResponse(text="All good now, thanks! ###STOP###"),
            ModelResponse(text=format_hermes("toggle_airplane_mode", {})),
            ModelResponse(text="<tool_call>{oops"),
        ]
    )
    out, n = run_turn_with(backend, user.respond(view))
    req = backend.seen[0]
    assert n == 1 and req.role == "user" and req.cache_key == "ep1:user" and req.seed == 9
    assert task.instructions.reason_for_call in req.messages[0]["content"]
    assert {t["function"]["name"] for t in req.tools} == set(TelecomUserTools.specs)
    assert out.content == "My phone has no signal." and not out.stop
    out, _ = run_turn_with(backend, user.respond(view))
    assert out.stop
    out, _ = run_turn_with(backend, user.respond(view))
    assert out.tool_calls[0].name == "toggle_airplane_mode"
    out, _ = run_turn_with(backend, user.respond(view))
    assert out.tool_calls == [] and out.content == "<tool_call>{oops"


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory):
    demo = pytest.importorskip("flatscore.models.demo")
    return demo.build_untrained_demo(tmp_path_factory.mktemp("demo"), size="tiny")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_episodes_on_demo_model_batched_equal_sequential(demo_model, synthetic_dirs, tmp_path):
    """End to end: LLMAgent + scripted user + TransformersBackend; batching episodes changes nothing."""
    from flatscore.agents.users import ScriptedUser
    from flatscore.backends.transformers_backend import TransformersBackend
    from flatscore.domains import load_domain
    from flatscore.engine.episode import EpisodeSettings
    from flatscore.engine.records import canonical_without_timing
    from flatscore.engine.runner import run_cell
    from flatscore.engine.store import EpisodeStore

    domain = load_domain("retail", synthetic_dirs["retail"])
    tasks = domain.tasks()[:3]
    settings = EpisodeSettings(max_errors=2, max_steps=8)
    results, prefill = [], []
    for in_flight, reuse in ((1, False), (3, True)):
        backend = TransformersBackend(demo_model, reuse_kv=reuse)
        store = EpisodeStore(tmp_path / f"cell{in_flight}.jsonl")
        agent = LLMAgent(compact=True, max_new_tokens=24)
        run_cell(
            domain,
            tasks,
            agent,
            ScriptedUser(),
            settings,
            1,
            0,
            store,
            backends={"agent": backend},
            max_in_flight=in_flight,
            progress=False,
        )
        records = sorted(store.records(), key=lambda r: r["task_id"])
        assert len(records) == len(tasks)
        assert not backend.cached_keys()  # the runner released every episode's cache
        prefill.append(sum(r["usage"]["prefill_tokens"] for r in records))
        results.append([canonical_without_timing(r) for r in records])  # drops prefill_tokens
    assert results[0] == results[1]
    assert prefill[1] < prefill[0]
