"""OpenAI backend concurrency: episodes/s vs episodes in flight against a fixed-latency server.

The stdlib OpenAI-compatible server of flatscore.backends.testing (``--delay 0.05``: every
request takes 50 ms, answers a tool call) runs as a real process; LLM-agent episodes (scripted
user, fixed number of steps) go through OpenAIBackend with ``max_in_flight`` = the driver's
in-flight count. Ratio = episodes/s at N in flight / episodes/s at 1; near-linear is the goal
(reported as efficiency = ratio / N). Each level runs at least ``--waves`` x N episodes (and at
least ``--episodes``), so that a high level is not one or two waves with a ramp-up and a tail.

Also printed, to tell the backend from the engine: the same at the request level (one real
agent request, 16 tool schemas, sent N at a time through ``OpenAIBackend.generate``, no episode
engine), and the client process's CPU per episode (what caps episodes/s once the server's
latency is hidden: with 2 cores that CPU, not the backend, is the ceiling).

    python benchmarks/bench_openai_concurrency.py [--levels 1 4 16 32] [--episodes 32] [--waves 8]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time

from _common import WORKDIR, domain, result, run_llm_episodes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--waves", type=int, default=8)
    ap.add_argument("--delay", type=float, default=0.05)
    ap.add_argument("--max-steps", type=int, default=6)
    args = ap.parse_args()
    import httpx

    from flatscore.backends.openai_backend import OpenAIBackend
    from flatscore.backends.testing import write_fake_server

    WORKDIR.mkdir(parents=True, exist_ok=True)
    script = write_fake_server(WORKDIR / "fake_openai.py")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "--port",
            str(port),
            "--log",
            str(WORKDIR / "fake.log"),
            "--delay",
            str(args.delay),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        dom = domain("retail")
        base = dom.tasks()
        eps, rps, cpu = {}, {}, {}
        sample = None
        for n in args.levels:
            want = max(args.episodes, args.waves * n)
            tasks, trials = (base[:want], 1) if want <= len(base) else (base, -(-want // len(base)))
            backend = OpenAIBackend(url, model="fake", max_in_flight=n, max_retries=0)
            try:
                run_llm_episodes(backend, dom, tasks[:2], in_flight=2, max_new_tokens=8, max_steps=2)  # warm-up
                spy = _Spy(backend)
                c0 = time.process_time()
                recs, wall = run_llm_episodes(
                    spy, dom, tasks, in_flight=n, max_new_tokens=8, max_steps=args.max_steps, budget=100, trials=trials
                )
                sample = sample or spy.last
                cpu[n] = (time.process_time() - c0) / len(recs)
                rps[n] = _requests_per_s(backend, sample, n, max(64, 4 * args.waves * n))
            finally:
                backend.close()
            assert all(r["termination"] != "infrastructure_error" for r in recs)
            eps[n] = len(recs) / wall
            print(
                f"in flight {n:>3}: {len(recs)} episodes in {wall:.2f} s = {eps[n]:.2f} episodes/s "
                f"(x{eps[n] / eps[args.levels[0]]:.2f} vs {args.levels[0]}; efficiency "
                f"{eps[n] / eps[args.levels[0]] / n * args.levels[0]:.2f}); client CPU {cpu[n] * 1e3:.1f} ms/episode; "
                f"backend alone {rps[n]:.0f} requests/s (x{rps[n] / rps[args.levels[0]]:.2f})",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(10)
    top = args.levels[-1]
    ratio = eps[top] / eps[args.levels[0]]
    eff = ratio / (top / args.levels[0])
    result(
        "openai_concurrency",
        ratio,
        f"near-linear (x{top})",
        eff >= 0.75,
        efficiency=f"{eff:.2f}",
        **{f"x{n}": f"{eps[n] / eps[args.levels[0]]:.2f}" for n in args.levels},
        backend_alone=f"x{rps[top] / rps[args.levels[0]]:.2f}",
    )


class _Spy:
    """Passes requests through and keeps the last one (a real agent request for the request-level run)."""

    def __init__(self, inner) -> None:
        self.inner, self.name, self.last = inner, inner.name, None

    def generate(self, requests):
        self.last = requests[-1]
        return self.inner.generate(requests)

    def generate_each(self, requests):
        self.last = requests[-1]
        return self.inner.generate_each(requests)

    def release(self, key):
        self.inner.release(key)

    def close(self):
        pass

    def describe(self):
        return self.inner.describe()


def _requests_per_s(backend, request, n: int, total: int) -> float:
    """Requests/s of ``backend.generate`` given ``n`` copies of ``request`` at a time."""
    backend.generate([request] * n)
    t = time.perf_counter()
    for _ in range(max(1, total // n)):
        backend.generate([request] * n)
    return max(1, total // n) * n / (time.perf_counter() - t)


if __name__ == "__main__":
    main()
