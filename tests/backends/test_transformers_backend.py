"""TransformersBackend on a tiny random Llama: batching, seeded sampling, KV reuse."""

from __future__ import annotations

import pytest

from flatscore.backends.base import ModelRequest
from flatscore.backends.testing import SAMPLE_TOOLS as TOOLS
from flatscore.backends.transformers_backend import TransformersBackend, simple_render

PROMPTS = [
    "Hi",
    "I need to cancel my order #W123 please, it is urgent and I want a refund now.",
    "toggle",
    "The user id is sara_doe_496. " * 4,
    "a",
    "Please do this on your phone: toggle_airplane_mode()",
]


def _req(i: int, text: str, **kw) -> ModelRequest:
    kw.setdefault("max_new_tokens", 24)
    return ModelRequest(messages=[{"role": "user", "content": text}], tools=TOOLS if i % 2 else [], seed=1000 + i, **kw)


@pytest.fixture(scope="module")
def greedy(tiny_model_dir):
    return TransformersBackend(tiny_model_dir, reuse_kv=False)


def test_batched_greedy_equals_sequential(greedy):
    reqs = [_req(i, p) for i, p in enumerate(PROMPTS)]
    lengths = {len(greedy.render(r)) for r in reqs}
    assert len(lengths) == len(reqs), "prompts must have different lengths to exercise padding"
    sequential = [greedy.generate([r])[0] for r in reqs]
    batched = greedy.generate(reqs)
    assert [r.text for r in batched] == [r.text for r in sequential]
    assert [r.completion_tokens for r in batched] == [r.completion_tokens for r in sequential]
    # the outputs differ between prompts (the test would be vacuous otherwise)
    assert len({r.text for r in batched}) > 1
    for r, req in zip(batched, reqs):
        assert 1 <= r.completion_tokens <= req.max_new_tokens
        assert r.prompt_tokens == len(greedy.render(req)) == r.prefill_tokens
        assert r.seconds > 0


def test_reversed_and_max_batch_chunks(tiny_model_dir, greedy):
    reqs = [_req(i, p) for i, p in enumerate(PROMPTS)]
    expected = [r.text for r in greedy.generate(reqs)]
    small = TransformersBackend(tiny_model_dir, reuse_kv=False, max_batch=4)
    assert [r.text for r in small.generate(reqs)] == expected
    assert [r.text for r in greedy.generate(reqs[::-1])] == expected[::-1]


def test_rows_finishing_at_different_steps(tiny_model_dir):
    """Rows that stop early are compacted out of the batch buffer in place (kv_batch.BatchKV.compact):
    outputs, and the KV stored for the next turn of every row, equal one-at-a-time decoding."""
    limits = [2, 24, 3, 16, 1, 24]
    plain = TransformersBackend(tiny_model_dir, reuse_kv=True)
    batched = TransformersBackend(tiny_model_dir, reuse_kv=True)
    histories = [[{"role": "user", "content": p}] for p in PROMPTS]
    for turn in range(2):
        reqs = [
            ModelRequest(messages=list(h), seed=turn, max_new_tokens=m, cache_key=f"ep{i}:agent")
            for i, (h, m) in enumerate(zip(histories, limits))
        ]
        one = [plain.generate([r])[0] for r in reqs]
        many = batched.generate(reqs)
        assert [r.text for r in many] == [r.text for r in one]
        assert [r.prefill_tokens for r in many] == [r.prefill_tokens for r in one]
        assert len({r.completion_tokens for r in many}) >= 3  # rows really stop at different steps
        for h, r in zip(histories, many):
            h.append({"role": "assistant", "content": r.text})
            h.append({"role": "user", "content": f"ok {turn}"})


def test_max_new_tokens_respected(greedy):
    out = greedy.generate([_req(0, "Hello", max_new_tokens=1), _req(1, "Hello there", max_new_tokens=5)])
    assert out[0].completion_tokens == 1
    assert out[1].completion_tokens <= 5


def test_seeded_sampling_independent_of_batch(tiny_model_dir):
    sampler = TransformersBackend(tiny_model_dir, do_sample=True, temperature=1.0, top_p=0.95, reuse_kv=False)
    target = _req(1, PROMPTS[1], max_new_tokens=30)
    alone = sampler.generate([target])[0].text
    again = sampler.generate([target])[0].text
    assert alone == again
    others = [_req(i, p, max_new_tokens=30) for i, p in enumerate(PROMPTS) if i != 1]
    mixed = sampler.generate(others[:2] + [target] + others[2:])
    assert mixed[2].text == alone
    bigger = sampler.generate([target] + others + others)
    assert bigger[0].text == alone
    # a different seed gives a different sample (so the seed is really used)
    reseeded = ModelRequest(messages=target.messages, tools=target.tools, seed=target.seed + 1, max_new_tokens=30)
    assert sampler.generate([reseeded])[0].text != alone
    # and sampling differs from greedy
    greedy = TransformersBackend(tiny_model_dir, reuse_kv=False)
    assert greedy.generate([target])[0].text != alone


def _conversation(backend: TransformersBackend, key: str | None, turns: int = 4):
    """A growing chat: the answer goes back into the history each turn."""
    messages = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "Hi, I need help."},
    ]
    out = []
    for t in range(turns):
        resp = backend.generate(
            [ModelRequest(messages=list(messages), tools=TOOLS, seed=t, max_new_tokens=12, cache_key=key)]
        )[0]
        out.append(resp)
        messages.append({"role": "assistant", "content": resp.text})
        messages.append({"role": "user", "content": f"Turn {t}: my order is #W12{t}."})
    return out


def test_kv_reuse_same_outputs_fewer_prefill(tiny_model_dir):
    plain = TransformersBackend(tiny_model_dir, reuse_kv=False)
    reuse = TransformersBackend(tiny_model_dir, reuse_kv=True)
    a = _conversation(plain, "ep1:agent")
    b = _conversation(reuse, "ep1:agent")
    assert [r.text for r in a] == [r.text for r in b]
    assert [r.prompt_tokens for r in a] == [r.prompt_tokens for r in b]
    assert all(r.prefill_tokens == r.prompt_tokens for r in a)
    assert b[0].prefill_tokens == b[0].prompt_tokens
    for r in b[1:]:
        assert 0 < r.prefill_tokens < r.prompt_tokens
    assert sum(r.prefill_tokens for r in b) < sum(r.prefill_tokens for r in a)
    assert "ep1:agent" in reuse.cached_keys()
    reuse.release("ep1:agent")
    assert "ep1:agent" not in reuse.cached_keys()


def test_kv_reuse_batched_conversations_and_divergence(tiny_model_dir):
    plain = TransformersBackend(tiny_model_dir, reuse_kv=False)
    reuse = TransformersBackend(tiny_model_dir, reuse_kv=True)
    histories = {f"ep{i}": [{"role": "user", "content": p}] for i, p in enumerate(PROMPTS[:4])}
    for turn in range(3):
        reqs = [
            ModelRequest(messages=list(h), seed=turn, max_new_tokens=10, cache_key=f"{k}:agent")
            for k, h in histories.items()
        ]
        x = plain.generate(reqs)
        y = reuse.generate(reqs)
        assert [r.text for r in x] == [r.text for r in y]
        if turn:
            assert all(r.prefill_tokens < r.prompt_tokens for r in y)
        for (k, h), r in zip(histories.items(), y):
            h.append({"role": "assistant", "content": r.text})
            h.append({"role": "user", "content": f"ok {turn}"})
    # a prompt that does not continue the cached one is recomputed (and still correct)
    other = ModelRequest(
        messages=[{"role": "user", "content": "completely different"}], max_new_tokens=10, cache_key="ep0:agent"
    )
    y = reuse.generate([other])[0]
    assert y.text == plain.generate([other])[0].text
    assert y.prefill_tokens < y.prompt_tokens  # only the shared template header is reused
    assert y.prefill_tokens >= len(plain.render(other)) - 3


def test_describe(tiny_model_dir, greedy):
    d = greedy.describe()
    assert d["backend"] == "transformers" and d["model_dir"] == str(tiny_model_dir)
    assert d["dtype"] == "float32" and d["do_sample"] is False


def test_simple_render_fallback():
    text = simple_render(
        [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]},
        ],
        TOOLS,
    )
    assert text.startswith("<|system|>\nTools:\n") and "get_order_details" in text
    assert '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>' in text
    assert text.endswith("<|assistant|>\n")


def test_no_chat_template_uses_fallback(tmp_path, tiny_model_dir):
    import shutil

    from transformers import AutoTokenizer

    d = tmp_path / "notemplate"
    shutil.copytree(tiny_model_dir, d)
    tok = AutoTokenizer.from_pretrained(d)
    tok.chat_template = None
    for f in d.glob("chat_template*"):
        f.unlink()
    tok.save_pretrained(d)
    b = TransformersBackend(d)
    assert not getattr(b.tokenizer, "chat_template", None)
    req = ModelRequest(messages=[{"role": "user", "content": "hi"}], tools=TOOLS, max_new_tokens=4)
    ids = b.render(req)
    assert b.tokenizer.decode(ids) == simple_render(req.messages, TOOLS)
    assert b.generate([req])[0].completion_tokens >= 1


@pytest.mark.slow
def test_compressed_tensors_dir_batched_equals_sequential(tmp_path):
    """A W4A16 compressed-tensors directory (llmcompressor) loads and decodes consistently."""
    demo = pytest.importorskip("flatscore.models.demo")
    quantize = pytest.importorskip("flatscore.models.quantize")
    src = demo.build_untrained_demo(tmp_path / "fp32", size="tiny")
    out = tmp_path / "w4a16"
    quantize.quantize_model(src, out, calibration=["Hello, how can I help you today?"] * 8, n_samples=8, awq=False)
    import torch

    torch.set_num_threads(1)
    backend = TransformersBackend(out, reuse_kv=True)
    assert backend.describe()["quantization"] == "compressed-tensors"
    reqs = [_req(i, p, max_new_tokens=16) for i, p in enumerate(PROMPTS)]
    sequential = [backend.generate([r])[0].text for r in reqs]
    assert [r.text for r in backend.generate(reqs)] == sequential


def _episode_start(i: int) -> ModelRequest:
    """First turn of episode ``i``: the same system prompt and tools as every other episode."""
    messages = [
        {"role": "system", "content": "You are a retail agent. Follow the policy. " * 6},
        {"role": "user", "content": f"I am user number {i}; my order is #W{1000 + 7 * i}."},
    ]
    return ModelRequest(messages=messages, tools=TOOLS, seed=i, max_new_tokens=10, cache_key=f"ep{i}:agent")


def test_shared_prefix_prefilled_once_per_batch_same_outputs(tiny_model_dir):
    plain = TransformersBackend(tiny_model_dir, reuse_kv=False)
    shared = TransformersBackend(tiny_model_dir, reuse_kv=True, share_prefix=True)
    own_only = TransformersBackend(tiny_model_dir, reuse_kv=True, share_prefix=False)
    reqs = [_episode_start(i) for i in range(4)]
    want = plain.generate(reqs)
    got = shared.generate(reqs)
    alone = own_only.generate(reqs)
    assert [r.text for r in got] == [r.text for r in want] == [r.text for r in alone]
    assert [r.prefill_tokens for r in alone] == [r.prompt_tokens for r in alone]
    # the first row prefills everything; the others only what follows the common system prompt
    assert got[0].prefill_tokens == got[0].prompt_tokens
    common = len(plain.render(reqs[0])) - 20
    for r in got[1:]:
        assert r.prefill_tokens < r.prompt_tokens - common // 2
    assert shared.describe()["share_prefix"] is True
    assert TransformersBackend(tiny_model_dir, reuse_kv=False, share_prefix=True).describe()["share_prefix"] is False


def test_shared_prefix_lent_by_live_and_released_conversations(tiny_model_dir):
    plain = TransformersBackend(tiny_model_dir, reuse_kv=False)
    shared = TransformersBackend(tiny_model_dir, reuse_kv=True)
    first = shared.generate([_episode_start(0)])[0]
    assert first.prefill_tokens == first.prompt_tokens
    # a live conversation lends its prefix to a new one
    second = shared.generate([_episode_start(1)])[0]
    assert second.text == plain.generate([_episode_start(1)])[0].text
    assert second.prefill_tokens < second.prompt_tokens // 2
    # so does a released one (one at a time, nothing else live)
    shared.release("ep0:agent")
    shared.release("ep1:agent")
    assert shared.cached_keys() == []
    third = shared.generate([_episode_start(2)])[0]
    assert third.text == plain.generate([_episode_start(2)])[0].text
    assert third.prefill_tokens < third.prompt_tokens // 2
    # a prompt that shares nothing but the template header is prefilled almost entirely
    other = ModelRequest(messages=[{"role": "user", "content": "something else"}], max_new_tokens=5, cache_key="x")
    y = shared.generate([other])[0]
    assert y.text == plain.generate([other])[0].text
    assert y.prefill_tokens >= len(plain.render(other)) - 3
