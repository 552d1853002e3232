"""First divergence: the first message where a quantized trajectory leaves the full-precision one.

Every random choice of an episode is seeded per (episode seed, turn, role), and the episode seed
depends only on (study seed, task, trial); so the full-precision and the quantized episode of the
same (task, trial) see the same user and the same random numbers, and their trajectories are
identical until one model answers differently. The first message that differs is where
quantization first changed what the agent did. For each such pair this module finds it and
classifies it:

- ``turn``: its index in the trajectory (0 is the agent's greeting; error events' ``step`` counts alike);
- ``kind``: what the quantized side did there (``tool_call``, ``message``, ``malformed``, a user
  or tool message, or ``ended``: one trajectory is a prefix of the other), and ``tool``;
- whether an error follows within ``window`` messages, its channel and side;
- whether the quantized episode then fails, and whether full precision passed;
- ``amplified``: the first error after the divergence is in a channel in which full precision
  also erred at that task (any trial) — quantization made an existing weakness strike, rather
  than adding a new kind of error.

Messages are compared on what the agent and the environment *did* (role, text, tool names and
arguments, results, error channel); the raw model output and call ids are left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from flatscore.analysis.exact_tests import binomial_interval
from flatscore.analysis.load import REPLICATE
from flatscore.analysis.noise_floor import AA
from flatscore.analysis.tasks import CMP_KEYS, REFERENCE_PRECISION, channel_columns
from flatscore.engine.cell_folder import EPISODES_FILE, read_episode_records

_KEPT = ("role", "content", "side", "name", "error", "channel", "parse_error", "invented_actions")


def signature(message: dict[str, Any]) -> str:
    """What a message did, as canonical text: equal for two messages that act alike."""
    kept = {k: message.get(k) for k in _KEPT if message.get(k) is not None}
    calls = message.get("tool_calls") or []
    kept["calls"] = [
        [c.get("function", {}).get("name"), c.get("function", {}).get("arguments")]
        for c in calls
        if isinstance(c, dict)
    ]
    return json.dumps(kept, sort_keys=True, default=str)


def kind_of(message: dict[str, Any] | None) -> tuple[str, str]:
    """(kind, tool) of a message: what one side did at the divergence."""
    if message is None:
        return "ended", ""
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    tool = str(calls[0].get("function", {}).get("name", "")) if calls else ""
    role = message.get("role")
    if role == "assistant":
        if message.get("parse_error"):
            return "malformed", ""
        return ("tool_call", tool) if calls else ("message", "")
    if role == "user":
        return ("user_tool_call", tool) if calls else ("user_message", "")
    return "tool_result", str(message.get("name", ""))


@dataclass
class Trajectory:
    messages: list[dict[str, Any]]
    signatures: list[str]
    passed: bool
    scored: bool

    @classmethod
    def of(cls, record: dict[str, Any]) -> Trajectory:
        messages = record.get("messages") or []
        return cls(messages, [signature(m) for m in messages], float(record["reward"]) > 0.5, bool(record["scored"]))


def first_divergence(a: list[str], b: list[str]) -> int | None:
    """Index of the first differing entry of two signature lists, None if they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def first_error_after(messages: list[dict[str, Any]], turn: int) -> tuple[int, str, str] | None:
    """(index, channel, side) of the first error message at or after ``turn``."""
    for i in range(turn, len(messages)):
        m = messages[i]
        if m.get("error"):
            side = m.get("side") or ("assistant" if m.get("role") == "assistant" else "")
            return i, str(m.get("channel", "")), str(side)
    return None


def _cell_trajectories(paths: list[str]) -> Iterator[tuple[tuple[str, int, int], Trajectory]]:
    """((task, trial, episode seed), trajectory) of every episode of the cells at ``paths``."""
    for path in paths:
        for record in read_episode_records(Path(path) / EPISODES_FILE):
            yield (str(record["task_id"]), int(record["trial"]), int(record.get("seed", -1))), Trajectory.of(record)


def _full_error_channels(episodes: pd.DataFrame) -> set[tuple]:
    """(group..., task, channel) where a scored full-precision episode made at least one such error."""
    ep = episodes[(episodes["precision"].astype(str) == REFERENCE_PRECISION) & episodes["scored"]]
    out: set[tuple] = set()
    for ch in channel_columns(ep):
        hit = ep[ep[f"ch_{ch}"] > 0]
        for row in hit[[*CMP_KEYS, "task_id"]].astype(object).itertuples(index=False):
            out.add((*row[:-1], str(row[-1]), ch))
    return out


DIVERGENCE_COLUMNS = [
    *CMP_KEYS,
    "precision",
    "task_id",
    "trial",
    "diverged",
    "turn",
    "kind",
    "tool",
    "full_kind",
    "full_tool",
    "error_follows",
    "error_distance",
    "error_channel",
    "error_side",
    "quant_failed",
    "full_passed",
    "amplified",
]


def divergence_table(cells: pd.DataFrame, episodes: pd.DataFrame, window: int = 4) -> pd.DataFrame:
    """One row per matched (group, quantized precision, task, trial) pair of scored episodes.

    ``episodes``: the study's own (no replicates); full precision's errors per task come from it.
    A/A replicate cells among ``cells`` are compared with full precision like a quantized arm,
    under the label ``full (A/A)``: where sampling noise alone first bends a trajectory.
    """
    replicate = cells[REPLICATE].to_numpy() if REPLICATE in cells else np.zeros(len(cells), dtype=int)
    cells = cells.assign(_label=np.where(replicate > 0, AA, cells["precision"].astype(str)))
    full_errors = _full_error_channels(episodes)
    rows = []
    for key, g in cells.groupby(CMP_KEYS, sort=True):
        precision = g["_label"]
        if not (precision == REFERENCE_PRECISION).any():
            continue
        # a quantized episode's twin has its (task, trial) and episode seed; a replicate's, its (task, trial)
        full = dict(_cell_trajectories(list(g.loc[precision == REFERENCE_PRECISION, "path"])))
        full_by_trial = {k[:2]: t for k, t in full.items()}
        grp = dict(zip(CMP_KEYS, key))
        for prec in sorted(set(precision) - {REFERENCE_PRECISION}):
            for (task, trial, seed), q in _cell_trajectories(list(g.loc[precision == prec, "path"])):
                f = full_by_trial.get((task, trial)) if prec == AA else full.get((task, trial, seed))
                if f is None or not (f.scored and q.scored):
                    continue
                rows.append({**grp, "precision": prec, "task_id": task, "trial": trial, **_pair(f, q, window)})
                if rows[-1]["error_channel"]:
                    rows[-1]["amplified"] = (*key, task, rows[-1]["error_channel"]) in full_errors
    return pd.DataFrame(rows, columns=DIVERGENCE_COLUMNS)


def _pair(f: Trajectory, q: Trajectory, window: int) -> dict[str, Any]:
    turn = first_divergence(f.signatures, q.signatures)
    out: dict[str, Any] = {"quant_failed": not q.passed, "full_passed": f.passed, "diverged": turn is not None}
    out.update(turn=-1, kind="", tool="", full_kind="", full_tool="", error_follows=False, error_distance=-1)
    out.update(error_channel="", error_side="", amplified=False)
    if turn is None:
        return out
    out["turn"] = turn
    out["kind"], out["tool"] = kind_of(q.messages[turn] if turn < len(q.messages) else None)
    out["full_kind"], out["full_tool"] = kind_of(f.messages[turn] if turn < len(f.messages) else None)
    err = first_error_after(q.messages, turn)
    if err is not None and err[0] - turn <= window:
        out.update(error_follows=True, error_distance=err[0] - turn, error_channel=err[1], error_side=err[2])
    return out


def divergence_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per (group, precision): how often and where trajectories diverge, and the share of quantized
    failures that begin at a divergence (their full-precision twin did not fail the same way:
    the trajectories differ), with Wilson 95% intervals."""
    rows = []
    for key, g in pairs.groupby([*CMP_KEYS, "precision"], sort=True):
        d = g[g["diverged"].astype(bool)]
        fails = g[g["quant_failed"].astype(bool)]
        at_div = int(fails["diverged"].sum())
        lo, hi = binomial_interval(at_div, len(fails), "wilson")
        turns = d["turn"].to_numpy(float)
        rows.append(
            {
                **dict(zip([*CMP_KEYS, "precision"], key)),
                "n_pairs": len(g),
                "n_diverged": len(d),
                "share_diverged": len(d) / len(g) if len(g) else math.nan,
                "turn_median": float(np.median(turns)) if len(turns) else math.nan,
                "turn_q1": float(np.percentile(turns, 25)) if len(turns) else math.nan,
                "turn_q3": float(np.percentile(turns, 75)) if len(turns) else math.nan,
                "share_tool_call": float((d["kind"] == "tool_call").mean()) if len(d) else math.nan,
                "share_error_follows": float(d["error_follows"].mean()) if len(d) else math.nan,
                "n_quant_failures": len(fails),
                "n_failures_at_divergence": at_div,
                "share_failures_at_divergence": at_div / len(fails) if len(fails) else math.nan,
                "failures_ci_low": lo,
                "failures_ci_high": hi,
                "n_failures_full_passed": int((fails["diverged"] & fails["full_passed"]).sum()),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


SUMMARY_COLUMNS = [
    *CMP_KEYS,
    "precision",
    "n_pairs",
    "n_diverged",
    "share_diverged",
    "turn_median",
    "turn_q1",
    "turn_q3",
    "share_tool_call",
    "share_error_follows",
    "n_quant_failures",
    "n_failures_at_divergence",
    "share_failures_at_divergence",
    "failures_ci_low",
    "failures_ci_high",
    "n_failures_full_passed",
]


def divergence_channels(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per (group, precision, channel) of the first error following a divergence: how often it
    amplifies an error full precision also made at that task (Wilson 95% interval)."""
    hit = pairs[pairs["error_follows"].astype(bool)]
    rows = []
    for key, g in hit.groupby([*CMP_KEYS, "precision", "error_channel"], sort=True):
        n, k = len(g), int(g["amplified"].sum())
        lo, hi = binomial_interval(k, n, "wilson")
        rows.append(
            {
                **dict(zip([*CMP_KEYS, "precision", "channel"], key)),
                "n_first_errors": n,
                "n_amplified": k,
                "share_amplified": k / n,
                "ci_low": lo,
                "ci_high": hi,
            }
        )
    cols = [*CMP_KEYS, "precision", "channel", "n_first_errors", "n_amplified", "share_amplified", "ci_low", "ci_high"]
    return pd.DataFrame(rows, columns=cols)
