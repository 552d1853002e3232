"""The A/A noise floor: how much two runs of the *same* full-precision model disagree.

With ``replicates`` > 0 the workflow reruns every full-precision cell with independent seeds.
Each quantized arm is set beside that floor, per (study, model, domain, budget, repair):

- the *flip rate*: the share of matched (task, trial) episode pairs whose verdict (pass/fail)
  differs, full vs quantized, and full vs each replicate (A/A), with a Wilson 95% interval;
- the *ICC* of per-task success (one-way random, ICC1, pingouin): tasks are the targets, the
  runs (full and quantized; or full and its replicates) the raters. 1 means the runs rank and
  score tasks alike, 0 that their per-task success shares nothing beyond chance;
- the success gap quantized - full beside the gap replicate - full.

A quantized arm is called *lossless* only if both hold: TOST equivalence of the per-task pass
rates (the comparisons table) and a flip rate within the A/A one (at most the upper end of the
A/A flip rate's interval). Without replicates there is no floor and no arm is called lossless;
where both arms pass no episode (or every one) ``bound`` says ``floor`` (``ceiling``) and no arm
is called lossless either: agreeing on failing everything says nothing about the quantization.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pingouin as pg

from flatscore.analysis.bounds import success_bound
from flatscore.analysis.exact_tests import episode_pairs, mcnemar_exact, passed
from flatscore.analysis.load import REPLICATE
from flatscore.analysis.tasks import ALPHA, CMP_KEYS, REFERENCE_PRECISION

AA = "full (A/A)"


def icc1(rates: pd.DataFrame) -> tuple[float, float, float]:
    """ICC1 (pingouin) and its 95% CI of a (task x run) table of per-task success; NaN when undefined."""
    rates = rates.dropna()
    if len(rates) < 3 or rates.shape[1] < 2:
        return (math.nan, math.nan, math.nan)
    long = rates.reset_index(names="task").melt(id_vars="task", var_name="run", value_name="rate")
    long["run"] = long["run"].astype(str)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            icc = pg.intraclass_corr(long, targets="task", raters="run", ratings="rate")
        except (AssertionError, ValueError, ZeroDivisionError):
            return (math.nan, math.nan, math.nan)
    row = icc.set_index("Type").loc["ICC(1,1)"]  # one-way random, single run
    ci = row["CI95"]
    return float(row["ICC"]), float(ci[0]), float(ci[1])


def _task_rates(episodes: pd.DataFrame, run: pd.Series) -> pd.DataFrame:
    """Per (group, task): success rate of each run (columns)."""
    sc = episodes[episodes["scored"]]
    frame = sc[[*CMP_KEYS, "task_id"]].astype(object).assign(_run=run[episodes["scored"]].to_numpy(), _p=passed(sc))
    return frame.pivot_table(index=[*CMP_KEYS, "task_id"], columns="_run", values="_p", aggfunc="mean", observed=True)


def noise_floor_table(
    main: pd.DataFrame, replicates: pd.DataFrame, comparisons: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per (group, arm): the A/A row (full vs its replicates) and each quantized arm vs full,
    quantized rows carrying the A/A figures beside their own and the lossless verdict."""
    both = pd.concat([main, replicates], ignore_index=True) if len(replicates) else main
    arm = pd.Series(
        np.where(both[REPLICATE].to_numpy() > 0, "rep" + both[REPLICATE].astype(str), both["precision"].astype(str)),
        index=both.index,
    )
    # a replicate's episode seeds differ from full precision's by design: pairs are (task, trial)
    pairs = episode_pairs(both.assign(_arm=arm.to_numpy()), column="_arm", keys=[*CMP_KEYS, "task_id", "trial"])
    rates = _task_rates(both, arm)
    eq = {}
    if comparisons is not None and len(comparisons):
        for _, r in comparisons.iterrows():
            eq[(*(r[k] for k in CMP_KEYS), str(r["precision"]))] = (float(r["tost_p"]), bool(r["tost_p"] < ALPHA))
    rows = []
    if REFERENCE_PRECISION in pairs.columns:
        for key, g in pairs.groupby(level=CMP_KEYS, observed=True, sort=True):
            r_g = rates.loc[key]  # (task x run) success rates of the group
            reps = sorted(c for c in g.columns if str(c).startswith("rep") and g[c].notna().any())
            quants = sorted(c for c in g.columns if c != REFERENCE_PRECISION and c not in reps and g[c].notna().any())
            grp = dict(zip(CMP_KEYS, key))
            aa = None
            if reps:
                ref = np.concatenate([g[[REFERENCE_PRECISION, c]].dropna()[REFERENCE_PRECISION] for c in reps])
                tr = np.concatenate([g[[REFERENCE_PRECISION, c]].dropna()[c] for c in reps])
                aa = {**mcnemar_exact(ref.astype(bool), tr.astype(bool))}
                aa["icc"], aa["icc_ci_low"], aa["icc_ci_high"] = icc1(r_g[[REFERENCE_PRECISION, *reps]])
                aa["gap"] = float((r_g[reps].mean(axis=1) - r_g[REFERENCE_PRECISION]).mean())
                rows.append({**grp, "arm": AA, "replicates": len(reps), **_row(aa), "bound": success_bound(ref, tr)})
            for prec in quants:
                sub = g[[REFERENCE_PRECISION, prec]].dropna()
                q = mcnemar_exact(sub[REFERENCE_PRECISION].to_numpy(bool), sub[prec].to_numpy(bool))
                q["icc"], q["icc_ci_low"], q["icc_ci_high"] = icc1(r_g[[REFERENCE_PRECISION, prec]])
                q["gap"] = float((r_g[prec] - r_g[REFERENCE_PRECISION]).mean())
                tost, equivalent = eq.get((*key, prec), (math.nan, False))
                bound = success_bound(sub[REFERENCE_PRECISION], sub[prec])
                row = {**grp, "arm": prec, "replicates": len(reps), **_row(q), "tost_p": tost, "equivalent": equivalent}
                row["bound"] = bound
                if aa is not None:
                    within = bool(q["flip_rate"] <= aa["flip_ci_high"])
                    row.update(
                        aa_gap=aa["gap"],
                        aa_flip_rate=aa["flip_rate"],
                        aa_flip_ci_high=aa["flip_ci_high"],
                        aa_icc=aa["icc"],
                        flip_within_aa=within,
                        lossless=bool(equivalent and within and not bound),
                    )
                else:
                    row.update(flip_within_aa=False, lossless=False)
                rows.append(row)
    return pd.DataFrame(rows, columns=NOISE_FLOOR_COLUMNS)


def _row(r: dict) -> dict:
    keys = ("n_pairs", "gap", "flip_rate", "flip_ci_low", "flip_ci_high", "icc", "icc_ci_low", "icc_ci_high")
    return {k: r[k] for k in keys}


NOISE_FLOOR_COLUMNS = [
    *CMP_KEYS,
    "arm",
    "replicates",
    "n_pairs",
    "gap",
    "flip_rate",
    "flip_ci_low",
    "flip_ci_high",
    "icc",
    "icc_ci_low",
    "icc_ci_high",
    "tost_p",
    "equivalent",
    "aa_gap",
    "aa_flip_rate",
    "aa_flip_ci_high",
    "aa_icc",
    "flip_within_aa",
    "lossless",
    "bound",
]
