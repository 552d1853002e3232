"""Paired comparisons of per-task pass rates: full vs each quantized arm, repair on vs off.

Each pair of arms gets a Wilcoxon signed-rank test, a paired t-test, a TOST equivalence test
(pingouin) and a bootstrap CI of the mean difference (:mod:`~flatscore.analysis.bootstrap`);
p-values are Holm-corrected across the table. Degenerate inputs (fewer than 3 tasks, every
difference equal) get an explicit decision and a note instead of NaNs. Two arms that both solve
no task, or every task, get no test and no verdict: ``bound`` says ``floor`` or ``ceiling``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pingouin as pg

from flatscore.analysis.bootstrap import _bootci
from flatscore.analysis.bounds import success_bound
from flatscore.analysis.tasks import ALPHA, CMP_KEYS, REFERENCE_PRECISION, REPAIR_KEYS, iter_pairs, task_table


# ------------------------------------------------------------------------------------ paired tests
def paired_test(treat, ref, margin: float = 0.075, n_boot: int = 2000, seed: int = 0) -> dict:
    """Paired comparison of per-task pass rates: Wilcoxon, paired t, TOST, bootstrap CI of diff."""
    x = np.asarray(treat, dtype=float)
    y = np.asarray(ref, dtype=float)
    d = x - y
    out = {
        "n_tasks": int(len(d)),
        "success_ref": float(y.mean()) if len(y) else math.nan,
        "success_treat": float(x.mean()) if len(x) else math.nan,
        "diff": float(d.mean()) if len(d) else math.nan,
        "sd_diff": float(d.std(ddof=1)) if len(d) > 1 else math.nan,
        "note": "",
        "bound": success_bound(x, y),
    }
    out["diff_ci_low"], out["diff_ci_high"] = _bootci(d, n_boot=n_boot, seed=seed)
    nan = math.nan
    out.update(
        wilcoxon_W=nan,
        wilcoxon_p=nan,
        ttest_T=nan,
        ttest_dof=nan,
        ttest_p=nan,
        cohen_d=nan,
        ttest_ci_low=nan,
        ttest_ci_high=nan,
        tost_margin=margin,
        tost_p=nan,
    )
    if len(d) < 3:
        out["note"] = "fewer than 3 paired tasks: no test"
        return out
    if out["bound"]:
        level = "0%" if out["bound"] == "floor" else "100%"
        out["note"] = f"both arms at {level} on every task ({out['bound']}): no test, no equivalence verdict"
        return out
    if np.ptp(d) == 0:  # every task moved by the same amount: tests are degenerate, the answer is not
        c = float(d[0])
        out.update(
            wilcoxon_p=1.0 if c == 0 else 0.0,
            ttest_p=1.0 if c == 0 else 0.0,
            tost_p=0.0 if abs(c) < margin else 1.0,
            ttest_ci_low=c,
            ttest_ci_high=c,
            note="all paired differences equal: exact decision, no test statistic",
        )
        return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if np.any(d != 0):
            w = pg.wilcoxon(x, y)
            out["wilcoxon_W"], out["wilcoxon_p"] = float(w["W_val"].iloc[0]), float(w["p_val"].iloc[0])
        t = pg.ttest(x, y, paired=True)
        out["ttest_T"], out["ttest_dof"], out["ttest_p"] = (
            float(t["T"].iloc[0]),
            float(t["dof"].iloc[0]),
            float(t["p_val"].iloc[0]),
        )
        out["cohen_d"] = float(t["cohen_d"].iloc[0])
        ci = t["CI95"].iloc[0]
        out["ttest_ci_low"], out["ttest_ci_high"] = float(ci[0]), float(ci[1])
        tost = pg.tost(x, y, bound=margin, paired=True)
        out["tost_p"] = float(tost["pval"].iloc[0])
    return out


def holm(df: pd.DataFrame, pcol: str, out: str | None = None, alpha: float = ALPHA) -> pd.DataFrame:
    """Holm-adjusted p-values (pg.multicomp) across all rows of ``df``; NaNs stay NaN."""
    out = out or f"{pcol}_holm"
    if len(df) == 0:
        df[out] = pd.Series(dtype=float)
        return df
    _, padj = pg.multicomp(df[pcol].to_numpy(dtype=float), alpha=alpha, method="holm")
    df[out] = padj
    return df


def _finish_tests(df: pd.DataFrame, margin: float) -> pd.DataFrame:
    for p in ("wilcoxon_p", "ttest_p", "tost_p"):
        holm(df, p)
    df["significant_holm"] = df["wilcoxon_p_holm"] < ALPHA
    df["equivalent"] = df["tost_p"] < ALPHA
    df["equivalent_holm"] = df["tost_p_holm"] < ALPHA
    df["bound"] = df["bound"].fillna("")
    return df


_TEST_COLS = [
    "n_tasks",
    "success_ref",
    "success_treat",
    "diff",
    "diff_ci_low",
    "diff_ci_high",
    "sd_diff",
    "wilcoxon_W",
    "wilcoxon_p",
    "wilcoxon_p_holm",
    "ttest_T",
    "ttest_dof",
    "ttest_p",
    "ttest_p_holm",
    "cohen_d",
    "ttest_ci_low",
    "ttest_ci_high",
    "tost_margin",
    "tost_p",
    "tost_p_holm",
    "significant_holm",
    "equivalent",
    "equivalent_holm",
    "trials",
    "bound",
    "note",
]


def compare_precisions(
    episodes: pd.DataFrame, margin: float = 0.075, n_boot: int = 2000, seed: int = 0, tasks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Full precision vs each quantized arm per (study, model, domain, budget, repair)."""
    tasks = task_table(episodes) if tasks is None else tasks
    rows = []
    for grp, prec, ref, tr in iter_pairs(tasks, CMP_KEYS, "precision", REFERENCE_PRECISION):
        r = paired_test(tr["pass_rate"], ref["pass_rate"], margin=margin, n_boot=n_boot, seed=seed)
        rows.append(
            {
                **grp,
                "reference": REFERENCE_PRECISION,
                "precision": prec,
                "trials": int(ref["n"].max()) if len(ref) else 0,
                **r,
            }
        )
    df = pd.DataFrame(
        rows,
        columns=[
            *CMP_KEYS,
            "reference",
            "precision",
            *[
                c
                for c in _TEST_COLS
                if c
                not in (
                    "wilcoxon_p_holm",
                    "ttest_p_holm",
                    "tost_p_holm",
                    "significant_holm",
                    "equivalent",
                    "equivalent_holm",
                )
            ],
        ],
    )
    df = _finish_tests(df, margin)
    return df[[*CMP_KEYS, "reference", "precision", *_TEST_COLS]]


def repair_table(
    episodes: pd.DataFrame, margin: float = 0.075, n_boot: int = 2000, seed: int = 0, tasks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Repair on vs off per (study, model, precision, domain, budget): same paired tests."""
    tasks = task_table(episodes) if tasks is None else tasks
    rows = []
    for grp, rep, ref, tr in iter_pairs(tasks, REPAIR_KEYS, "repair", False):
        r = paired_test(tr["pass_rate"], ref["pass_rate"], margin=margin, n_boot=n_boot, seed=seed)
        rows.append({**grp, "trials": int(ref["n"].max()) if len(ref) else 0, **r})
    df = pd.DataFrame(
        rows,
        columns=[
            *REPAIR_KEYS,
            *[
                c
                for c in _TEST_COLS
                if c
                not in (
                    "wilcoxon_p_holm",
                    "ttest_p_holm",
                    "tost_p_holm",
                    "significant_holm",
                    "equivalent",
                    "equivalent_holm",
                )
            ],
        ],
    )
    df = _finish_tests(df, margin)
    df = df.rename(columns={"success_ref": "success_off", "success_treat": "success_on"})
    return df[
        [*REPAIR_KEYS, *[{"success_ref": "success_off", "success_treat": "success_on"}.get(c, c) for c in _TEST_COLS]]
    ]
