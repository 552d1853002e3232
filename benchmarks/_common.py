"""Shared set-up for the benchmarks: demo model, synthetic domain, timed backend, episode runs.

Every benchmark measures a *ratio* inside one process (A and B back to back or interleaved),
because the machines these run on are shared: absolute times move with the load, ratios much
less. Each prints a final line ``RESULT <name> ratio=<x> goal=<goal> <PASS|MISS>``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

WORKDIR = Path(os.environ.get("FLATSCORE_BENCH_DIR", "/tmp/flatscore_bench_common"))


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo ("unknown" where absent): this machine kind is an
    AVX2-only AMD or an AVX-512/AMX Intel, and a figure is only comparable on the same one."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown"
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def one_thread() -> None:
    import torch

    torch.set_num_threads(int(os.environ.get("FLATSCORE_BENCH_THREADS", "1")))


def demo_model(size: str, peaked: bool = True) -> Path:
    """A random-init demo model (real tokenizer + chat template), built once per WORKDIR.

    ``peaked``: weights re-drawn with std 0.2 instead of 0.02 (as backends/testing.py's tiny
    model does), so that greedy choices are not near-ties decided by rounding noise: with the
    flat default init, batched and one-at-a-time decoding (different BLAS shapes) pick different
    argmaxes at near-ties in about 1 of 16 episodes, with the original backend as with this one.
    Same shapes, so the same cost per token.
    """
    from flatscore.models.demo import build_untrained_demo

    out = WORKDIR / f"demo_{size}{'_peaked' if peaked else ''}"
    if not (out / "config.json").exists():
        build_untrained_demo(out, size=size)
        if peaked:
            import torch
            from transformers import LlamaForCausalLM

            model = LlamaForCausalLM.from_pretrained(out)
            torch.manual_seed(0)
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if param.dim() >= 2:
                        param.normal_(0.0, 0.2)
            model.save_pretrained(out)
    return out


def domain(name: str = "retail", seed: int = 7):
    from flatscore.domains import domain_class, load_domain

    path = WORKDIR / f"{name}_{seed}"
    if not (path / "tasks.json").exists():
        domain_class(name).generate(path, seed=seed)
    return load_domain(name, path)


class TimedBackend:
    """Wraps a backend; ``seconds`` = wall time spent inside its ``generate`` calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0
        self.name = inner.name

    def generate(self, requests):
        t = time.perf_counter()
        try:
            return self.inner.generate(requests)
        finally:
            self.seconds += time.perf_counter() - t
            self.calls += 1

    def generate_each(self, requests):
        t = time.perf_counter()
        try:
            return self.inner.generate_each(requests)
        finally:
            self.seconds += time.perf_counter() - t
            self.calls += 1

    def release(self, key):
        self.inner.release(key)

    def close(self):
        self.inner.close()

    def describe(self):
        return self.inner.describe()


def run_llm_episodes(
    backend: Any,
    dom,
    tasks,
    *,
    in_flight: int,
    max_new_tokens: int,
    max_steps: int,
    budget: int = 10,
    store_path: Path | None = None,
    trials: int = 1,
) -> tuple[list[dict], float]:
    """Run tasks x trials LLM-agent episodes (scripted user) through ``run_cell``; (records, wall)."""
    from flatscore.agents.llm import LLMAgent
    from flatscore.agents.users import ScriptedUser
    from flatscore.engine.episode import EpisodeSettings
    from flatscore.engine.runner import run_cell
    from flatscore.engine.store import EpisodeStore

    path = store_path or WORKDIR / "stores" / f"run_{time.monotonic_ns()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.unlink()
    store = EpisodeStore(path)
    agent = LLMAgent(compact=True, max_new_tokens=max_new_tokens)
    t = time.perf_counter()
    run_cell(
        dom,
        tasks,
        agent,
        ScriptedUser(),
        EpisodeSettings(max_errors=budget, max_steps=max_steps),
        trials,
        0,
        store,
        backends={"agent": backend},
        max_in_flight=in_flight,
        progress=False,
    )
    wall = time.perf_counter() - t
    records = sorted(store.records(), key=lambda r: (r["task_id"], r["trial"]))
    path.unlink()
    return records, wall


def canonical(records: list[dict]) -> list[str]:
    """Records as canonical strings without timing or ``prefill_tokens`` (what caching may change)."""
    from flatscore.engine.records import canonical_without_timing

    return [canonical_without_timing(r) for r in records]


def result(name: str, ratio: float, goal: str, ok: bool, **extra: Any) -> None:
    load = os.getloadavg()[0]
    fields = " ".join(f"{k}={v}" for k, v in extra.items())
    print(
        f"RESULT {name} ratio={ratio:.3f} goal={goal} {'PASS' if ok else 'MISS'} load1={load:.1f} cores={os.cpu_count()} {fields}"
    )
    sys.stdout.flush()
