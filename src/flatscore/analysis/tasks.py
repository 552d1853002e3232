"""The units of the analysis: arms, per-task sums and paired tasks (shared by every table module).

The *task* is the unit everywhere (trials are nested in it). An *arm* is ``ARM_KEYS`` = (study,
model, domain, budget, repair, precision); cells sharing them are pooled. Scores use ``scored``
episodes only. ``diff`` is always treatment minus reference (quantized - full, repair on - off).
"""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np
import pandas as pd
from scipy.special import comb

from flatscore.analysis.load import ARM_KEYS, REFERENCE_PRECISION, channel_columns

CMP_KEYS = ["study", "model", "domain", "budget", "repair"]  # full vs quantized within these
REPAIR_KEYS = ["study", "model", "precision", "domain", "budget"]  # repair on vs off within these
CURVE_KEYS = ["study", "model", "precision", "domain", "repair"]  # a budget curve per these
ALPHA = 0.05
#: channel whose rate is per *user* tool call; every other channel is per agent tool call
USER_SIDE_CHANNELS = {"user_tool_error"}

__all__ = [
    "ALPHA",
    "ARM_KEYS",
    "CMP_KEYS",
    "CURVE_KEYS",
    "REFERENCE_PRECISION",
    "REPAIR_KEYS",
    "USER_SIDE_CHANNELS",
    "channel_columns",
    "iter_pairs",
    "pass_hat_k",
    "task_table",
]


def pass_hat_k(successes, trials, k: int) -> float:
    """tau-bench pass^k: mean over tasks of C(c, k) / C(n, k); tasks with n < k are left out."""
    c = np.asarray(successes, dtype=float)
    n = np.asarray(trials, dtype=float)
    keep = n >= k
    if not keep.any():
        return math.nan
    return float(np.mean(comb(c[keep], k) / comb(n[keep], k)))


def task_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """One row per (arm, task): scored episodes, successes, pass rate, channel and call sums."""
    ch = [f"ch_{c}" for c in channel_columns(episodes)]
    sc = episodes[episodes["scored"]]
    g = sc.groupby(ARM_KEYS + ["task_id"], observed=True, sort=True)
    out = g[["reward", "errors_counted", *ch, "agent_tool_calls", "user_tool_calls"]].sum()
    out.insert(0, "n", g.size())
    out = out.rename(columns={"reward": "successes"})
    out["pass_rate"] = out["successes"] / out["n"]
    return out.reset_index()


def _arm_frame(tasks: pd.DataFrame, keys: list[str]) -> Iterator[tuple[tuple, pd.DataFrame]]:
    for key, g in tasks.groupby(keys, observed=True, sort=True):
        yield (key if isinstance(key, tuple) else (key,)), g


def iter_pairs(
    tasks: pd.DataFrame, group_keys: list[str], arm_col: str, reference
) -> Iterator[tuple[dict, object, pd.DataFrame, pd.DataFrame]]:
    """(group, treatment, reference rows, treatment rows), tasks aligned (present in both arms),
    indexed by task id (str)."""
    t = tasks.set_index(tasks["task_id"].astype(str).rename("task"))
    arm = t[arm_col].astype(object).to_numpy()
    t = t.assign(_arm=arm)
    for key, g in _arm_frame(t, group_keys):
        arms = {a: sub for a, sub in g.groupby("_arm", sort=False)}
        if reference not in arms:
            continue
        ref = arms[reference]
        for a in sorted((a for a in arms if a != reference), key=str):
            tr = arms[a]
            common = ref.index.intersection(tr.index)
            yield dict(zip(group_keys, key)), a, ref.loc[common], tr.loc[common]
