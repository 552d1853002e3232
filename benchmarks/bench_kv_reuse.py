"""KV reuse across turns: prompt tokens prefilled per episode with and without reuse, and time.

Same episodes, one at a time, on the transformers backend with ``reuse_kv`` on vs off (two
backends on one model folder, runs interleaved; the faster of each pair counts). Outputs are
asserted equal (every record field but ``prefill_tokens`` and timing).

    python benchmarks/bench_kv_reuse.py [--size default] [--tasks 4]
"""

from __future__ import annotations

import argparse

from _common import TimedBackend, canonical, demo_model, domain, one_thread, result, run_llm_episodes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="default")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--max-steps", type=int, default=16)
    args = ap.parse_args()
    one_thread()
    from flatscore.backends.transformers_backend import TransformersBackend

    dom = domain("retail")
    tasks = dom.tasks()[: args.tasks]
    model = demo_model(args.size)
    backends = {reuse: TimedBackend(TransformersBackend(model, reuse_kv=reuse)) for reuse in (False, True)}
    for b in backends.values():
        run_llm_episodes(b, dom, tasks[:1], in_flight=1, max_new_tokens=4, max_steps=4)  # warm-up
    best = {False: float("inf"), True: float("inf")}
    recs = {}
    for _ in range(args.rounds):
        for reuse, b in backends.items():
            b.seconds = 0.0
            records, wall = run_llm_episodes(
                b, dom, tasks, in_flight=1, max_new_tokens=args.max_new_tokens, max_steps=args.max_steps
            )
            best[reuse] = min(best[reuse], b.seconds)
            recs[reuse] = records
    assert canonical(recs[False]) == canonical(recs[True]), "KV reuse changed outputs"
    n = len(tasks)
    prefill = {k: sum(r["usage"]["prefill_tokens"] for r in v) / n for k, v in recs.items()}
    prompt = sum(r["usage"]["prompt_tokens"] for r in recs[True]) / n
    gen = sum(r["usage"]["completion_tokens"] for r in recs[True]) / n
    tok_ratio = prefill[False] / prefill[True]
    time_ratio = best[False] / best[True]
    print(
        f"demo '{args.size}', {n} episodes x {args.max_steps} steps; per episode: prompt tokens {prompt:.0f}, "
        f"generated {gen:.0f}"
    )
    print(
        f"prefilled per episode: without reuse {prefill[False]:.0f}, with reuse {prefill[True]:.0f} "
        f"({tok_ratio:.2f}x fewer)"
    )
    print(
        f"time in the backend: without {best[False]:.2f} s, with {best[True]:.2f} s ({time_ratio:.2f}x); "
        "outputs identical: yes"
    )
    result(
        "kv_reuse",
        time_ratio,
        "report",
        True,
        prefill_ratio=f"{tok_ratio:.2f}",
        prefill_per_episode=f"{prefill[False]:.0f}->{prefill[True]:.0f}",
    )


if __name__ == "__main__":
    main()
