"""Exact paired tests and small-sample intervals: McNemar, Cochran's Q, Wilson/Clopper-Pearson, TOST.

Why beside :mod:`~flatscore.analysis.comparisons`: those tests work on per-task pass rates and
lean on large-sample approximations; a study of a few tasks and trials needs tests that hold at
any size. Every full-precision and quantized episode of the same (task, trial) starts from the
same seed, so the natural pairs are *episodes*, matched by (task, trial): McNemar's exact test
on the discordant pairs, Cochran's Q where three or more precisions share the pairs. The
statistics are statsmodels' and pingouin's; this module only shapes the data.

An episode *passes* when its reward exceeds one half (tau2 rewards are 0 or 1). Only scored
episodes are paired: a pair with an unscored side is dropped.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pingouin as pg
from statsmodels.stats.contingency_tables import cochrans_q, mcnemar
from statsmodels.stats.proportion import proportion_confint

from flatscore.analysis.bounds import success_bound
from flatscore.analysis.comparisons import holm
from flatscore.analysis.tasks import ALPHA, ARM_KEYS, CMP_KEYS, REFERENCE_PRECISION, pass_hat_k

#: An episode pair: the same (task, trial) and episode seed (equal in every precision of a study seed).
PAIR_KEYS = [*CMP_KEYS, "task_id", "trial", "seed"]
#: Margins of the TOST curve (success-rate difference): p of equivalence against each.
TOST_MARGINS = tuple(round(0.01 * i, 2) for i in range(1, 31))
#: A cell is *small* below this many episodes: its Clopper-Pearson interval is the one to read.
SMALL_CELL = 40


def passed(episodes: pd.DataFrame) -> pd.Series:
    return episodes["reward"].astype(float) > 0.5


def episode_pairs(episodes: pd.DataFrame, column: str = "precision", keys: list[str] = PAIR_KEYS) -> pd.DataFrame:
    """Scored episodes as one row per ``keys`` (a pair), one boolean column per ``column`` value."""
    sc = episodes[episodes["scored"]]
    frame = sc[keys].astype(object).assign(_arm=sc[column].astype(object).to_numpy(), _pass=passed(sc).to_numpy())
    return frame.pivot_table(index=keys, columns="_arm", values="_pass", aggfunc="first", observed=True)


def binomial_interval(k: int, n: int, method: str) -> tuple[float, float]:
    """``method`` = "wilson" or "beta" (Clopper-Pearson) 95% interval of k successes in n (statsmodels)."""
    if n == 0:
        return (math.nan, math.nan)
    lo, hi = proportion_confint(k, n, alpha=ALPHA, method=method)
    return float(lo), float(hi)


def mcnemar_exact(ref: np.ndarray, treat: np.ndarray) -> dict:
    """McNemar's exact test of paired pass/fail outcomes, with the 2x2 counts and the flip rate."""
    ref, treat = np.asarray(ref, dtype=bool), np.asarray(treat, dtype=bool)
    a, b = int((ref & treat).sum()), int((ref & ~treat).sum())
    c, d = int((~ref & treat).sum()), int((~ref & ~treat).sum())
    n = a + b + c + d
    p = float(mcnemar([[a, b], [c, d]], exact=True).pvalue) if b + c else (1.0 if n else math.nan)
    lo, hi = binomial_interval(b + c, n, "wilson")
    return {
        "n_pairs": n,
        "both_pass": a,
        "ref_only": b,
        "treat_only": c,
        "both_fail": d,
        "mcnemar_p": p,
        "flip_rate": (b + c) / n if n else math.nan,
        "flip_ci_low": lo,
        "flip_ci_high": hi,
    }


def mcnemar_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Full vs each quantized arm per (study, model, domain, budget, repair), pairs matched by (task, trial)."""
    pairs = episode_pairs(episodes)
    rows = []
    if REFERENCE_PRECISION in pairs.columns:
        for key, g in pairs.groupby(level=CMP_KEYS, observed=True, sort=True):
            for prec in sorted(c for c in g.columns if c != REFERENCE_PRECISION):
                both = g[[REFERENCE_PRECISION, prec]].dropna()
                if len(both):
                    r = mcnemar_exact(both[REFERENCE_PRECISION].to_numpy(bool), both[prec].to_numpy(bool))
                    rows.append({**dict(zip(CMP_KEYS, key)), "precision": prec, **r})
    cols = [*CMP_KEYS, "precision", "n_pairs", "both_pass", "ref_only", "treat_only", "both_fail", "mcnemar_p"]
    df = pd.DataFrame(rows, columns=[*cols, "flip_rate", "flip_ci_low", "flip_ci_high"])
    return holm(df, "mcnemar_p")


def cochran_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Cochran's Q across every precision of a group, on the (task, trial) pairs all of them ran; groups
    with fewer than three precisions are left out (McNemar is the two-arm case)."""
    pairs = episode_pairs(episodes)
    rows = []
    for key, g in pairs.groupby(level=CMP_KEYS, observed=True, sort=True):
        g = g.dropna(axis=1, how="all").dropna()
        if g.shape[1] < 3 or len(g) == 0:
            continue
        x = g.to_numpy(dtype=float)
        if np.all(x == x[:, :1]):  # no pair discordant: Q is 0/0, the answer is no difference
            q, p = 0.0, 1.0
        else:
            res = cochrans_q(x)
            q, p = float(res.statistic), float(res.pvalue)
        rows.append(
            {
                **dict(zip(CMP_KEYS, key)),
                "precisions": ",".join(map(str, g.columns)),
                "n_pairs": len(g),
                "cochran_Q": q,
                "dof": g.shape[1] - 1,
                "cochran_p": p,
            }
        )
    df = pd.DataFrame(rows, columns=[*CMP_KEYS, "precisions", "n_pairs", "cochran_Q", "dof", "cochran_p"])
    return holm(df, "cochran_p")


def interval_table(episodes: pd.DataFrame) -> pd.DataFrame:
    """Per arm: episode-level success with Wilson and Clopper-Pearson 95% intervals (small cells flagged)."""
    sc = episodes[episodes["scored"]]
    rows = []
    for key, g in sc.groupby(ARM_KEYS, observed=True, sort=True):
        n, k = len(g), int(passed(g).sum())
        w, cp = binomial_interval(k, n, "wilson"), binomial_interval(k, n, "beta")
        rows.append(
            {
                **dict(zip(ARM_KEYS, key)),
                "n_episodes": n,
                "n_tasks": int(g["task_id"].nunique()),
                "passed": k,
                "success": k / n,
                "wilson_low": w[0],
                "wilson_high": w[1],
                "cp_low": cp[0],
                "cp_high": cp[1],
                "small": n < SMALL_CELL,
            }
        )
    cols = [*ARM_KEYS, "n_episodes", "n_tasks", "passed", "success", "wilson_low", "wilson_high", "cp_low", "cp_high"]
    return pd.DataFrame(rows, columns=[*cols, "small"])


def tost_p(treat: np.ndarray, ref: np.ndarray, margin: float) -> float:
    """Paired TOST p (pingouin) of per-task values; exact decision when every difference is equal."""
    d = np.asarray(treat, dtype=float) - np.asarray(ref, dtype=float)
    if len(d) < 3:
        return math.nan
    if np.ptp(d) == 0:
        return 0.0 if abs(float(d[0])) < margin else 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(pg.tost(treat, ref, bound=margin, paired=True)["pval"].iloc[0])


def per_task_pass_k(episodes: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per (arm, task): the unbiased pass^k estimate C(c, k) / C(n, k) (tasks with n < k left out)."""
    sc = episodes[episodes["scored"]].assign(_pass=lambda f: passed(f))
    t = sc.groupby([*ARM_KEYS, "task_id"], observed=True).agg(c=("_pass", "sum"), n=("_pass", "size")).reset_index()
    t = t[t["n"] >= k]
    t["value"] = [pass_hat_k([c], [n], k) for c, n in zip(t["c"], t["n"])]
    return t


def tost_tables(episodes: pd.DataFrame, margin: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """TOST of quantized vs full on pass^1 and on pass^k (k = the trials), at ``margin`` and along
    :data:`TOST_MARGINS` (the curve): (table at the margin, Holm across the grid; the curve)."""
    k_max = int(episodes[episodes["scored"]].groupby([*ARM_KEYS, "task_id"], observed=True).size().max() or 1)
    rows, curve = [], []
    for k in sorted({1, k_max}):
        t = per_task_pass_k(episodes, k)
        t = t.assign(precision=t["precision"].astype(object))
        for key, g in t.groupby(CMP_KEYS, observed=True, sort=True):
            wide = g.pivot_table(index="task_id", columns="precision", values="value", observed=True)
            if REFERENCE_PRECISION not in wide.columns:
                continue
            for prec in sorted(c for c in wide.columns if c != REFERENCE_PRECISION):
                both = wide[[REFERENCE_PRECISION, prec]].dropna()
                x, y = both[prec].to_numpy(float), both[REFERENCE_PRECISION].to_numpy(float)
                base = {**dict(zip(CMP_KEYS, key)), "precision": prec, "metric": f"pass^{k}", "k": k}
                # both arms at 0% (or 100%) on every task: nothing to test, no equivalence verdict
                bound = success_bound(x, y)
                rows.append(
                    {
                        **base,
                        "n_tasks": len(both),
                        "value_ref": float(y.mean()) if len(y) else math.nan,
                        "value_treat": float(x.mean()) if len(x) else math.nan,
                        "diff": float((x - y).mean()) if len(x) else math.nan,
                        "tost_margin": margin,
                        "tost_p": math.nan if bound else tost_p(x, y, margin),
                        "bound": bound,
                    }
                )
                curve += [{**base, "margin": m, "tost_p": math.nan if bound else tost_p(x, y, m)} for m in TOST_MARGINS]
    base_cols = [*CMP_KEYS, "precision", "metric", "k"]
    table = pd.DataFrame(
        rows, columns=[*base_cols, "n_tasks", "value_ref", "value_treat", "diff", "tost_margin", "tost_p", "bound"]
    )
    table = holm(table, "tost_p")
    table["equivalent_holm"] = table["tost_p_holm"] < ALPHA
    return table, pd.DataFrame(curve, columns=[*base_cols, "margin", "tost_p"])
