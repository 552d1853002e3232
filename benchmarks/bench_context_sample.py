"""Training-step time of the default demo size: the context loss on every position vs a sample.

    python benchmarks/bench_context_sample.py [SHARE] [STEPS]

The default size also predicts the user's and the tools' tokens (``context_loss_weight``); those
are ~90% of a batch's real tokens, so their 6,000-way LM head and log-softmax cost a large part
of a step. ``context_sample`` runs the head on a share of them (see ``labelled_loss``). This
times the same real batches (expert demonstrations and drills of a freshly generated retail and
telecom train split, filled to the size's token budget) with share 1.0 and SHARE (default 0.25),
interleaved in rounds so that a change of the machine's load hits both arms alike, and prints
full / sampled. Goal: >= 1.25x (the head is about a third of a step on a 2-core AVX2 CPU). It
measures the cost only; whether a model learns as well with the sample is a held-out question
(docs/demo-model.md).
"""

from __future__ import annotations

import os
import random
import sys
import time

GOAL = 1.25


def _batches(n: int):
    from _common import WORKDIR, domain

    from flatscore.agents.diagnosing_expert import DiagnosingExpertAgent
    from flatscore.agents.llm import LLMAgent
    from flatscore.models.demo.demonstrations import expert_conversations
    from flatscore.models.demo.sizes import get_size
    from flatscore.models.demo.train import _collate, bucketed_batches, training_examples

    spec = get_size("default")
    convs = []
    for name in ("retail", "telecom"):
        convs += expert_conversations(domain(name), "train", DiagnosingExpertAgent, LLMAgent(compact=True))
    tok, examples, _ = training_examples(convs, spec, spec["max_len"], seed=0)
    order = bucketed_batches(
        [len(x) for x, _ in examples], spec["batch_size"], random.Random(0), max_tokens=spec["max_batch_tokens"]
    )
    pad = tok.convert_tokens_to_ids("<|pad|>")
    print(f"{len(convs)} conversations, {len(examples)} examples ({WORKDIR})", flush=True)
    return tok, [_collate([examples[i] for i in order[j % len(order)]], pad) for j in range(n)]


def main(share: float = 0.25, steps: int = 8) -> None:
    import torch
    from transformers import LlamaForCausalLM

    from flatscore.models.demo.losses import labelled_loss
    from flatscore.models.demo.sizes import get_size, llama_config

    torch.set_num_threads(int(os.environ.get("FLATSCORE_BENCH_THREADS", str(os.cpu_count() or 1))))
    tok, batches = _batches(steps)
    weight = float(get_size("default")["context_loss_weight"])
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_config("default", tok)).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(0)

    def step(batch, s: float) -> None:
        loss = labelled_loss(model, batch["input_ids"], batch["labels"], batch["attention_mask"], weight, s, gen)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step(batches[0], 1.0)  # warm-up: allocator, thread pool
    times = {1.0: 0.0, share: 0.0}
    for _round in range(3):
        for s in (1.0, share):
            t = time.perf_counter()
            for batch in batches:
                step(batch, s)
            times[s] += time.perf_counter() - t
    per_step = {s: t / (3 * len(batches)) for s, t in times.items()}
    tokens = sum(int(b["attention_mask"].sum()) for b in batches) / len(batches)
    ratio = per_step[1.0] / per_step[share]
    print(
        f"full context loss: {per_step[1.0]:.3f} s/step; share {share}: {per_step[share]:.3f} s/step; {tokens:.0f} tokens/step"
    )
    from _common import cpu_name

    cpu = cpu_name().replace(" ", "_")
    load1 = os.getloadavg()[0]
    verdict = "PASS" if ratio >= GOAL else "MISS"
    print(
        f"RESULT context_sample ratio={ratio:.2f} goal>={GOAL} {verdict} share={share} "
        f"threads={torch.get_num_threads()} cpu={cpu} load1={load1:.1f}"
    )


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main(*(f(a) for f, a in zip((float, int), sys.argv[1:])))
