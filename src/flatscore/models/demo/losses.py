"""The demo model's training loss: next-token cross-entropy where a loss is taken, the LM head run there alone.

Its own module because the loss is the part of a training step that decides what the model learns
and most of what a step costs beyond the transformer body (the 6,000-way head); train.py runs the
loop around it.
"""

from __future__ import annotations

import math

import torch
from transformers import LlamaForCausalLM

from .copy_warmup import IGNORE


def labelled_loss(
    model: LlamaForCausalLM,
    input_ids: torch.Tensor,
    labels: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    context_weight: float = 0.0,
    context_sample: float = 1.0,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Next-token cross-entropy on the labelled positions, the LM head run on those alone.

    The same value as ``model(input_ids, labels=labels).loss`` (mean over labelled tokens), but
    only ~10% of a demonstration's tokens are the assistant's: running the 6,000-way LM head
    on the other 90% was ~15% of a default-size step's FLOPs, spent on logits nobody reads.

    ``context_weight`` > 0 adds that weight times the mean loss on the other real tokens (user
    turns, tool results, tool list; padding excluded by ``attention_mask``; a slipped call's
    tokens, labelled SILENT, in neither mean). Why: an agent's
    decisions rest on reading what tools return, and ids recur across a dialogue; predicting
    those tokens too gives ~10x the training signal per step. Measured on 40 held-out telecom
    tasks (default size, 1600 steps, 2-core Intel AMX): 6 solved without it, 16 with weight 0.5, 17
    with 1.0 (and 1/144 retail calls right, teacher-forced, instead of 0: ids begin to be copied).

    ``context_sample`` < 1 runs the LM head on that share of the context positions only (drawn
    without replacement by ``generator``; their mean loss estimates the full context mean without
    bias). Why: ~90% of a batch's real tokens are context, and their 6,000-way projection and
    log-softmax were a third of a default-size step on a 2-core AVX2 CPU (see
    benchmarks/bench_context_sample.py); a quarter of them still outnumber the labelled tokens ~2:1.
    Measured there, it learnt less per step and gained nothing at equal time (docs/demo-model.md),
    so the default size keeps every position.
    """
    hidden = model.model(input_ids=input_ids).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    keep = targets >= 0
    logits = model.lm_head(hidden[keep])
    loss = torch.nn.functional.cross_entropy(logits.float(), targets[keep])
    if context_weight <= 0:
        return loss
    if attention_mask is None:
        raise ValueError("context_weight > 0 needs the attention mask (which tokens are padding)")
    context = (targets == IGNORE) & (attention_mask[:, 1:] > 0)
    if not bool(context.any()):
        return loss
    rows, cols = context.nonzero(as_tuple=True)
    if context_sample < 1.0:
        chosen = sampled_positions(len(rows), context_sample, generator)
        rows, cols = rows[chosen], cols[chosen]
    context_logits = model.lm_head(hidden[rows, cols])
    context_loss = torch.nn.functional.cross_entropy(context_logits.float(), input_ids[:, 1:][rows, cols])
    return loss + context_weight * context_loss


def check_context_sample(share: float) -> None:
    """Refuse a ``context_sample`` share outside (0, 1], naming the key (before any step runs)."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"context_sample: expected a share in (0, 1], got {share!r}")


def sampled_positions(n: int, share: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Indices of ``ceil(share * n)`` of ``n`` positions (at least one), drawn without replacement.

    ``share`` must lie in (0, 1]; a seeded ``generator`` makes the draw, and so training, repeatable.
    """
    check_context_sample(share)
    k = max(1, math.ceil(share * n))
    return torch.randperm(n, generator=generator)[:k]
