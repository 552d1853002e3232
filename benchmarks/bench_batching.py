"""Batching: episodes/s with N episodes batched through the transformers backend vs one at a time.

Goal >= 4x at N=16 on the demo model, with identical greedy outputs (asserted: every record,
timing aside, equal). Both runs use the same backend settings (KV reuse on, greedy); only
``max_in_flight`` differs (1 vs N, ``max_batch=N``). The runs are interleaved (seq, batch, seq,
batch) and the faster of each pair counts, so a load spike hits both sides alike.

    python benchmarks/bench_batching.py [--size default] [--n 16] [--rounds 2]
"""

from __future__ import annotations

import argparse

from _common import canonical, demo_model, domain, one_thread, result, run_llm_episodes

GOAL = 4.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="default")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--max-steps", type=int, default=8)
    args = ap.parse_args()
    one_thread()
    import torch

    from flatscore.backends.transformers_backend import TransformersBackend

    dom = domain("retail")
    tasks = dom.tasks()[: args.n]
    model = demo_model(args.size)
    backend = TransformersBackend(model, max_batch=args.n)
    run_llm_episodes(backend, dom, tasks[:2], in_flight=2, max_new_tokens=4, max_steps=4)  # warm-up
    best = {1: float("inf"), args.n: float("inf")}
    outputs = {}
    for _ in range(args.rounds):
        for in_flight in (1, args.n):
            records, wall = run_llm_episodes(
                backend, dom, tasks, in_flight=in_flight, max_new_tokens=args.max_new_tokens, max_steps=args.max_steps
            )
            best[in_flight] = min(best[in_flight], wall)
            outs = canonical(records)
            assert outputs.setdefault(in_flight, outs) == outs, "a rerun changed the outputs"
    assert outputs[1] == outputs[args.n], "batched greedy outputs differ from one-at-a-time"
    n_ep = len(tasks)
    tokens = sum(r["usage"]["completion_tokens"] for r in records)
    eps_seq, eps_b = n_ep / best[1], n_ep / best[args.n]
    ratio = eps_b / eps_seq
    print(
        f"demo '{args.size}', {n_ep} episodes x {args.max_steps} steps, {tokens} generated tokens per run, "
        f"torch threads {torch.get_num_threads()}"
    )
    print(
        f"one at a time: {best[1]:.2f} s ({eps_seq:.2f} episodes/s); N={args.n} batched: {best[args.n]:.2f} s "
        f"({eps_b:.2f} episodes/s); speed-up {ratio:.2f}x (goal >= {GOAL}x); outputs identical: yes"
    )
    result("batching", ratio, f">={GOAL}", ratio >= GOAL, size=args.size, n=args.n)


if __name__ == "__main__":
    main()
