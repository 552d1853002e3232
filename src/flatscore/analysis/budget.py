"""Budget curves and their check: success at every budget K from the largest-budget run.

An episode run with budget Kmax would have ended at its K-th counted error under budget K, so
its reward at K is known without rerunning (:func:`counterfactual_rewards`); where a smaller
budget was also run for real, :func:`counterfactual_agreement` measures how often the prediction
matches.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from flatscore.analysis.bootstrap import bootci_tasks
from flatscore.analysis.bounds import value_bound
from flatscore.analysis.tasks import CURVE_KEYS


# --------------------------------------------------------------------------------- budget curves
def counterfactual_rewards(episodes: pd.DataFrame, k: int) -> np.ndarray:
    """Reward each episode would have under budget ``k`` (<= its own): 0 if errors_counted >= k."""
    return np.where(episodes["errors_counted"].to_numpy() >= k, 0.0, episodes["reward"].to_numpy(dtype=float))


def budget_curves(episodes: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Success at every K = 1..Kmax from the Kmax run of each (study, model, precision, domain, repair)."""
    sc = episodes[episodes["scored"]]
    real = (
        sc.groupby(CURVE_KEYS + ["budget", "task_id"], observed=True)["reward"]
        .mean()
        .groupby(CURVE_KEYS + ["budget"], observed=True)
        .mean()
    )
    real = {
        tuple(str(v) if not isinstance(v, (bool, np.bool_, int, np.integer)) else v for v in k): float(v)
        for k, v in real.items()
    }
    rows = []
    for key, g in sc.groupby(CURVE_KEYS, observed=True, sort=True):
        kmax = int(g["budget"].max())
        src = g[g["budget"] == kmax]
        codes = src["task_id"].cat.remove_unused_categories().cat.codes.to_numpy()
        nt = codes.max() + 1
        per_task_n = np.bincount(codes, minlength=nt)
        grp = dict(zip(CURVE_KEYS, key))
        ks = np.arange(1, kmax + 1)
        P = np.column_stack(
            [np.bincount(codes, weights=counterfactual_rewards(src, k), minlength=nt) / per_task_n for k in ks]
        )  # (n_tasks, Kmax) per-task success at each K
        los, his = bootci_tasks(P, lambda S, n: S / n, n_boot=n_boot, seed=seed)
        for j, k in enumerate(ks):
            per_task, lo, hi = P[:, j], los[j], his[j]
            k = int(k)
            rkey = tuple(str(v) if not isinstance(v, (bool, np.bool_, int, np.integer)) else v for v in (*key, k))
            rows.append(
                {
                    **grp,
                    "source_budget": kmax,
                    "K": k,
                    "n_tasks": int(nt),
                    "success": float(per_task.mean()),
                    "ci_low": lo,
                    "ci_high": hi,
                    "real_run": rkey in real,
                    "real_success": real.get(rkey, math.nan),
                    "bound": value_bound(float(per_task.mean())),
                }
            )
    cols = [
        *CURVE_KEYS,
        "source_budget",
        "K",
        "n_tasks",
        "success",
        "ci_low",
        "ci_high",
        "real_run",
        "real_success",
        "bound",
    ]
    return pd.DataFrame(rows, columns=cols)


def counterfactual_agreement(kmax_episodes: pd.DataFrame, real_episodes: pd.DataFrame, budget: int) -> dict:
    """Predicted (from the larger-budget run) vs real reward per episode at ``budget``.

    Episodes are matched on (task_id, trial) (plus seed where (task_id, trial) repeats, e.g.
    pooled seeds); both sides must be scored. Returns agreement = fraction of matched episodes
    whose predicted reward equals the real one, with n; also whether the error count agrees
    (real errors_counted == min(e, budget)), and what could not be matched.
    """
    a = kmax_episodes[kmax_episodes["scored"]]
    b = real_episodes[real_episodes["scored"]]
    src_budget = int(a["budget"].max()) if len(a) and "budget" in a else math.nan
    keys = ["task_id", "trial"]
    if a.duplicated(keys).any() or b.duplicated(keys).any():
        keys = keys + ["seed"]
    left = pd.DataFrame(
        {
            "task_id": a["task_id"].astype(str).to_numpy(),
            "trial": a["trial"].to_numpy(),
            "seed": a["seed"].to_numpy(),
            "pred": counterfactual_rewards(a, budget),
            "pred_err": np.minimum(a["errors_counted"].to_numpy(), budget),
        }
    )
    right = pd.DataFrame(
        {
            "task_id": b["task_id"].astype(str).to_numpy(),
            "trial": b["trial"].to_numpy(),
            "seed": b["seed"].to_numpy(),
            "real": b["reward"].to_numpy(dtype=float),
            "real_err": b["errors_counted"].to_numpy(),
        }
    )
    m = left.merge(right, on=keys, how="inner", suffixes=("", "_real"))
    n = len(m)
    agree = int((m["pred"] == m["real"]).sum())
    seed_mismatch = int((m["seed"] != m["seed_real"]).sum()) if "seed_real" in m else 0
    return {
        "budget": int(budget),
        "source_budget": src_budget,
        "n": n,
        "n_agree": agree,
        "agreement": agree / n if n else math.nan,
        "errors_agreement": float((m["pred_err"] == m["real_err"]).mean()) if n else math.nan,
        "predicted_success": float(m["pred"].mean()) if n else math.nan,
        "real_success": float(m["real"].mean()) if n else math.nan,
        "n_unmatched_source": int(len(left) - n),
        "n_unmatched_real": int(len(right) - n),
        "n_seed_mismatch": seed_mismatch,
    }


def counterfactual_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """counterfactual_agreement for every real run at a budget below its group's Kmax."""
    rows = []
    for key, g in episodes.groupby(CURVE_KEYS, observed=True, sort=True):
        budgets = sorted(int(b) for b in g["budget"].unique())
        kmax = budgets[-1]
        src = g[g["budget"] == kmax]
        for b in budgets[:-1]:
            rows.append({**dict(zip(CURVE_KEYS, key)), **counterfactual_agreement(src, g[g["budget"] == b], b)})
    cols = [
        *CURVE_KEYS,
        "budget",
        "source_budget",
        "n",
        "n_agree",
        "agreement",
        "errors_agreement",
        "predicted_success",
        "real_success",
        "n_unmatched_source",
        "n_unmatched_real",
        "n_seed_mismatch",
    ]
    return pd.DataFrame(rows, columns=cols)
