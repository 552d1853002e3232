"""Synthetic result cells with known, planted properties (for tests and the benchmark).

Noisy-expert-like generator. For each (model, precision, domain, repair) and each (task, trial)
one *latent* episode is drawn, independent of the budget: a sequence of error events (channel,
tool) and the reward it would earn if it ran to the end. Under a budget B the episode is the
latent one cut at its B-th counted error (then ``too_many_errors``, reward 0), exactly the
prefix-consistency the design relies on, so budget counterfactuals are exact unless
``cf_flip`` plants disagreements on purpose.

Planted knobs: per-precision multiplier on the hallucination channels (``hallucination_mult``,
e.g. 2.5x for int4), per-precision multiplier on the other channels, per-precision success
shift, a repair multiplier on hallucinations, an infrastructure-failure rate, a novel-tool
share for quantized arms.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

try:
    import orjson

    def _dumps(obj) -> bytes:
        return orjson.dumps(obj)
except ImportError:  # pragma: no cover

    def _dumps(obj) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()


from flatscore.analysis.synthetic_trajectories import diverges, full_errs, planted_messages
from flatscore.engine.cell_folder import CELL_FILE, EPISODES_FILE
from flatscore.engine.records import CHANNELS

AGENT_TOOLS = [f"tool_{i}" for i in range(10)]
USER_TOOLS = [f"user_tool_{i}" for i in range(6)]
INVENTED_TOOLS = [f"invented_{i}" for i in range(8)]
#: tool pool used by each channel
CHANNEL_POOL = {
    "invented_tool": INVENTED_TOOLS,
    "other_side_tool": USER_TOOLS,
    "malformed_call": AGENT_TOOLS,
    "invalid_arguments": AGENT_TOOLS,
    "tool_error": AGENT_TOOLS,
    "user_tool_error": USER_TOOLS,
}
#: base per-episode error rates (Poisson means) of the full-precision arm
BASE_RATES = {
    "invented_tool": 0.25,
    "other_side_tool": 0.10,
    "malformed_call": 0.05,
    "invalid_arguments": 0.20,
    "tool_error": 0.25,
    "user_tool_error": 0.05,
}


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest(), "little")


@dataclass
class SyntheticStudy:
    models: tuple[str, ...] = ("demo",)
    precisions: tuple[str, ...] = ("full", "int4")
    domains: tuple[str, ...] = ("retail",)
    budgets: tuple[int, ...] = (10, 2)
    repairs: tuple[bool, ...] = (False,)
    n_tasks: int = 40
    trials: int = 4
    study: str = "synthetic"
    seed: int = 0
    base_rates: dict = field(default_factory=lambda: dict(BASE_RATES))
    #: multiplier on invented_tool + other_side_tool per precision
    hallucination_mult: dict = field(default_factory=lambda: {"full": 1.0, "int8": 1.2, "fp8": 1.2, "int4": 2.5})
    #: multiplier on the other channels per precision
    other_mult: dict = field(default_factory=lambda: {"full": 1.0, "int8": 1.0, "fp8": 1.0, "int4": 1.3})
    #: additive shift of the latent success probability per precision
    success_shift: dict = field(default_factory=lambda: {"full": 0.0, "int8": 0.0, "fp8": 0.0, "int4": 0.0})
    repair_hallucination_mult: float = 0.4
    error_penalty: float = 0.03  # latent success prob falls by this per error
    infra_rate: float = 0.01
    novel_share: float = 0.03  # quantized arms: share of events at tools the full arm never uses
    cf_flip: float = 0.0  # plant counterfactual disagreement: flip this share of small-budget rewards
    #: identical=True makes every precision share the full arm's latent episodes (identical arms)
    identical: bool = False
    messages: int = 4  # short messages per record (realistic payload the loader must skip)
    #: plant a first divergence (see synthetic_trajectories): quantized episodes of even trials leave
    #: full precision's trajectory at this message, with an error in ``divergence_channel`` next
    divergence_turn: int | None = None
    divergence_channel: str = "invalid_arguments"
    #: A/A noise floor: this many replicates of every full-precision cell, drawn with independent seeds
    replicates: int = 0
    #: share of tasks at which full precision also errs in ``divergence_channel`` (planted amplification)
    amplified_share: float = 0.5

    def cell_ids(self) -> list[tuple]:
        return [
            (m, p, d, b, r)  # budget varies fastest: arms share their latent episodes
            for m in self.models
            for p in self.precisions
            for d in self.domains
            for r in self.repairs
            for b in self.budgets
        ]


def _task_params(spec: SyntheticStudy, domain: str):
    """Per-task difficulty, error proneness and tool preferences (shared by every arm)."""
    rng = np.random.default_rng(_seed(spec.study, spec.seed, domain, "tasks"))
    q = rng.beta(4, 2, size=spec.n_tasks)  # latent success probability
    proneness = rng.gamma(2.0, 0.5, size=spec.n_tasks)  # mean 1
    prefs = {
        pool: rng.dirichlet(np.full(len(names), 0.4), size=spec.n_tasks)
        for pool, names in (("agent", AGENT_TOOLS), ("user", USER_TOOLS), ("invented", INVENTED_TOOLS))
    }
    return q, proneness, prefs


_POOL_OF = {
    "invented_tool": "invented",
    "other_side_tool": "user",
    "user_tool_error": "user",
    "malformed_call": "agent",
    "invalid_arguments": "agent",
    "tool_error": "agent",
}
_NAMES_OF = {"agent": AGENT_TOOLS, "user": USER_TOOLS, "invented": INVENTED_TOOLS}


def latent_episodes(
    spec: SyntheticStudy, model: str, precision: str, domain: str, repair: bool, replicate: int = 0
) -> dict:
    """Budget-free latent episodes of one arm, as numpy arrays + per-episode event lists."""
    q, proneness, prefs = _task_params(spec, domain)
    arm_prec = "full" if spec.identical else precision
    again = ("replicate", replicate) if replicate else ()  # replicate 0: the draws as they always were
    rng = np.random.default_rng(_seed(spec.study, spec.seed, model, arm_prec, domain, repair, *again))
    n = spec.n_tasks * spec.trials
    task = np.repeat(np.arange(spec.n_tasks), spec.trials)
    trial = np.tile(np.arange(spec.trials), spec.n_tasks)
    model_factor = 1.0 + 0.2 * (_seed(model) % 3)
    counts = np.zeros((n, len(CHANNELS)), dtype=np.int64)
    for j, ch in enumerate(CHANNELS):
        mult = (
            spec.hallucination_mult.get(arm_prec, 1.0)
            if ch in ("invented_tool", "other_side_tool")
            else spec.other_mult.get(arm_prec, 1.0)
        )
        if repair and ch in ("invented_tool", "other_side_tool"):
            mult *= spec.repair_hallucination_mult
        lam = spec.base_rates.get(ch, 0.0) * mult * model_factor * proneness[task]
        if spec.divergence_turn is not None and ch == spec.divergence_channel:
            lam = lam * 0.0  # the planted channel's errors are exactly the planted ones
        counts[:, j] = rng.poisson(lam)
    total = counts.sum(1)
    p_succ = np.clip(q[task] + spec.success_shift.get(arm_prec, 0.0) - spec.error_penalty * total, 0, 1)
    reward = (rng.random(n) < p_succ).astype(float)
    ok_calls = rng.poisson(5, size=n) + 1
    user_calls = rng.poisson(1.0, size=n)
    infra = rng.random(n) < spec.infra_rate
    # events: channel sequence in random order, tool drawn from the task's preferences
    events: list[list[tuple[str, str]]] = []
    novel = 0.0 if arm_prec == "full" else spec.novel_share
    u_tool = rng.random(int(total.sum()) + 1)
    u_novel = rng.random(int(total.sum()) + 1)
    k = 0
    ch_arr = np.array(CHANNELS)
    for i in range(n):
        if total[i] == 0:
            events.append([])
            continue
        seq = np.repeat(ch_arr, counts[i])
        rng.shuffle(seq)
        evs = []
        t = task[i]
        for ch in seq:
            pool = _POOL_OF[ch]
            if u_novel[k] < novel:
                tool = f"novel_{int(u_tool[k] * 5)}"
            else:
                cdf = np.cumsum(prefs[pool][t])
                tool = _NAMES_OF[pool][min(int(np.searchsorted(cdf, u_tool[k])), len(cdf) - 1)]
            k += 1
            evs.append((str(ch), tool))
        events.append(evs)
    if spec.divergence_turn is not None:
        _plant_errors(spec, precision, task, trial, events)
    return {
        "task": task,
        "trial": trial,
        "counts": counts,
        "total": total,
        "reward": reward,
        "ok_calls": ok_calls,
        "user_calls": user_calls,
        "infra": infra,
        "events": events,
    }


def _plant_errors(spec: SyntheticStudy, precision: str, task, trial, events: list) -> None:
    """The planted trajectories' errors, last in each latent episode (so budgets cut them alike):
    the quantized error after the divergence, full precision's own at the planted tasks."""
    for i, evs in enumerate(events):
        if diverges(precision, int(trial[i])):
            evs.append((spec.divergence_channel, "wrong_tool"))
        elif full_errs(int(task[i]), spec.n_tasks, spec.amplified_share):
            evs.append((spec.divergence_channel, "tool_0"))


def _records(
    spec: SyntheticStudy, lat: dict, domain: str, budget: int, repair: bool, cell: str, flip_rng, precision: str
):
    msgs = [
        {"role": "assistant" if j % 2 else "user", "content": "Sure, let me look that up for you. " * 3}
        for j in range(spec.messages)
    ]
    for i in range(len(lat["task"])):
        evs = lat["events"][i]
        infra = bool(lat["infra"][i])
        if len(evs) >= budget:
            evs = evs[:budget]
            term, reward = "too_many_errors", 0.0
        else:
            term, reward = ("user_stop" if i % 3 else "agent_stop"), float(lat["reward"][i])
        if infra:
            term, reward = "infrastructure_error", 0.0
        if spec.cf_flip and budget < max(spec.budgets) and flip_rng.random() < spec.cf_flip:
            reward = 1.0 - reward
        messages = msgs
        if spec.divergence_turn is not None:
            task, trial = int(lat["task"][i]), int(lat["trial"][i])
            full_error = full_errs(task, spec.n_tasks, spec.amplified_share)
            diverge = diverges(precision, trial)
            messages = planted_messages(task, trial, spec.divergence_turn, spec.divergence_channel, diverge, full_error)
        chans = dict.fromkeys(CHANNELS, 0)
        agent_err = 0
        for ch, _ in evs:
            chans[ch] += 1
            agent_err += ch != "user_tool_error"
        yield {
            "task_id": f"{domain}_task_{lat['task'][i]:04d}",
            "trial": int(lat["trial"][i]),
            "seed": _seed(domain, lat["task"][i], lat["trial"][i]) % (2**31),
            "domain": domain,
            "budget": budget,
            "repair": repair,
            "termination": term,
            "reward": reward,
            "scored": not infra,
            "reward_info": {"db_match": bool(reward)},
            "errors_counted": len(evs),
            "channels": chans,
            "error_events": [
                {
                    "step": 2 * j + 1,
                    "channel": ch,
                    "side": "user" if ch == "user_tool_error" else "agent",
                    "tool": tool,
                    "detail": "synthetic",
                    "counted": True,
                }
                for j, (ch, tool) in enumerate(evs)
            ],
            "agent_tool_calls": int(lat["ok_calls"][i]) + agent_err,
            "user_tool_calls": int(lat["user_calls"][i]) + chans["user_tool_error"],
            "steps": 2 * (int(lat["ok_calls"][i]) + len(evs)) + 2,
            "messages": messages,
            "usage": {"prompt_tokens": 1200, "completion_tokens": 180},
            "timing": {"wall_s": 1.5},
            "cell": cell,
            "tau2_compat": False,
            "schema": 1,
        }


def write_study(spec: SyntheticStudy, results_dir: Path, summaries: bool = True) -> list[Path]:
    """Write ``<results_dir>/cells/<cell_id>/{cell.json,episodes.jsonl}``; return the cell dirs.

    ``summaries``: also write each cell's ``episodes.summary.npz``, as the episodes command does
    when a cell ends (False: cells as written before summaries existed, parsed line by line).
    """
    from flatscore.analysis.summary import write_summary

    root = Path(results_dir) / "cells"
    root.mkdir(parents=True, exist_ok=True)
    out = []
    cache: dict = {}
    replicas = [
        (m, p, d, b, r, n) for n in range(1, spec.replicates + 1) for m, p, d, b, r in spec.cell_ids() if p == "full"
    ]
    for model, prec, dom, budget, rep, again in [(*c, 0) for c in spec.cell_ids()] + replicas:
        key = (model, prec, dom, rep, again)
        if key not in cache:
            cache = {key: latent_episodes(spec, model, prec, dom, rep, again)}
        lat = cache[key]
        suffix = ("replicate", again) if again else ()
        cell_hash = f"{_seed(spec.study, spec.seed, model, prec, dom, budget, rep, *suffix):016x}"
        cell_id = (
            f"{model}-{prec}-{dom}-b{budget}-{'rep' if rep else 'norep'}{f'-r{again}' if again else ''}-{cell_hash[:8]}"
        )
        d = root / cell_id
        d.mkdir(exist_ok=True)
        (d / CELL_FILE).write_text(
            json.dumps(
                {
                    "cell_hash": cell_hash,
                    "study": spec.study,
                    "model": model,
                    "precision": prec,
                    "domain": dom,
                    "budget": budget,
                    "repair": rep,
                    "trials": spec.trials,
                    "seed": spec.seed,
                    **({"replicate": again} if again else {}),
                }
            )
        )
        flip_rng = np.random.default_rng(_seed("flip", cell_hash))
        with open(d / EPISODES_FILE, "wb", buffering=1 << 20) as fh:
            fh.write(
                b"".join(_dumps(r) + b"\n" for r in _records(spec, lat, dom, budget, rep, cell_id, flip_rng, prec))
            )
        if summaries:
            write_summary(d)
        out.append(d)
    return out
