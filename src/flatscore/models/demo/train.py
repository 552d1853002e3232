"""Train the demo tool-calling model from scratch on expert conversations (CPU, plain torch loop)."""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaForCausalLM

from ..manifest import Manifest, sha256_json, weights_sha256
from .build import save_demo_dir, versions
from .copy_warmup import IGNORE, RECALL_MAX_TOKENS, connector_tokens, copy_tokens, keyed_recalls, repeated_spans
from .drills import copy_drills
from .first_mentions import with_first_mentions_silent
from .losses import check_context_sample, labelled_loss
from .scramble import scrambled_drills
from .sizes import get_size, llama_config
from .tokenizer import Span, render_for_training, train_tokenizer

WARMUP_STEPS = 20
#: The label of a token that takes no loss at all, not even as context: a slipped call's (see
#: :func:`render_for_training`). IGNORE marks context, which ``context_loss_weight`` does train on.
SILENT = -101


class TrainingTimeLimit(RuntimeError):
    """Training passed its ``max_seconds`` guard before its fixed number of steps."""


def encode_for_training(tokenizer, conversation: dict[str, Any], max_len: int) -> list[tuple[list[int], list[int]]]:
    """Render one conversation and return [(input_ids, labels)] pieces of at most `max_len` tokens.

    Labels are the token ids on assistant-generated text (content, tool calls, closing <|im_end|>)
    and IGNORE (-100) on everything else (system, tools list, user, tool results, role headers).
    A conversation longer than `max_len` is cut into pieces; each later piece starts again with
    the system turn (tool list) as unlabelled context when that fits in half of `max_len`.
    """
    return encode_all(tokenizer, [conversation], max_len)


def encode_all(tokenizer, conversations: list[dict[str, Any]], max_len: int) -> list[tuple[list[int], list[int]]]:
    """:func:`encode_for_training` of every conversation, tokenised in one batch call (Rust threads)."""
    rendered = [render_for_training(c["messages"], c.get("tools")) for c in conversations]
    return encode_rendered(tokenizer, rendered, max_len)


def encode_rendered(
    tokenizer, rendered: list[tuple[str, list[Span], list[Span]]], max_len: int
) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) pieces of already rendered (text, learnt spans, silent spans) tuples."""
    encs = tokenizer([text for text, _, _ in rendered], add_special_tokens=False, return_offsets_mapping=True)
    pieces: list[tuple[list[int], list[int]]] = []
    for ids, offsets, (_, learnt, silent) in zip(encs["input_ids"], encs["offset_mapping"], rendered):
        pieces += _cut(tokenizer, ids, _labels(ids, offsets, learnt, silent), max_len)
    return pieces


def _labels(ids: list[int], offsets: list[tuple[int, int]], spans: list[Span], silent: list[Span]) -> list[int]:
    """``ids`` where a token starts inside a learnt span, SILENT inside a silent one, IGNORE elsewhere."""
    labels = [IGNORE] * len(ids)
    marked = sorted([(a, b, True) for a, b in spans] + [(a, b, False) for a, b in silent])
    j = 0  # offsets and spans both ascend: one pass over each
    for i, (start, _end) in enumerate(offsets):
        while j < len(marked) and marked[j][1] <= start:
            j += 1
        if j < len(marked) and marked[j][0] <= start:
            labels[i] = ids[i] if marked[j][2] else SILENT
    return labels


def _cut(tokenizer, ids: list[int], labels: list[int], max_len: int) -> list[tuple[list[int], list[int]]]:
    if len(ids) <= max_len:
        return [(ids, labels)]
    prefix_len = system_prefix_len(tokenizer, ids)
    if prefix_len > max_len // 2:
        prefix_len = 0
    pieces = [(ids[:max_len], labels[:max_len])]
    pos = max_len
    room = max_len - prefix_len
    while pos < len(ids):
        p_ids = ids[:prefix_len] + ids[pos : pos + room]
        p_lab = [IGNORE] * prefix_len + labels[pos : pos + room]
        if any(x >= 0 for x in p_lab):
            pieces.append((p_ids, p_lab))
        pos += room
    return pieces


def system_prefix_len(tokenizer, ids: list[int]) -> int:
    """Tokens of the system turn (tool list) at the start of ``ids``, up to and incl. "<|im_end|>\\n"."""
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if im_end not in ids:
        return 0
    n = ids.index(im_end) + 1
    if n < len(ids) and tokenizer.decode(ids[n : n + 1]) == "\n":
        n += 1
    return n


def bucketed_batches(
    lengths: list[int], batch_size: int, rng: random.Random, window: int = 16, max_tokens: int | None = None
) -> list[list[int]]:
    """One epoch of batches: shuffled, then sorted by length within windows of `window` batches.

    Conversations differ in length by 2x or more; batches of neighbours in length waste far
    less compute on padding than random ones, while the windows keep the order random.
    With ``max_tokens``, a batch holds as many neighbours as fit ``max_tokens`` padded tokens
    (at least one), so short copy drills go many to a step and full demonstrations few.
    """
    perm = list(range(len(lengths)))
    rng.shuffle(perm)
    while len(perm) < batch_size:
        perm += perm[: batch_size - len(perm)]
    batches: list[list[int]] = []
    span = batch_size * window if max_tokens is None else max(batch_size * window, 256)
    for start in range(0, len(perm), span):
        chunk = sorted(perm[start : start + span], key=lambda i: lengths[i])
        if max_tokens is None:
            batches += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
            continue
        current: list[int] = []
        for i in chunk:  # ascending length: the newest member is the longest
            if current and (len(current) + 1) * lengths[i] > max_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
    rng.shuffle(batches)
    return batches


def _collate(batch: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    n = max(len(x) for x, _ in batch)
    ids = torch.full((len(batch), n), pad_id, dtype=torch.long)
    lab = torch.full((len(batch), n), IGNORE, dtype=torch.long)
    att = torch.zeros((len(batch), n), dtype=torch.long)
    for r, (x, y) in enumerate(batch):
        ids[r, : len(x)] = torch.tensor(x)
        lab[r, : len(y)] = torch.tensor(y)
        att[r, : len(x)] = 1
    return {"input_ids": ids, "labels": lab, "attention_mask": att}


def is_copy_step(step: int, warmup_steps: int, every: int) -> bool:
    """Whether training step ``step`` is a copy batch: every warm-up step, then one after each
    ``every`` demonstration steps (0: none). Why interleaved: a warm-up alone formed the copy
    head, but 1,600 demonstration steps after it wiped it out (0/118 held-out values copied)."""
    if step < warmup_steps:
        return True
    return every > 0 and (step - warmup_steps) % (every + 1) == every


def cpu_bf16_supported() -> bool:
    """bf16 autocast pays off on CPUs with native bf16 matmuls (AVX512-BF16 / AMX)."""
    f = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    g = getattr(torch.cpu, "_is_amx_tile_supported", None)
    try:
        return bool((f and f()) or (g and g()))
    except Exception:  # pragma: no cover - private API may change
        return False


def _lr_at(step: int, total: int, base: float, warmup: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def train_demo_model(
    conversations: list[dict[str, Any]],
    out_dir: str | Path,
    size: str = "default",
    seed: int = 0,
    steps: int | None = None,
    lr: float | None = None,
    batch_size: int | None = None,
    max_seconds: float | None = None,
    max_len: int | None = None,
    log_every: int | None = None,
    bf16: bool | None = None,
    num_threads: int | None = None,
) -> Manifest:
    """Train tokenizer + randomly initialised LlamaForCausalLM on `conversations`, save an HF dir.

    Each conversation is {"messages": [...OpenAI chat messages...], "tools": [...OpenAI tools...]}.
    The loss is on assistant tokens; where the size has a ``context_loss_weight``, that weight times
    the loss on every other token (user turns, tool results) is added (see :func:`labelled_loss`). Training runs exactly `steps` steps (None: the size's
    default), so the same conversations, size, seed and machine give the same weights: a model
    whose training stopped on wall-clock time would differ with the machine's load, and so would
    every number of a study built on it. `max_seconds` is only a guard: past it, training fails
    with :class:`TrainingTimeLimit` and writes no model (never a silently shorter training).
    `log_every`: print progress (step, loss, elapsed, time left) every that many steps.
    `bf16`: bf16 autocast for the forward pass (master weights stay fp32); None: the size's
    default ("auto": on where the CPU has native bf16 matmuls, AMX/AVX512-BF16, where a default-size
    step ran ~1.7x faster than fp32; the tiny size keeps fp32, its matmuls are too small to gain).
    Writes config.json, model.safetensors, tokenizer files (with the chat template),
    generation_config.json and flatscore_manifest.json; returns the manifest.
    """
    if not conversations:
        raise ValueError("no training conversations")
    t0 = time.perf_counter()
    spec = get_size(size)
    steps = int(steps if steps is not None else spec["steps"])
    lr = float(lr if lr is not None else spec["lr"])
    batch_size = int(batch_size if batch_size is not None else spec["batch_size"])
    max_len = int(max_len if max_len is not None else spec["max_len"])
    max_len = min(max_len, spec["max_position_embeddings"])
    if bf16 is None:
        bf16 = spec.get("bf16", False) == "auto" and cpu_bf16_supported()
    # Threads: the size's default (tiny: 1; its matmuls are too small to split, and on a busy
    # 2-core machine 2 OpenMP threads made it ~20x slower), else all cores.
    num_threads = int(num_threads or spec.get("num_threads") or os.cpu_count() or 1)
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        return _train(
            conversations,
            Path(out_dir),
            size,
            spec,
            seed,
            steps,
            lr,
            batch_size,
            max_seconds,
            max_len,
            log_every,
            bf16,
            num_threads,
            t0,
        )
    finally:
        torch.set_num_threads(prev_threads)


def training_examples(
    conversations: list[dict[str, Any]], spec: dict[str, Any], max_len: int, seed: int
) -> tuple[Any, list[tuple[list[int], list[int]]], int]:
    """The tokenizer trained on ``conversations`` and the (ids, labels) examples a size trains on.

    Returns (tokenizer, examples, n_demo_examples): the whole demonstrations come first, then the
    size's drills. One place for it, so that a benchmark measures the steps training takes.
    """
    rendered = [render_for_training(c["messages"], c.get("tools")) for c in conversations]
    tokenizer = train_tokenizer([text for text, _, _ in rendered], vocab_size=spec["vocab_size"])
    silence_first = bool(spec.get("silent_first_mentions"))
    if silence_first:
        rendered = with_first_mentions_silent(rendered)
    examples = encode_rendered(tokenizer, rendered, max_len)
    n_demo_examples = len(examples)
    drill_context = int(spec.get("copy_drills") or 0)
    phone_repeats = int(spec.get("phone_drill_repeats") or 1)
    if drill_context:
        drills = copy_drills(conversations, drill_context, phone_repeats)
        if spec.get("scrambled_drills"):
            drills += scrambled_drills(conversations, drill_context, seed)
        examples += encode_rendered(tokenizer, with_first_mentions_silent(drills) if silence_first else drills, max_len)
    return tokenizer, examples, n_demo_examples


def _train(
    conversations,
    out_dir,
    size,
    spec,
    seed,
    steps,
    lr,
    batch_size,
    max_seconds,
    max_len,
    log_every,
    bf16,
    num_threads,
    t0,
) -> Manifest:
    random.seed(seed)
    torch.manual_seed(seed)

    tokenizer, examples, n_demo_examples = training_examples(conversations, spec, max_len, seed)
    drill_context = int(spec.get("copy_drills") or 0)  # recorded in the manifest
    phone_repeats = int(spec.get("phone_drill_repeats") or 1)
    max_batch_tokens = spec.get("max_batch_tokens")
    context_weight = float(spec.get("context_loss_weight") or 0.0)
    share = spec.get("context_sample")
    context_sample = 1.0 if share is None else float(share)  # 0 is refused below, not read as "unset"
    check_context_sample(context_sample)
    # its own stream, so that sampling leaves the batches' order (rng) as it was
    context_generator = torch.Generator().manual_seed(seed)
    n_tokens = sum(len(x) for x, _ in examples)
    n_label = sum(sum(1 for t in y if t >= 0) for _, y in examples)
    if n_label == 0:
        raise ValueError("the conversations contain no assistant tokens to train on")

    config = llama_config(size, tokenizer)
    model = LlamaForCausalLM(config)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.95),
        eps=1e-8,
    )
    # The copy warm-up's steps come first and share the learning-rate schedule with the
    # demonstrations' (see copy_warmup.py for why).
    copy_steps = int(spec.get("copy_warmup_steps") or 0)
    copy_every = int(spec.get("copy_every") or 0)
    copy_span = int(spec.get("copy_span") or 32)
    # as many spans as fill the demonstrations' token budget (a span pair is at most 2 * copy_span)
    copy_batch = max(1, (max_batch_tokens or 2 * copy_span * batch_size) // (copy_span + 8))
    vocab = copy_tokens(tokenizer) if copy_steps or copy_every else []
    # keyed recall (copy_warmup.keyed_recalls), where the size asks for it: every other copy step
    # after the warm-up. Not in the warm-up: alternating there, the span copy never formed in
    # 800 steps (loss 8.17 throughout; spans alone drop at 600-650), and recall builds on it
    recall = bool(spec.get("copy_recall")) and bool(vocab)
    connectors = connector_tokens(tokenizer) if recall else []
    recall_batch = max(1, (max_batch_tokens or 2 * copy_span * batch_size) // RECALL_MAX_TOKENS)
    copy_steps_done = 0
    interleaved = steps // copy_every if copy_every else 0
    total = copy_steps + steps + interleaved
    # LR warm-up: a short fixed ramp (a twentieth of the steps, at most WARMUP_STEPS).
    warmup = max(1, min(total // 20, WARMUP_STEPS))
    rng = random.Random(seed)
    order: list[list[int]] = []
    pad_id = tokenizer.convert_tokens_to_ids("<|pad|>")
    losses: list[float] = []
    t_first_step = time.perf_counter()
    for step in range(total):
        elapsed = time.perf_counter() - t0
        if max_seconds is not None and elapsed > max_seconds:
            raise TrainingTimeLimit(
                f"max_seconds: training passed its {max_seconds:g} s guard after {step} of {total} steps "
                f"({elapsed:.0f} s; the machine may be busy); no model was written. Raise the model's "
                "max_seconds (or leave it unset) to train the same model, or lower its steps for a smaller one"
            )
        copying = is_copy_step(step, copy_steps, copy_every)
        if copying and recall and step >= copy_steps and copy_steps_done % 2 == 1:
            batch = _collate(keyed_recalls(vocab, connectors, recall_batch, rng), pad_id)
        elif copying:
            batch = _collate(repeated_spans(vocab, copy_batch, copy_span, rng), pad_id)
        else:
            if not order:
                order = bucketed_batches([len(x) for x, _ in examples], batch_size, rng, max_tokens=max_batch_tokens)
            batch = _collate([examples[i] for i in order.pop()], pad_id)
        for g in opt.param_groups:
            g["lr"] = _lr_at(step, total, lr, warmup)
        # No attention mask: batches are right-padded, and under causal attention no real token
        # can see the padding after it (its labels are ignored), so the mask changes nothing but
        # forces SDPA off its fused causal kernel (1.6x slower per step at 1,800 tokens).
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            weight = 0.0 if copying else context_weight
            loss = labelled_loss(
                model,
                batch["input_ids"],
                batch["labels"],
                batch["attention_mask"],
                weight,
                context_sample,
                context_generator,
            )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        copy_steps_done += copying
        done = step + 1
        if log_every and (done % log_every == 0 or done == total):
            _print_progress(done, total, losses, time.perf_counter() - t0, t_first_step)
        if step == 0:
            t_first_step = time.perf_counter()

    model.eval()
    out = save_demo_dir(model, tokenizer, out_dir)
    k = max(1, len(losses) // 20)
    n_points = min(20, len(losses))
    curve = []
    for j in range(n_points):
        s = round(j * (len(losses) - 1) / max(1, n_points - 1))
        window = losses[max(0, s - k + 1) : s + 1]
        curve.append([s + 1, round(sum(window) / len(window), 5)])
    manifest = Manifest(
        kind="demo",
        size=size,
        trained=True,
        config=config.to_dict(),
        data_sha256=sha256_json(conversations),
        n_conversations=len(conversations),
        n_examples=len(examples),
        n_demo_examples=n_demo_examples,
        n_copy_drills=len(examples) - n_demo_examples,
        copy_drill_context=drill_context,
        scrambled_drills=bool(spec.get("scrambled_drills")) or None,
        context_loss_weight=context_weight or None,
        context_sample=context_sample if context_weight and context_sample < 1.0 else None,
        phone_drill_repeats=phone_repeats if drill_context else None,
        max_batch_tokens=max_batch_tokens,
        n_tokens=n_tokens,
        n_label_tokens=n_label,
        vocab_size=len(tokenizer),
        steps=steps,  # demonstration steps: training ran all of them (or raised above)
        copy_warmup_steps=copy_steps or None,
        copy_every=copy_every or None,
        copy_span=copy_span if copy_steps or copy_every else None,
        copy_recall=recall or None,
        silent_first_mentions=bool(spec.get("silent_first_mentions")) or None,
        max_seconds=max_seconds,
        bf16_autocast=bf16,
        num_threads=num_threads,
        warmup_steps=warmup,
        lr=lr,
        batch_size=batch_size,
        max_len=max_len,
        first_loss=round(losses[0], 5) if losses else None,
        final_loss=round(sum(losses[-k:]) / len(losses[-k:]), 5) if losses else None,
        loss_curve=curve,
        seed=seed,
        n_params=sum(p.numel() for p in model.parameters()),
        versions=versions(),
        weights_sha256=weights_sha256(out),
        seconds=round(time.perf_counter() - t0, 2),
    )
    manifest.save(out)
    return manifest


def _print_progress(done: int, steps: int, losses: list[float], elapsed: float, t_first_step: float) -> None:
    """One progress line: a 6-10 minute training must not look like a hung job (terminal and rule log)."""
    recent = losses[-25:]
    per_step = (time.perf_counter() - t_first_step) / max(1, done - 1)
    left = per_step * (steps - done)
    print(
        f"step {done}/{steps} loss {sum(recent) / len(recent):.4f} elapsed {elapsed:.0f}s left ~{left:.0f}s",
        flush=True,
    )


def load_conversations(path: str | Path) -> list[dict[str, Any]]:
    """Read conversations from a .jsonl (one per line) or .json (a list) file."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    data = json.loads(text)
    return data["conversations"] if isinstance(data, dict) else data


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Train the flatscore demo model")
    ap.add_argument("data", help="conversations .jsonl/.json")
    ap.add_argument("out_dir")
    ap.add_argument("--size", default="default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr", type=float)
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--max-seconds", type=float)
    ap.add_argument("--max-len", type=int)
    a = ap.parse_args(argv)
    m = train_demo_model(
        load_conversations(a.data),
        a.out_dir,
        size=a.size,
        seed=a.seed,
        steps=a.steps,
        lr=a.lr,
        batch_size=a.batch_size,
        max_seconds=a.max_seconds,
        max_len=a.max_len,
        log_every=25,
    )
    print(json.dumps({k: v for k, v in m.to_dict().items() if k != "config"}, indent=1))


if __name__ == "__main__":
    main()
