"""Harness overhead: episode wall time / time inside the model backend; goal <= 1.05.

Demo model (random init, real tokenizer + chat template) on the transformers backend, LLM agent
+ scripted user, episodes one at a time (max_in_flight=1). "Inside the backend" is the wall time
of ``backend.generate`` calls (render + prefill + decode + detokenise), measured by a wrapper;
everything else in the episode (agent prompt building, tool-call parsing, tools, scoring, the
JSONL append with fsync) is harness. Both numbers come from the same run.

    python benchmarks/bench_harness.py [--size tiny|default] [--tasks 6] [--profile]
"""

from __future__ import annotations

import argparse

from _common import TimedBackend, demo_model, domain, one_thread, result, run_llm_episodes

GOAL = 1.05


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--profile", action="store_true", help="print a pyinstrument profile of the run")
    args = ap.parse_args()
    one_thread()
    from flatscore.backends.transformers_backend import TransformersBackend

    dom = domain("retail")
    tasks = dom.tasks()[: args.tasks]
    backend = TimedBackend(TransformersBackend(demo_model(args.size)))
    run_llm_episodes(backend, dom, tasks[:1], in_flight=1, max_new_tokens=8, max_steps=4)  # warm-up
    backend.seconds = 0.0
    prof = None
    if args.profile:
        from pyinstrument import Profiler

        prof = Profiler(interval=0.001)
        prof.start()
    records, wall = run_llm_episodes(
        backend, dom, tasks, in_flight=1, max_new_tokens=args.max_new_tokens, max_steps=args.max_steps
    )
    if prof is not None:
        prof.stop()
    ep_wall = sum(r["timing"]["wall_seconds"] for r in records)
    inside = backend.seconds
    ratio = ep_wall / inside
    run_ratio = wall / inside
    steps = sum(r["steps"] for r in records)
    print(
        f"{len(records)} episodes ({steps} steps, {sum(r['usage']['completion_tokens'] for r in records)} generated "
        f"tokens), demo '{args.size}': episode wall {ep_wall:.2f} s, inside backend.generate {inside:.2f} s; "
        f"whole run_cell {wall:.2f} s (incl. store appends + fsync)"
    )
    print(
        f"harness overhead: episode/backend {ratio:.3f} (goal <= {GOAL}); run_cell/backend {run_ratio:.3f}; "
        f"harness ms per step {(ep_wall - inside) / steps * 1e3:.2f}"
    )
    if prof is not None:
        print(prof.output_text(unicode=False, color=False))
    result("harness", ratio, f"<={GOAL}", ratio <= GOAL, size=args.size, run_cell_ratio=f"{run_ratio:.3f}")


if __name__ == "__main__":
    main()
