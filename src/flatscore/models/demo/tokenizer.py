"""Byte-level BPE tokenizer for the demo model, with the flatscore chat template."""

from __future__ import annotations

import json
from collections.abc import Iterable
from copy import deepcopy
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")

IM_START, IM_END, PAD, EOT = "<|im_start|>", "<|im_end|>", "<|pad|>", "<|endoftext|>"
TOOL_CALL_START, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESPONSE_START, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"

# Control tokens: special (skipped by decode(skip_special_tokens=True)).
CONTROL_TOKENS = [EOT, IM_START, IM_END, PAD]
# Tool markers: single added tokens that are never split, but (as in Qwen/Hermes tokenizers)
# NOT flagged "special", so they survive decode(skip_special_tokens=True) and a Hermes parser
# (vLLM --tool-call-parser hermes) still sees them in the decoded text.
TOOL_TOKENS = [TOOL_CALL_START, TOOL_CALL_END, TOOL_RESPONSE_START, TOOL_RESPONSE_END]
ALL_MARKERS = CONTROL_TOKENS + TOOL_TOKENS


@lru_cache(maxsize=1)
def chat_template() -> str:
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy of `messages` with OpenAI tool-call `arguments` JSON strings parsed into dicts.

    The template renders dict arguments as compact JSON (json.dumps default separators) and
    string arguments verbatim; parsing first makes every rendering of the same call identical.
    Unparseable argument strings are left as they are.
    """
    out = deepcopy(messages)
    for m in out:
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function", tc)
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    fn["arguments"] = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    pass
    return out


def render_conversation(
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = False,
    with_spans: bool = False,
) -> str | tuple[str, list[tuple[int, int]]]:
    """Render through the demo chat template without needing a tokenizer.

    With `with_spans`, also return the character spans of assistant-generated text
    (content, tool calls and the closing <|im_end|>), i.e. what the loss is computed on.
    """
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, spans = render_jinja_template(
        conversations=[normalize_messages(messages)],
        tools=tools or None,
        chat_template=chat_template(),
        return_assistant_tokens_mask=with_spans,
        add_generation_prompt=add_generation_prompt,
    )
    if with_spans:
        return rendered[0], [tuple(s) for s in spans[0]]
    return rendered[0]


Span = tuple[int, int]


def render_for_training(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> tuple[str, list[Span], list[Span]]:
    """Render and split the assistant spans into (text, learnt spans, silent spans).

    An assistant message with ``"learn": false`` (a deliberate slip in a demonstration, see
    :mod:`flatscore.agents.stumbling`) is silent: no loss at all on it, neither as the
    assistant's output nor as context, so the model reads it but is never taught to write it.
    """
    text, spans = render_conversation(messages, tools, with_spans=True)
    assistants = [m for m in messages if m.get("role") == "assistant"]
    if len(assistants) != len(spans):  # pragma: no cover - the template wraps each assistant turn once
        raise ValueError(f"{len(assistants)} assistant messages but {len(spans)} generation spans")
    learnt: list[Span] = []
    silent: list[Span] = []
    for span, message in zip(spans, assistants):
        (silent if message.get("learn", True) is False else learnt).append(span)
    return text, learnt, silent


def _strip_markers(text: str) -> str:
    for t in ALL_MARKERS:
        text = text.replace(t, " ")
    return text


#: GPT-2's pre-tokenisation pattern, with snake_case identifiers (letters joined by underscores) first
_GPT2_WITH_IDENTIFIERS = (
    r"[A-Za-z]+(?:_[A-Za-z]+)+|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 6000,
    min_frequency: int = 2,
    isolate_spaces: bool = True,
    digits_per_token: int | None = 3,
    whole_identifiers: bool = True,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts` and wrap it with the chat template.

    `isolate_spaces`: every space is a token of its own, so a word is the same token wherever it
    stands. With GPT-2-style pre-tokenisation the email in "My email is mia.f@x.com" starts with
    the token " mia" but in the tool call's JSON ``"email": "mia.f@x.com"`` with "mia"; copying
    from the user's message into a call (most of what the demo agent must do) then needs a learned
    mapping between two tokens instead of a plain copy. It costs ~16% more tokens on the demos.

    `digits_per_token`: a run of digits is cut, left to right, into pieces of this many digits
    before BPE sees it (None: leave digits to BPE). Left to BPE, the ids that recur in the
    demonstrations (order "#W3277283", tracking "266763904980") each became one token of their
    own, whose output embedding is trained only by the few conversations that name it: the model
    then wrote ids it had memorised instead of the one in front of it. With a fixed cut, copying
    an id is the same operation for every id. One digit per token makes copying a 12-digit id
    twelve steps of "find where I am in the source, emit the next digit", and with repeated
    digits ("555-400-1655") the previous digit alone does not say where that is; the model
    learnt the first digits and then slipped. Three digits per token give ids of a third the
    length whose pieces are each one of 1,000 tokens (every one seen in many ids), so the
    previous piece nearly always names the place in the source; it also cuts 8% of the tokens
    (measured on the 3,360 default demonstrations: 1,909 -> 1,748 per dialogue). It did not, by
    itself, teach the default model to copy ids (see the README).

    `whole_identifiers`: a snake_case identifier (``get_customer_by_phone``, ``order_id``,
    ``toggle_airplane_mode``) is one piece before BPE, so a frequent one becomes one token.
    GPT-2-style pre-tokenisation cuts at every underscore: a tool or phone-action name was 5-7
    tokens, and the default model wrote blends of the names it had seen
    (``get_user_id_address2``, ``toggle_sim_card``), invented tools that no small model picking
    among whole names would write. Rare identifiers (user ids such as ``raj_rossi``) are still
    cut by BPE into the pieces it knows.
    """
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    steps = []
    if isolate_spaces:
        steps.append(pre_tokenizers.Split(Regex(" "), behavior="isolated"))
    if digits_per_token == 1:
        steps.append(pre_tokenizers.Digits(individual_digits=True))
    elif digits_per_token is not None:
        if digits_per_token < 1:
            raise ValueError(f"digits_per_token must be None or >= 1, got {digits_per_token!r}")
        steps.append(pre_tokenizers.Split(Regex(rf"\d{{1,{digits_per_token}}}"), behavior="isolated"))
    if whole_identifiers:
        # GPT-2's pre-tokenisation pattern with snake_case identifiers as one more alternative;
        # ByteLevel then only maps bytes
        steps.append(pre_tokenizers.Split(Regex(_GPT2_WITH_IDENTIFIERS), behavior="isolated"))
        byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.pre_tokenizer = pre_tokenizers.Sequence([*steps, byte_level]) if steps else byte_level
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=CONTROL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Markers are added as whole tokens below; keep them out of the merges.
    tok.train_from_iterator((_strip_markers(t) for t in texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    return wrap_tokenizer(tok)


def wrap_tokenizer(tok: Tokenizer) -> PreTrainedTokenizerFast:
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        bos_token=None,
        unk_token=None,
        model_max_length=2048,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = chat_template()
    return fast


def special_token_ids(tokenizer) -> dict[str, int]:
    """Marker -> token id, checking each marker is exactly one token."""
    out = {}
    for t in ALL_MARKERS:
        ids = tokenizer.encode(t, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"marker {t!r} is not a single token: {ids}")
        out[t] = ids[0]
    return out
