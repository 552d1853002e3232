"""Demo model: tokenizer, chat template (Hermes tool calls), loss mask, training, reload."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch

from flatscore.models import Manifest
from flatscore.models.demo import (
    ALL_MARKERS,
    build_untrained_demo,
    render_conversation,
    special_token_ids,
    train_tokenizer,
)
from flatscore.models.demo.scramble import copied_values, look_alike, scrambled_drills
from flatscore.models.demo.train import IGNORE, encode_for_training, train_demo_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_user_details",
            "description": "Get a user's profile.",
            "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "return_delivered_order_items",
            "description": "Return items of a delivered order.",
            "parameters": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string"},
                    "item_ids": {"type": "array", "items": {"type": "string"}},
                    "payment_method_id": {"type": "string"},
                },
                "required": ["order_id", "item_ids"],
            },
        },
    },
    # bare (non-wrapped) function form is accepted too
    {
        "name": "transfer_to_human_agents",
        "description": "Hand over.",
        "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]},
    },
]


def _tc(i, name, **args):
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def make_conversations(n=8):
    users = ["mia_khan", "noah_li", "olga_berg", "pablo_ruiz", "quinn_ito", "rosa_diaz", "sam_odu", "tara_ng"]
    out = []
    for i in range(n):
        u = users[i % len(users)]
        oid = f"#W{2000 + 13 * i}"
        item = str(4000000 + 101 * i)
        msgs = [
            {"role": "system", "content": "You are a helpful retail agent. Authenticate the user first."},
            {"role": "user", "content": f"Hello, I am {u} and I want to return an item from {oid}."},
            {"role": "assistant", "content": None, "tool_calls": [_tc(0, "get_user_details", user_id=u)]},
            {
                "role": "tool",
                "tool_call_id": "c0",
                "name": "get_user_details",
                "content": json.dumps({"user_id": u, "orders": [oid], "payment_methods": [f"gift_card_{i}"]}),
            },
            {"role": "assistant", "content": f"Thanks {u}. Which item of {oid} do you want to return?"},
            {"role": "user", "content": f"Item {item}, refund to my gift card."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    _tc(
                        1,
                        "return_delivered_order_items",
                        order_id=oid,
                        item_ids=[item],
                        payment_method_id=f"gift_card_{i}",
                    )
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c1",
                "name": "return_delivered_order_items",
                "content": json.dumps({"order_id": oid, "status": "return requested"}),
            },
            {"role": "assistant", "content": f"The return for {oid} is requested."},
        ]
        out.append({"messages": msgs, "tools": TOOLS})
    return out


@pytest.fixture(scope="module")
def convs():
    return make_conversations(8)


@pytest.fixture(scope="module")
def tokenizer(convs):
    return train_tokenizer([render_conversation(c["messages"], c["tools"]) for c in convs], vocab_size=800)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, convs):
    out = tmp_path_factory.mktemp("demo_tiny")
    manifest = train_demo_model(convs, out, size="tiny", seed=0)
    return out, manifest


def test_markers_are_single_tokens(tokenizer):
    ids = special_token_ids(tokenizer)
    assert len(set(ids.values())) == len(ALL_MARKERS)
    text = '<|im_start|>assistant\n<tool_call>{"name": "x"}</tool_call><|im_end|>'
    enc = tokenizer.encode(text, add_special_tokens=False)
    for m in ("<|im_start|>", "<tool_call>", "</tool_call>", "<|im_end|>"):
        assert enc.count(ids[m]) == 1
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|pad|>"
    # control tokens are skipped on decode, tool markers survive (a Hermes parser needs them)
    dec = tokenizer.decode(enc, skip_special_tokens=True)
    assert "<tool_call>" in dec and "<|im_start|>" not in dec
    assert tokenizer.decode(enc) == text


def _tokens(tokenizer, text):
    return tokenizer.convert_ids_to_tokens(tokenizer.encode(text, add_special_tokens=False))


def test_a_word_is_the_same_token_in_prose_and_in_a_call(convs):
    """What the agent copies from the user into a call must be the same tokens in both places."""
    texts = [render_conversation(c["messages"], c["tools"]) for c in convs]
    isolated = train_tokenizer(texts, vocab_size=800)
    prose = _tokens(isolated, "Hello, I am mia_khan and my order is #W2000.")
    call = _tokens(isolated, '{"user_id": "mia_khan", "order_id": "#W2000"}')
    name = _tokens(isolated, "mia_khan")
    joined = lambda toks, sub: any(toks[i : i + len(sub)] == sub for i in range(len(toks)))  # noqa: E731
    assert joined(prose, name) and joined(call, name)
    # the GPT-2 style pre-tokenisation (spaces glued to words) gives two different starts
    glued = train_tokenizer(texts, vocab_size=800, isolate_spaces=False)
    glued_name = _tokens(glued, " mia_khan")
    assert joined(_tokens(glued, "Hello, I am mia_khan"), glued_name)
    assert not joined(_tokens(glued, '{"user_id": "mia_khan"}'), glued_name)
    # spaces still round-trip
    assert isolated.decode(isolated.encode("a  b ok", add_special_tokens=False)) == "a  b ok"


def test_template_renders_tools_and_hermes_calls(tokenizer, convs):
    c = convs[0]
    text = tokenizer.apply_chat_template(c["messages"], tools=c["tools"], tokenize=False)
    # compact tool list: one line per tool, argument names, types only where not string, no JSON schema
    assert "- get_user_details(user_id)" in text
    assert "- return_delivered_order_items(order_id, item_ids: array, payment_method_id?)" in text
    assert "- transfer_to_human_agents(summary)" in text
    assert '"properties"' not in text and "Get a user's profile" not in text
    # ChatML structure
    assert text.startswith("<|im_start|>system\n")
    assert text.count("<|im_start|>assistant\n") == 4
    assert text.count("<|im_end|>") == text.count("<|im_start|>")
    assert "<|im_start|>tool\n<tool_response>\n" in text and "</tool_response><|im_end|>" in text
    # Hermes tool calls round-trip to the same name/arguments
    calls = [json.loads(s) for s in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S)]
    expected = [
        (tc["function"]["name"], json.loads(tc["function"]["arguments"]))
        for m in c["messages"]
        for tc in m.get("tool_calls") or []
    ]
    assert [(x["name"], x["arguments"]) for x in calls] == expected
    # generation prompt
    gp = tokenizer.apply_chat_template(c["messages"][:2], tools=c["tools"], tokenize=False, add_generation_prompt=True)
    assert gp.endswith("<|im_end|>\n<|im_start|>assistant\n")
    no_gp = tokenizer.apply_chat_template(c["messages"][:2], tools=c["tools"], tokenize=False)
    assert no_gp.endswith("<|im_end|>\n") and not no_gp.endswith("assistant\n")
    # same rendering with the tokenizer-free helper
    assert render_conversation(c["messages"], c["tools"]) == text


def test_template_consecutive_tool_results_and_dict_arguments(tokenizer):
    msgs = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"type": "function", "function": {"name": "a", "arguments": {"x": 1}}},
                {"type": "function", "function": {"name": "b", "arguments": '{"y": [1, 2]}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "1", "content": "r1"},
        {"role": "tool", "tool_call_id": "2", "content": "r2"},
    ]
    text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert not text.startswith("<|im_start|>system")  # no system turn without system text/tools
    assert (
        'Checking.\n<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"y": [1, 2]}}</tool_call><|im_end|>'
    ) in text
    assert text.count("<|im_start|>tool") == 1
    assert "<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response><|im_end|>" in text


def test_loss_mask_covers_only_assistant_tokens(tokenizer, convs):
    c = convs[1]
    [(ids, labels)] = encode_for_training(tokenizer, c, max_len=4096)
    assert len(ids) == len(labels)
    labelled = tokenizer.decode([t for t, y in zip(ids, labels) if y != IGNORE], skip_special_tokens=False)
    unlabelled = tokenizer.decode([t for t, y in zip(ids, labels) if y == IGNORE], skip_special_tokens=False)
    # every labelled token equals its input token
    assert all(y in (IGNORE, t) for t, y in zip(ids, labels))
    # assistant text and calls are labelled, with the closing <|im_end|> of each assistant turn
    assert labelled.count("<|im_end|>") == 4
    assert labelled.count("<tool_call>") == 2
    assert "Which item of" in labelled and "return is requested" not in unlabelled
    # system, tool list, user text, tool results and role headers are not
    for s in (
        "You are a helpful retail agent",
        "get_user_details(user_id",
        "I want to return",
        "<tool_response>",
        '"status": "return requested"',
        "<|im_start|>",
        "assistant\n",
    ):
        assert s not in labelled, s
        assert s in unlabelled, s
    # the first labelled token follows the first "<|im_start|>assistant\n" header exactly
    first = next(i for i, y in enumerate(labels) if y != IGNORE)
    assert tokenizer.decode(ids[:first], skip_special_tokens=False).endswith("<|im_start|>assistant\n")


def test_long_conversation_is_split_with_system_context(tokenizer, convs):
    c = convs[2]
    [(full, _)] = encode_for_training(tokenizer, c, max_len=10_000)
    max_len = len(full) * 3 // 4
    pieces = encode_for_training(tokenizer, c, max_len=max_len)
    assert len(pieces) >= 2
    assert all(len(x) <= max_len for x, _ in pieces)
    head = tokenizer.decode(pieces[1][0][:5], skip_special_tokens=False)
    assert head.startswith("<|im_start|>system")
    assert all(any(y != IGNORE for y in lab) for _, lab in pieces)


def test_build_untrained_demo(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = build_untrained_demo(tmp_path / "u", size="tiny")
    for f in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "generation_config.json",
        "flatscore_manifest.json",
    ):
        assert (out / f).is_file(), f
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert tok.chat_template and "<tool_call>" in tok.chat_template
    assert model.config.vocab_size == len(tok) and model.config.num_hidden_layers == 2
    assert model.generation_config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    m = Manifest.load(out)
    assert m.kind == "demo" and m.trained is False


def test_tiny_trains_reloads_and_generates(trained, convs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, m = trained
    assert m.seconds < 60
    assert m.final_loss < 0.5 * m.first_loss, (m.first_loss, m.final_loss)
    assert m.loss_curve[-1][1] < m.loss_curve[0][1]
    assert m.n_conversations == len(convs) and m.steps > 0 and m.data_sha256
    assert Manifest.load(out).sha == m.sha
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    c = convs[0]
    prompt = tok.apply_chat_template(c["messages"][:2], tools=c["tools"], add_generation_prompt=True, tokenize=False)
    enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        gen = model.generate(**enc, max_new_tokens=48, do_sample=False)
    text = tok.decode(gen[0, enc["input_ids"].shape[1] :], skip_special_tokens=False)
    assert len(text) > 0
    # the trained model has learned to open a tool call at this point of the dialogue
    assert text.startswith("<tool_call>"), text


def test_training_is_deterministic(tmp_path, convs):
    a = train_demo_model(convs[:4], tmp_path / "a", size="tiny", seed=3, steps=12)
    b = train_demo_model(convs[:4], tmp_path / "b", size="tiny", seed=3, steps=12)
    c = train_demo_model(convs[:4], tmp_path / "c", size="tiny", seed=4, steps=12)
    assert a.weights_sha256 == b.weights_sha256 and a.sha == b.sha
    assert a.weights_sha256 != c.weights_sha256


def test_manifest_sha_ignores_timing(tmp_path):
    m1 = Manifest(kind="demo", size="tiny", seconds=1.0, weights_sha256="x")
    m2 = Manifest(kind="demo", size="tiny", seconds=99.0, weights_sha256="x")
    m3 = Manifest(kind="demo", size="default", seconds=1.0, weights_sha256="x")
    assert m1.sha == m2.sha != m3.sha
    p = m1.save(tmp_path)
    assert Manifest.load(p).to_dict() == m1.to_dict() and Manifest.find(tmp_path).sha == m1.sha


def test_training_is_deterministic_in_steps(tmp_path, convs):
    """The same conversations, size, seed and steps give the same weights, whatever the clock: a
    study's numbers must not depend on how busy the machine was while its model trained."""
    a = train_demo_model(convs[:6], tmp_path / "a", size="tiny", steps=12)
    b = train_demo_model(convs[:6], tmp_path / "b", size="tiny", steps=12)
    assert a.steps == b.steps == 12
    assert a.weights_sha256 == b.weights_sha256
    assert a.sha == b.sha  # the manifest's identity ignores timing
    c = train_demo_model(convs[:6], tmp_path / "c", size="tiny", steps=12, seed=1)
    assert c.weights_sha256 != a.weights_sha256  # the hash does see a change


def test_time_guard_fails_and_writes_no_model(tmp_path, convs):
    """Past max_seconds training fails with a message naming the field; it never writes a
    silently shorter model."""
    from flatscore.models.demo.train import TrainingTimeLimit

    with pytest.raises(TrainingTimeLimit, match=r"max_seconds: .*after \d+ of 100000 steps"):
        train_demo_model(convs[:4], tmp_path / "guarded", size="tiny", steps=100_000, max_seconds=2)
    assert not (tmp_path / "guarded" / "model.safetensors").exists()


def test_ids_are_cut_into_fixed_digit_groups_whatever_the_training_text(convs):
    """An id the tokenizer saw often must not become a token of its own: it is cut left to right
    into 3-digit pieces, the same cut wherever the id stands, so copying is per piece."""
    texts = [render_conversation(c["messages"], c["tools"]) for c in convs] * 20  # ids recur 20x
    tok = train_tokenizer(texts, vocab_size=800)
    toks = _tokens(tok, '{"order_id": "#W2013", "item": "4000101"}')
    digit_pieces = [t for t in toks if any(ch.isdigit() for ch in t)]
    assert "".join(digit_pieces) == "2013" + "4000101"
    assert all(len(t) <= 3 for t in digit_pieces)
    # Fixed cut: the same id tokenises the same way in the user's text and in a call's JSON.
    assert [t for t in _tokens(tok, "my order #W2013 please") if t.isdigit()][0] == digit_pieces[0]
    single = train_tokenizer(texts, vocab_size=800, digits_per_token=1)
    assert [t for t in _tokens(single, "#W2013 4000101") if t.isdigit()] == list("2013") + list("4000101")
    merged = train_tokenizer(texts, vocab_size=800, digits_per_token=None)
    assert "4000101" in _tokens(merged, "4000101") or len(_tokens(merged, "4000101")) < 3
    with pytest.raises(ValueError, match="digits_per_token"):
        train_tokenizer(texts[:2], vocab_size=800, digits_per_token=0)


def test_frequent_snake_case_names_are_whole_tokens(convs):
    """Tool names and argument keys (snake_case) are one token each, so the model picks among
    whole names instead of writing blends of their pieces; text still round-trips exactly."""
    texts = [render_conversation(c["messages"], c["tools"]) for c in convs] * 5
    tok = train_tokenizer(texts, vocab_size=800)
    call = '<tool_call>{"name": "return_delivered_order_items", "arguments": {"order_id": "#W2013"}}</tool_call>'
    assert "return_delivered_order_items" in _tokens(tok, call)
    assert "order_id" in _tokens(tok, call)
    assert all(tok.decode(tok(t, add_special_tokens=False).input_ids) == t for t in texts[:8])
    cut = train_tokenizer(texts, vocab_size=800, whole_identifiers=False)
    assert "return_delivered_order_items" not in _tokens(cut, call)
    assert "_" in _tokens(cut, call)  # GPT-2's pre-tokenisation cuts at every underscore


def test_labelled_loss_equals_the_model_loss(tokenizer, convs):
    """The LM head on labelled positions only gives the same loss and the same gradients."""
    from transformers import LlamaForCausalLM

    from flatscore.models.demo.losses import labelled_loss
    from flatscore.models.demo.sizes import llama_config
    from flatscore.models.demo.train import _collate

    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config("tiny", tokenizer)).train()
    batch = _collate([encode_for_training(tokenizer, c, 4096)[0] for c in convs[:3]], tokenizer.pad_token_id)
    ref = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    ours = labelled_loss(model, batch["input_ids"], batch["labels"])
    assert torch.allclose(ref, ours, atol=1e-6), (ref, ours)
    g_ref = torch.autograd.grad(ref, list(model.parameters()))
    g_ours = torch.autograd.grad(ours, list(model.parameters()))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(g_ref, g_ours))


def test_context_loss_adds_the_weighted_loss_on_every_other_real_token(tokenizer, convs):
    """With a context weight, the loss is the assistant tokens' mean loss plus that weight times the
    mean loss on every other non-padding token (user turns, tool results, tool list), computed
    here from the model's full logits."""
    from transformers import LlamaForCausalLM

    from flatscore.models.demo.losses import labelled_loss
    from flatscore.models.demo.sizes import llama_config
    from flatscore.models.demo.train import IGNORE, _collate

    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config("tiny", tokenizer)).eval()
    pieces = [encode_for_training(tokenizer, c, 4096)[0] for c in convs[:3]]
    x, y = pieces[1]
    pieces[1] = (x[: len(x) // 2], y[: len(y) // 2])  # a shorter row: its padding must not count
    batch = _collate(pieces, tokenizer.pad_token_id)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        assistant = labels[:, 1:] != IGNORE
        context = ~assistant & (mask[:, 1:] > 0)
        expected = ce[assistant].mean() + 0.5 * ce[context].mean()
        ours = labelled_loss(model, ids, labels, mask, context_weight=0.5)
        plain = labelled_loss(model, ids, labels, mask, context_weight=0.0)
    assert torch.allclose(ours, expected, atol=1e-5), (ours, expected)
    assert torch.allclose(plain, ce[assistant].mean(), atol=1e-5)
    with pytest.raises(ValueError, match="attention mask"):
        labelled_loss(model, ids, labels, None, context_weight=0.5)


def test_sampled_context_loss_estimates_the_full_one_without_bias(tokenizer, convs):
    """``context_sample`` runs the LM head on a seeded share of the context positions: the same
    generator seed gives the same loss, a draw differs from the full context loss, and the mean
    over many draws comes back to it (a sampler that always took the same positions, say the
    first ones, would not); a share outside (0, 1] is refused naming the key."""
    from transformers import LlamaForCausalLM

    from flatscore.models.demo.losses import labelled_loss, sampled_positions
    from flatscore.models.demo.sizes import llama_config
    from flatscore.models.demo.train import _collate

    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config("tiny", tokenizer)).eval()
    batch = _collate([encode_for_training(tokenizer, c, 4096)[0] for c in convs[:3]], tokenizer.pad_token_id)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]

    def loss(share, seed):
        gen = torch.Generator().manual_seed(seed)
        return float(labelled_loss(model, ids, labels, mask, 1.0, share, gen))

    with torch.no_grad():
        full = float(labelled_loss(model, ids, labels, mask, 1.0))
        assert loss(1.0, 0) == pytest.approx(full, abs=1e-6)
        assert loss(0.25, 7) == loss(0.25, 7)
        draws = [loss(0.25, seed) for seed in range(200)]
    assert len({round(d, 6) for d in draws}) > 100
    spread = float(torch.tensor(draws).std())
    assert spread > 1e-4
    assert sum(draws) / len(draws) == pytest.approx(full, abs=4 * spread / len(draws) ** 0.5)

    assert len(sampled_positions(10, 0.25)) == 3 and len(sampled_positions(3, 0.01)) == 1
    assert sorted(sampled_positions(10, 1.0).tolist()) == list(range(10))
    for bad in (0.0, 1.5, -0.2):
        with pytest.raises(ValueError, match="context_sample"):
            sampled_positions(10, bad)


def test_context_sample_trains_repeatably_and_is_recorded(tmp_path, convs, monkeypatch):
    """The size key reaches training: two runs with the same seed give the same weights, the
    manifest records the share, and the weights differ from the full context loss's."""
    from flatscore.models.demo import sizes

    tiny = {**sizes.SIZES["tiny"], "context_loss_weight": 1.0}
    monkeypatch.setitem(sizes.SIZES, "tiny", tiny)
    full = train_demo_model(convs[:4], tmp_path / "full", size="tiny", seed=0, steps=3)
    monkeypatch.setitem(sizes.SIZES, "tiny", {**tiny, "context_sample": 0.25})
    one = train_demo_model(convs[:4], tmp_path / "one", size="tiny", seed=0, steps=3)
    two = train_demo_model(convs[:4], tmp_path / "two", size="tiny", seed=0, steps=3)
    assert one.context_sample == 0.25 and getattr(full, "context_sample", None) is None
    assert one.weights_sha256 == two.weights_sha256 != full.weights_sha256
    for bad in (2.0, 0):
        monkeypatch.setitem(sizes.SIZES, "tiny", {**tiny, "context_sample": bad})
        with pytest.raises(ValueError, match="context_sample"):
            train_demo_model(convs[:4], tmp_path / "bad", size="tiny", seed=0, steps=3)
        assert not (tmp_path / "bad").exists()


def test_batch_encoding_equals_one_at_a_time(tokenizer, convs):
    from flatscore.models.demo.train import encode_all

    one = [p for c in convs for p in encode_for_training(tokenizer, c, 60)]
    assert encode_all(tokenizer, convs, 60) == one and len(one) > len(convs)


def test_copy_drills_label_only_the_drilled_turn(tokenizer, convs):
    """A drill is the opening request and the few messages before a value-copying or phone-action
    turn; only that turn carries labels."""
    from flatscore.models.demo.drills import asks_for_phone_action, copy_drills, is_drilled
    from flatscore.models.demo.train import IGNORE, encode_rendered

    phone = {
        "tools": [],
        "messages": [
            {"role": "system", "content": "You are a telecom agent."},
            {"role": "assistant", "content": "Hi! How can I help you today?"},
            {"role": "user", "content": "My phone shows no service. I am Ana Lee, 555-123-4567."},
            {"role": "assistant", "content": "Please do this on your phone: check_network_status()"},
            {"role": "user", "content": "I did that. check_network_status: SIM Card Status: missing"},
            {"role": "assistant", "content": "Please do this on your phone: reseat_sim_card()"},
            {"role": "user", "content": "I did that. reseat_sim_card: SIM card re-seated."},
            {"role": "assistant", "content": "Your request has been handled."},
        ],
    }
    convs = [*convs, phone]
    drills = copy_drills(convs, context_messages=2)
    turns = [(c, m) for c in convs for m in c["messages"][1:] if is_drilled(m)]
    assert len(drills) == len(turns) > 0
    assert any(asks_for_phone_action(m) for _, m in turns)  # telecom fixes are drilled too
    for (text, spans, silent), (conv, turn) in zip(drills, turns):
        assert silent == []  # no slips in these conversations
        assert not text.startswith("<|im_start|>system")  # no tool list: the drill is short
        assert len(spans) == 1 and text[spans[0][0] : spans[0][1]].endswith("<|im_end|>")
        if turn.get("tool_calls"):
            assert turn["tool_calls"][0]["function"]["name"] in text[spans[0][0] : spans[0][1]]
        else:
            assert turn["content"] in text[spans[0][0] : spans[0][1]]
        opening = next(m["content"] for m in conv["messages"] if m["role"] == "user")
        assert opening in text  # what the user asked for decides the next check or fix
        assert text.count("<|im_start|>") <= 4  # the request, two messages of context and the turn
    ((ids, labels),) = encode_rendered(tokenizer, drills[:1], 4096)
    labelled = tokenizer.decode([t for t in labels if t != IGNORE])
    assert labelled == drills[0][0][slice(*drills[0][1][0])]
    with pytest.raises(ValueError, match="context_messages"):
        copy_drills(convs, context_messages=0)
    tripled = copy_drills(convs, context_messages=2, phone_repeats=3)
    n_phone = sum(asks_for_phone_action(m) for _, m in turns)
    assert len(tripled) == len(drills) + 2 * n_phone
    with pytest.raises(ValueError, match="phone_repeats"):
        copy_drills(convs, phone_repeats=0)


def test_token_budget_batches_fill_the_budget_and_cover_the_epoch():
    import random

    from flatscore.models.demo.train import bucketed_batches

    lengths = [100] * 40 + [1000] * 8
    batches = bucketed_batches(lengths, 2, random.Random(0), max_tokens=2000)
    assert sorted(i for b in batches for i in b) == list(range(48))  # every example once
    assert all(len(b) * max(lengths[i] for i in b) <= 2000 for b in batches)
    assert max(len(b) for b in batches) == 20  # short ones go many to a batch
    assert bucketed_batches([5000], 1, random.Random(0), max_tokens=2000) == [[0]]  # never empty


def test_a_slipped_call_is_read_but_never_learnt(tokenizer, convs):
    """A demonstration's slipped call (``"learn": false``) takes no loss at all: not as the
    assistant's output, and not as context under ``context_loss_weight`` (that would teach the
    slip); the recovery after it is learnt, and drills never end in a slip."""
    from transformers import LlamaForCausalLM

    from flatscore.models.demo.drills import copy_drills
    from flatscore.models.demo.losses import labelled_loss
    from flatscore.models.demo.sizes import llama_config
    from flatscore.models.demo.tokenizer import render_for_training
    from flatscore.models.demo.train import SILENT, _collate, encode_rendered

    slip = {
        "role": "assistant",
        "content": "",
        "learn": False,
        "tool_calls": [
            {
                "id": "slip_3",
                "type": "function",
                "function": {"name": "get_order_details", "arguments": '{"order_id": "#W1"}'},
            }
        ],
    }
    error = {"role": "tool", "tool_call_id": "slip_3", "name": "get_order_details", "content": "Error: Order not found"}
    base = convs[0]
    at = next(i for i, m in enumerate(base["messages"]) if m.get("tool_calls"))
    conv = {**base, "messages": [*base["messages"][:at], slip, error, *base["messages"][at:]]}
    text, learnt, silent = render_for_training(conv["messages"], conv["tools"])
    assert len(silent) == 1 and '"#W1"' in text[slice(*silent[0])]
    assert len(learnt) == sum(m["role"] == "assistant" for m in base["messages"])
    ((ids, labels),) = encode_rendered(tokenizer, [(text, learnt, silent)], 4096)
    silent_text = tokenizer.decode([t for t, y in zip(ids, labels) if y == SILENT])
    assert '"#W1"' in silent_text and "get_order_details" in silent_text
    assert not any('"#W1"' in tokenizer.decode([t]) for t, y in zip(ids, labels) if y >= 0)

    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config("tiny", tokenizer)).eval()
    batch = _collate([(ids, labels)], tokenizer.pad_token_id)
    ids_t, labels_t, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    with torch.no_grad():
        logits = model(input_ids=ids_t).logits[:, :-1]
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids_t[:, 1:], reduction="none")
        targets = labels_t[:, 1:]
        expected = ce[targets >= 0].mean() + 0.5 * ce[targets == -100].mean()
        ours = labelled_loss(model, ids_t, labels_t, mask, context_weight=0.5)
    assert torch.allclose(ours, expected, atol=1e-5)
    assert (targets == SILENT).sum() > 0  # and those positions are in neither mean

    drills = copy_drills([conv], context_messages=4)
    assert any(drill_silent for _, _, drill_silent in drills)  # the slip is context of the next drill
    for drill_text, drill_learnt, drill_silent in drills:
        assert '"#W1"' not in drill_text[slice(*drill_learnt[0])]
        assert all('"#W1"' in drill_text[slice(*s)] for s in drill_silent)


def test_copy_warmup_spans_are_labelled_only_where_a_copy_predicts_them(tokenizer):
    """A warm-up example is a random span of 8..span_len ordinary tokens twice; labels sit on the
    repeat after its first token (only a copy can predict those), nowhere else."""
    import random

    from flatscore.models.demo.copy_warmup import IGNORE, copy_tokens, repeated_spans

    vocab = copy_tokens(tokenizer)
    markers = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    assert vocab and not set(vocab) & markers
    examples = repeated_spans(vocab, 200, 32, random.Random(0))
    assert examples == repeated_spans(vocab, 200, 32, random.Random(0))
    lengths = set()
    for ids, labels in examples:
        n = len(ids) // 2
        lengths.add(n)
        assert ids[:n] == ids[n:] and set(ids) <= set(vocab)
        assert labels[: n + 1] == [IGNORE] * (n + 1) and labels[n + 1 :] == ids[n + 1 :]
    assert min(lengths) == 8 and max(lengths) == 32  # the copy distance varies: no fixed offset to learn
    with pytest.raises(ValueError, match="span_len"):
        repeated_spans(vocab, 1, 4, random.Random(0))


def test_copy_warmup_steps_come_before_the_demonstrations(tmp_path, convs, monkeypatch):
    """``copy_warmup_steps`` adds that many warm-up steps; the manifest counts them apart from the
    demonstration steps, and the weights differ from a training without them."""
    from flatscore.models.demo import sizes

    plain = train_demo_model(convs[:4], tmp_path / "plain", size="tiny", seed=0, steps=6)
    monkeypatch.setitem(sizes.SIZES, "tiny", {**sizes.SIZES["tiny"], "copy_warmup_steps": 5, "copy_span": 16})
    warmed = train_demo_model(convs[:4], tmp_path / "warm", size="tiny", seed=0, steps=6)
    assert warmed.steps == plain.steps == 6
    assert warmed.copy_warmup_steps == 5 and warmed.copy_span == 16 and len(warmed.loss_curve) > 0
    assert warmed.weights_sha256 != plain.weights_sha256
    assert getattr(plain, "copy_warmup_steps", None) is None


def test_interleaved_copy_steps_follow_every_nth_demonstration_step(tmp_path, convs, monkeypatch):
    """``copy_every`` k: after the warm-up, one copy batch after each k demonstration steps, on top
    of the demonstration steps (which the manifest still counts alone)."""
    from flatscore.models.demo import sizes
    from flatscore.models.demo.train import is_copy_step

    pattern = [is_copy_step(s, 2, 3) for s in range(10)]
    assert pattern == [True, True, False, False, False, True, False, False, False, True]
    assert not any(is_copy_step(s, 0, 0) for s in range(50))
    assert sum(is_copy_step(s, 0, 4) for s in range(1600 + 400)) == 400

    plain = train_demo_model(convs[:4], tmp_path / "plain", size="tiny", seed=0, steps=6)
    monkeypatch.setitem(sizes.SIZES, "tiny", {**sizes.SIZES["tiny"], "copy_every": 2, "copy_span": 16})
    mixed = train_demo_model(convs[:4], tmp_path / "mixed", size="tiny", seed=0, steps=6)
    assert mixed.steps == plain.steps == 6 and mixed.copy_every == 2
    assert mixed.loss_curve[-1][0] == 9  # 6 demonstration steps + 3 copy steps
    assert mixed.weights_sha256 != plain.weights_sha256


def test_keyed_recall_labels_each_recalled_value_from_its_first_token(tokenizer):
    """A keyed-recall example holds 2-4 (key, connectors, value) pairs and then 1-3 of the keys
    again with other connectors; the labels are exactly the recalled values (first token
    included: only a lookup by key predicts it), and each recalled value is the one that
    followed the same key earlier."""
    import random

    from flatscore.models.demo.copy_warmup import (
        IGNORE,
        RECALL_MAX_TOKENS,
        connector_tokens,
        copy_tokens,
        keyed_recalls,
    )

    vocab = copy_tokens(tokenizer)
    connectors = connector_tokens(tokenizer)
    assert connectors and set(connectors) <= set(vocab)
    examples = keyed_recalls(vocab, connectors, 300, random.Random(0))
    assert examples == keyed_recalls(vocab, connectors, 300, random.Random(0))
    first_token_labelled = 0
    for ids, labels in examples:
        assert len(ids) == len(labels) <= RECALL_MAX_TOKENS
        # a labelled run is a value: the key before it (connectors skipped) stood earlier with it
        i = 0
        while i < len(ids):
            if labels[i] == IGNORE:
                i += 1
                continue
            j = i
            while j < len(ids) and labels[j] != IGNORE:
                assert labels[j] == ids[j]
                j += 1
            k = i - 1
            while ids[k] in connectors:
                k -= 1
            key, value = ids[k], ids[i:j]
            earlier = [p for p in range(k) if ids[p] == key]
            assert earlier, "a recalled key must have stood earlier"
            start = earlier[0] + 1
            while ids[start] in connectors:
                start += 1
            assert ids[start : start + len(value)] == value
            first_token_labelled += 1
            i = j
    assert first_token_labelled >= 300
    with pytest.raises(ValueError, match="connector"):
        keyed_recalls(vocab, [], 1, random.Random(0))


def test_copy_recall_alternates_copy_steps_and_changes_the_weights(tmp_path, convs, monkeypatch):
    """``copy_recall``: after the warm-up, every other copy step trains on keyed recalls instead of
    spans; the manifest says so, and the weights differ from the same training with spans only,
    but not where no copy step comes after the warm-up."""
    from flatscore.models.demo import sizes

    base = dict(sizes.SIZES["tiny"])
    warm_only = {**base, "copy_warmup_steps": 4, "copy_span": 16}
    monkeypatch.setitem(sizes.SIZES, "tiny", warm_only)
    a = train_demo_model(convs[:4], tmp_path / "a", size="tiny", seed=0, steps=2)
    monkeypatch.setitem(sizes.SIZES, "tiny", {**warm_only, "copy_recall": True})
    b = train_demo_model(convs[:4], tmp_path / "b", size="tiny", seed=0, steps=2)
    assert a.weights_sha256 == b.weights_sha256  # the warm-up itself stays spans only

    tiny = {**base, "copy_warmup_steps": 2, "copy_every": 1, "copy_span": 16}
    monkeypatch.setitem(sizes.SIZES, "tiny", tiny)
    spans = train_demo_model(convs[:4], tmp_path / "spans", size="tiny", seed=0, steps=4)
    monkeypatch.setitem(sizes.SIZES, "tiny", {**tiny, "copy_recall": True})
    recall = train_demo_model(convs[:4], tmp_path / "recall", size="tiny", seed=0, steps=4)
    assert recall.copy_recall is True and getattr(spans, "copy_recall", None) is None
    assert recall.steps == spans.steps == 4
    assert recall.weights_sha256 != spans.weights_sha256


# scrambled drills (flatscore.models.demo.scramble): copied values replaced consistently by look-alikes


def test_look_alike_keeps_the_shape_and_changes_the_characters():
    rng = random.Random(0)
    value = "mia.Khan6636@example.com #W2013"
    fakes = {look_alike(value, rng) for _ in range(20)}
    assert len(fakes) == 20 and value not in fakes
    for fake in fakes:
        assert len(fake) == len(value)
        for a, b in zip(value, fake):
            assert a.isdigit() == b.isdigit() and a.islower() == b.islower() and a.isupper() == b.isupper()
            if not a.isalnum():
                assert a == b


def test_copied_values_are_the_call_arguments_found_earlier():
    conv = make_conversations(1)[0]["messages"]
    window = conv[1:7]  # the user's item request and the return call
    assert copied_values(window) == ["gift_card_0", "4000000", "#W2000"]
    assert copied_values(conv[1:3]) == ["mia_khan"]


def test_scrambled_drills_replace_each_value_everywhere_and_learn_only_the_call():
    convs = make_conversations(4)
    drills = scrambled_drills(convs, 4, seed=0)
    assert drills == scrambled_drills(convs, 4, seed=0)
    assert drills != scrambled_drills(convs, 4, seed=1)
    assert len(drills) == 8  # two calls per conversation, each copying a value
    text, learnt, silent = drills[0]
    assert "mia_khan" not in text and silent == []
    (start, end) = learnt[0]
    call = text[start:end]
    assert call.startswith("<tool_call>") and text.rstrip().endswith(call.rstrip())
    fake = json.loads(call.split("<tool_call>")[1].split("</tool_call>")[0])["arguments"]["user_id"]
    assert fake != "mia_khan" and len(fake) == len("mia_khan")
    assert f"I am {fake} and" in text  # the same look-alike in the user's message


# silent first mentions (flatscore.models.demo.first_mentions): no context loss where a value is new


def test_a_copied_value_is_silent_where_first_mentioned_and_context_where_repeated(tokenizer, convs):
    """Under ``silent_first_mentions`` the user's first mention of a value the agent later copies
    ("mia_khan", "#W2000", the item id) takes no loss at all (nothing before it predicts it),
    while its later mentions in the tool's output stay context and its copy in the call stays
    labelled; a value the system turn names first, and text no call copies, are untouched."""
    from flatscore.models.demo.first_mentions import first_mention_spans, with_first_mentions_silent
    from flatscore.models.demo.tokenizer import render_for_training
    from flatscore.models.demo.train import SILENT, encode_rendered

    conv = convs[0]
    text, learnt, silent = render_for_training(conv["messages"], conv["tools"])
    spans = first_mention_spans(text, learnt)
    user_turn = text.index("Hello, I am")
    assert sorted(text[a:b] for a, b in spans) == sorted(["mia_khan", "#W2000", "4000000", "gift_card_0"])
    for a, _ in spans:
        assert a > user_turn and not any(x <= a < y for x, y in learnt)
    gift_card = next(a for a, b in spans if text[a:b] == "gift_card_0")
    assert text.rfind("<tool_response>", 0, gift_card) > user_turn  # first seen in the tool's output

    ((ids, labels),) = encode_rendered(tokenizer, with_first_mentions_silent([(text, learnt, silent)]), 4096)
    ((_, plain),) = encode_rendered(tokenizer, [(text, learnt, silent)], 4096)
    changed = [i for i, (a, b) in enumerate(zip(labels, plain)) if a != b]
    assert changed and all(labels[i] == SILENT and plain[i] == IGNORE for i in changed)
    assert "".join(tokenizer.decode([ids[i]]) for i in changed).replace(" ", "") == "".join(text[a:b] for a, b in spans)
    labelled = tokenizer.decode([t for t, y in zip(ids, labels) if y >= 0])
    assert "mia_khan" in labelled and "4000000" in labelled  # the copies are still learnt

    # a value the system turn names first is a constant to learn, not a guess
    system_first = {
        **conv,
        "messages": [{"role": "system", "content": "Users such as mia_khan must authenticate."}, *conv["messages"][1:]],
    }
    text2, learnt2, _ = render_for_training(system_first["messages"], system_first["tools"])
    assert "mia_khan" not in [text2[a:b] for a, b in first_mention_spans(text2, learnt2)]


def test_silent_first_mentions_changes_the_weights_and_is_recorded(tmp_path, convs, monkeypatch):
    """The size key reaches training: the manifest records it, and the same seed and steps give
    other weights than the same training with the context loss on every first mention."""
    from flatscore.models.demo import sizes

    tiny = {**sizes.SIZES["tiny"], "context_loss_weight": 1.0}
    monkeypatch.setitem(sizes.SIZES, "tiny", tiny)
    plain = train_demo_model(convs[:4], tmp_path / "plain", size="tiny", seed=0, steps=3)
    monkeypatch.setitem(sizes.SIZES, "tiny", {**tiny, "silent_first_mentions": True})
    silent = train_demo_model(convs[:4], tmp_path / "silent", size="tiny", seed=0, steps=3)
    assert silent.silent_first_mentions is True and getattr(plain, "silent_first_mentions", None) is None
    assert silent.weights_sha256 != plain.weights_sha256
