"""Power analysis: how many tasks a paired t-test needs to detect a success gap or an amplification.

Effects are standardised by the sd of the per-task differences measured on the paired tasks
(pingouin's ``power_ttest``, paired contrast).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pingouin as pg

from flatscore.analysis.tasks import ALPHA, CMP_KEYS, REFERENCE_PRECISION, iter_pairs, task_table


# ---------------------------------------------------------------------------------------- power
def _n_for(d: float, power: float, alpha: float) -> float:
    """Smallest n (pairs) whose pingouin paired-t power reaches ``power`` (= ceil of pg's root).

    pg.power_ttest is evaluated on a window of integer n around the normal approximation in
    one vectorized call (the root solve costs ~30 scalar calls); pg's solver is the fallback.
    """
    if not np.isfinite(d) or d <= 0:
        return math.nan
    from scipy.stats import norm

    n0 = ((norm.ppf(1 - alpha / 2) + norm.ppf(power)) / d) ** 2
    grid = np.arange(max(2, int(n0) - 3), int(n0) + 40)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        pw = np.asarray(pg.power_ttest(d=d, n=grid, alpha=alpha, contrast="paired"), dtype=float)
        ok = np.flatnonzero(pw >= power)
        if len(ok) and (ok[0] > 0 or grid[0] == 2):
            return float(grid[ok[0]])
        try:
            n = pg.power_ttest(d=d, power=power, alpha=alpha, contrast="paired")
        except (ValueError, RuntimeError):
            return math.nan
    return float(math.ceil(max(n, 2.0))) if np.isfinite(n) else math.nan


def _power_at(d: float, n: int, alpha: float) -> float:
    if not np.isfinite(d) or n < 2:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(pg.power_ttest(d=abs(d), n=n, alpha=alpha, contrast="paired"))


def power_table(
    episodes: pd.DataFrame,
    gaps=(0.05, 0.10, 0.15),
    ratios=(1.5, 2.0, 2.5),
    power: float = 0.8,
    alpha: float = ALPHA,
    tasks: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Tasks (and episodes = tasks x trials per arm) for a paired t-test to reach ``power``.

    The standardized effect is d_z = effect / sd(per-task differences), the sd measured on the
    paired tasks of each comparison (trials per task as run). ``success_gap``: effect = gap in
    success; ``amplification_ratio``: effect = (ratio - 1) x full arm's hallucinated-tool rate
    per episode, sd from the per-task rate differences.
    """
    tasks = task_table(episodes) if tasks is None else tasks
    rows = []
    for grp, prec, ref, tr in iter_pairs(tasks, CMP_KEYS, "precision", REFERENCE_PRECISION):
        n_now = len(ref)
        if n_now < 2:
            continue
        trials = int(ref["n"].median())
        sd = float((tr["pass_rate"] - ref["pass_rate"]).std(ddof=1))
        for gap in gaps:
            d = gap / sd if sd > 0 else math.nan
            n = _n_for(d, power, alpha)
            rows.append(
                {
                    **grp,
                    "reference": REFERENCE_PRECISION,
                    "precision": prec,
                    "kind": "success_gap",
                    "target": gap,
                    "effect": gap,
                    "sd_diff": sd,
                    "d_z": d,
                    "trials": trials,
                    "n_tasks_now": n_now,
                    "power_now": _power_at(d, n_now, alpha),
                    "n_tasks_needed": n,
                    "episodes_needed_per_arm": n * trials if np.isfinite(n) else math.nan,
                }
            )
        if "ch_hallucinated_tool" in ref:
            ft = (ref["ch_hallucinated_tool"] / ref["n"]).to_numpy(float)
            qt = (tr["ch_hallucinated_tool"] / tr["n"]).to_numpy(float)
            sd_r = float(np.std(qt - ft, ddof=1))
            for ratio in ratios:
                eff = (ratio - 1.0) * float(ft.mean())
                d = eff / sd_r if sd_r > 0 else math.nan
                n = _n_for(d, power, alpha)
                rows.append(
                    {
                        **grp,
                        "reference": REFERENCE_PRECISION,
                        "precision": prec,
                        "kind": "amplification_ratio",
                        "target": ratio,
                        "effect": eff,
                        "sd_diff": sd_r,
                        "d_z": d,
                        "trials": trials,
                        "n_tasks_now": n_now,
                        "power_now": _power_at(d, n_now, alpha),
                        "n_tasks_needed": n,
                        "episodes_needed_per_arm": n * trials if np.isfinite(n) else math.nan,
                    }
                )
    cols = [
        *CMP_KEYS,
        "reference",
        "precision",
        "kind",
        "target",
        "effect",
        "sd_diff",
        "d_z",
        "trials",
        "n_tasks_now",
        "power_now",
        "n_tasks_needed",
        "episodes_needed_per_arm",
    ]
    return pd.DataFrame(rows, columns=cols)
