"""Statistics over loaded episodes; the *task* is the unit everywhere (trials are nested in it).

What the code does: tests, multiple-comparison correction, equivalence tests, correlations and
power are pingouin's; the bootstrap CIs of means and of task-clustered statistics (every CI in
the report) are computed in closed form by :mod:`flatscore.analysis.bootstrap`, giving the same
interval as ``pg.compute_bootci`` (same resamples, BCa, quantile) much faster; other bootstrap
statistics go to pingouin. These modules shape the data and handle degenerate inputs (no
variance, too few tasks) explicitly instead of letting NaNs leak silently.

This module holds the per-arm tables (success with CI, pass^k) and is the one import point of
the analysis' statistics: the other tables live in their own modules by job and are re-exported
here, so ``flatscore.analysis.stats.<name>`` keeps working:

- :mod:`~flatscore.analysis.tasks`: arms, per-task table, paired tasks, pass^k, the keys;
- :mod:`~flatscore.analysis.bootstrap`: the closed-form bootstrap CIs;
- :mod:`~flatscore.analysis.comparisons`: paired tests, precision and repair comparisons;
- :mod:`~flatscore.analysis.error_channels`: amplification and failure-mode stability;
- :mod:`~flatscore.analysis.budget`: budget curves and the counterfactual check;
- :mod:`~flatscore.analysis.power`: power analysis.

Conventions
- an *arm* is ``ARM_KEYS`` = (study, model, domain, budget, repair, precision); cells sharing
  them are pooled;
- scores use ``scored`` episodes only; unscored ones (infrastructure_error, malformed_dropped)
  are counted beside the score;
- ``diff`` is always treatment minus reference (quantized - full, repair on - repair off).
"""

from __future__ import annotations

import pandas as pd

from flatscore.analysis.bootstrap import DECIMALS, _bootci, bootci_tasks
from flatscore.analysis.bounds import value_bound
from flatscore.analysis.budget import (
    budget_curves,
    counterfactual_agreement,
    counterfactual_rewards,
    counterfactual_table,
)
from flatscore.analysis.comparisons import compare_precisions, holm, paired_test, repair_table
from flatscore.analysis.error_channels import amplification_table, stability_table
from flatscore.analysis.power import power_table
from flatscore.analysis.tasks import (
    ALPHA,
    ARM_KEYS,
    CMP_KEYS,
    CURVE_KEYS,
    REFERENCE_PRECISION,
    REPAIR_KEYS,
    USER_SIDE_CHANNELS,
    _arm_frame,
    channel_columns,
    iter_pairs,
    pass_hat_k,
    task_table,
)

__all__ = [
    "ALPHA",
    "ARM_KEYS",
    "CMP_KEYS",
    "CURVE_KEYS",
    "DECIMALS",
    "REFERENCE_PRECISION",
    "REPAIR_KEYS",
    "USER_SIDE_CHANNELS",
    "amplification_table",
    "bootci_tasks",
    "budget_curves",
    "channel_columns",
    "compare_precisions",
    "counterfactual_agreement",
    "counterfactual_rewards",
    "counterfactual_table",
    "holm",
    "iter_pairs",
    "paired_test",
    "pass_hat_k",
    "passk_table",
    "power_table",
    "repair_table",
    "stability_table",
    "success_table",
    "task_table",
]


# --------------------------------------------------------------------------------- success, pass^k
def success_table(episodes: pd.DataFrame, n_boot: int = 2000, seed: int = 0) -> pd.DataFrame:
    """Per arm: task-clustered success with bootstrap CI, and unscored episodes beside it."""
    tasks = task_table(episodes)
    cnt = episodes.groupby(ARM_KEYS, observed=True).agg(
        n_cells=("cell_id", "nunique"),
        n_episodes=("reward", "size"),
        n_scored=("scored", "sum"),
    )
    term = episodes.groupby(ARM_KEYS + ["termination"], observed=True).size().unstack("termination", fill_value=0)
    rows = []
    for key, g in _arm_frame(tasks, ARM_KEYS):
        lo, hi = _bootci(g["pass_rate"].to_numpy(), n_boot=n_boot, seed=seed)
        rows.append(
            {
                **dict(zip(ARM_KEYS, key)),
                "n_tasks": len(g),
                "trials": int(g["n"].max()),
                "success": float(g["pass_rate"].mean()),
                "ci_low": lo,
                "ci_high": hi,
                "mean_errors_counted": float(g["errors_counted"].sum() / g["n"].sum()),
            }
        )
    succ = pd.DataFrame(
        rows, columns=[*ARM_KEYS, "n_tasks", "trials", "success", "ci_low", "ci_high", "mean_errors_counted"]
    )
    cnt = cnt.reset_index()
    term = term.reset_index()
    for t in ("infrastructure_error", "malformed_dropped", "too_many_errors"):
        if t not in term:
            term[t] = 0
    out = cnt.merge(
        term[ARM_KEYS + ["infrastructure_error", "malformed_dropped", "too_many_errors"]], on=ARM_KEYS, how="left"
    )
    out = out.rename(
        columns={
            "infrastructure_error": "n_infrastructure_error",
            "malformed_dropped": "n_malformed_dropped",
            "too_many_errors": "n_too_many_errors",
        }
    )
    out["n_unscored"] = out["n_episodes"] - out["n_scored"]
    out = out.merge(succ, on=ARM_KEYS, how="left")
    for c in ARM_KEYS:
        out[c] = out[c].astype(object)
    return out[
        [
            *ARM_KEYS,
            "n_cells",
            "n_tasks",
            "trials",
            "n_episodes",
            "n_scored",
            "n_unscored",
            "n_infrastructure_error",
            "n_malformed_dropped",
            "n_too_many_errors",
            "success",
            "ci_low",
            "ci_high",
            "mean_errors_counted",
        ]
    ].reset_index(drop=True)


def passk_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Long table of pass^k for k = 1..trials per arm; ``bound`` marks an arm at 0 or 1 (floor, ceiling)."""
    tasks = task_table(episodes)
    rows = []
    for key, g in _arm_frame(tasks, ARM_KEYS):
        for k in range(1, int(g["n"].max()) + 1):
            value = pass_hat_k(g["successes"], g["n"], k)
            rows.append(
                {
                    **dict(zip(ARM_KEYS, key)),
                    "k": k,
                    "n_tasks": int((g["n"] >= k).sum()),
                    "pass_hat_k": value,
                    "bound": value_bound(value),
                }
            )
    return pd.DataFrame(rows, columns=[*ARM_KEYS, "k", "n_tasks", "pass_hat_k", "bound"])
