"""Statistics over loaded episodes; the *task* is the unit everywhere (trials are nested in it).

Every test, bootstrap CI, multiple-comparison correction, equivalence test, correlation and power
computation is pingouin's; this module only shapes the data and handles degenerate inputs
(no variance, too few tasks) explicitly instead of letting NaNs leak silently.

Conventions
- an *arm* is ``ARM_KEYS`` = (study, model, domain, budget, repair, precision); cells sharing
  them are pooled;
- scores use ``scored`` episodes only; unscored ones (infrastructure_error, malformed_dropped)
  are counted beside the score;
- ``diff`` is always treatment minus reference (quantized - full, repair on - repair off).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Iterator

import numpy as np
import pandas as pd
import pingouin as pg
from scipy.special import comb

from flatscore.analysis.load import ARM_KEYS, REFERENCE_PRECISION, channel_columns

CMP_KEYS = ["study", "model", "domain", "budget", "repair"]  # full vs quantized within these
REPAIR_KEYS = ["study", "model", "precision", "domain", "budget"]  # repair on vs off within these
CURVE_KEYS = ["study", "model", "precision", "domain", "repair"]  # a budget curve per these
DECIMALS = 12  # compute_bootci rounds to 2 decimals by default: keep the CI exact
ALPHA = 0.05
#: channel whose rate is per *user* tool call; every other channel is per agent tool call
USER_SIDE_CHANNELS = {"user_tool_error"}


# --------------------------------------------------------------------------------------- helpers
# Bootstrap CIs. pg.compute_bootci (scipy.stats.bootstrap underneath) evaluates the statistic on
# the n jackknife resamples for BCa; for task-clustered statistics that is an (n x n) @ (n x m)
# product per call, ~0.2 s at 1,700 tasks and ~230 calls per study. Every statistic bootstrapped
# here is a function of per-task column sums, so the same interval is computed below in closed
# form: the *same* resamples (scipy's generator, seeded as pingouin seeds it), the same bootstrap
# distribution, the same BCa formulas (Efron & Tibshirani 14.3/15.4, as scipy writes them) and
# the same quantile; only the jackknife uses leave-one-out sums (total - row) instead of
# re-summing n - 1 rows, which changes a_hat in the last bits at most. tests/analysis checks
# these intervals against pg.compute_bootci.
@functools.lru_cache(maxsize=4)
def _resamples(n: int, n_boot: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (n_boot, n) resample indices scipy.stats.bootstrap draws for ``random_state=seed``
    and their counts per task (n_boot, n), as float. Cached (read-only): every arm of a study
    with the same number of tasks is resampled alike, as pingouin with one seed does."""
    from scipy._lib._util import check_random_state, rng_integers

    idx = rng_integers(check_random_state(seed), 0, n, (n_boot, n))
    w = np.zeros((n_boot, n))
    step = max(1, 2**18 // n)  # rows per bincount: keep the counted block in cache
    for r0 in range(0, n_boot, step):
        block = idx[r0 : r0 + step]
        rows = block.shape[0]
        w[r0 : r0 + rows] = np.bincount((block + (np.arange(rows) * n)[:, None]).ravel(), minlength=rows * n).reshape(
            rows, n
        )
    idx.setflags(write=False)
    w.setflags(write=False)
    return idx, w


def _boot_indices(n: int, n_boot: int, seed) -> np.ndarray:
    return _resamples(int(n), int(n_boot), seed)[0]


def _interval(
    theta_b: np.ndarray, theta_hat: np.ndarray, theta_jack: np.ndarray | None, confidence: float = 0.95
) -> np.ndarray:
    """scipy's BCa (``theta_jack`` given) or percentile interval per row; (2, q).

    ``theta_b`` (q, B) bootstrap distribution, ``theta_hat`` (q,), ``theta_jack`` (q, n).
    """
    from scipy import stats as sps
    from scipy.special import ndtr, ndtri

    alpha = (1 - confidence) / 2
    q = theta_b.shape[0]
    if theta_jack is None:
        interval = np.broadcast_to(np.array([alpha, 1 - alpha]), (q, 2))
    else:
        B = theta_b.shape[-1]
        th = theta_hat[:, None]
        pct = (np.count_nonzero(theta_b < th, axis=-1) + np.count_nonzero(theta_b <= th, axis=-1)) / (2 * B)
        z0 = ndtri(pct)
        n = float(theta_jack.shape[-1])
        U = (n - 1) * (theta_jack.mean(axis=-1, keepdims=True) - theta_jack)
        a_hat = 1 / 6 * (np.sum(U**3, axis=-1) / n**3) / (np.sum(U**2, axis=-1) / n**2) ** (3 / 2)
        z_alpha = float(ndtri(alpha))
        num1, num2 = z0 + z_alpha, z0 - z_alpha
        interval = np.stack([ndtr(z0 + num1 / (1 - a_hat * num1)), ndtr(z0 + num2 / (1 - a_hat * num2))], axis=-1)
    ci = sps.quantile(theta_b, interval, axis=-1)  # (q, 2)
    return np.round(np.asarray(ci, dtype=float).T, DECIMALS)


def _bootci(x, y=None, func="mean", paired=False, n_boot=2000, seed=0) -> tuple[float, float]:
    """Bootstrap CI (BCa, unrounded); percentile if BCa degenerates; point if no spread.

    ``func="mean"`` (what this module uses) is computed in closed form, equal to
    ``pg.compute_bootci(x, func="mean", method=..., seed=seed)``; anything else goes to pingouin.
    """
    x = np.asarray(x, dtype=float)
    if x.size < 2:
        return (math.nan, math.nan)
    if y is None and np.ptp(x) == 0:
        return (float(x[0]), float(x[0]))
    if y is not None:
        y = np.asarray(y, dtype=float)
        if np.ptp(x) == 0 and np.ptp(y) == 0:
            v = float(func(x, y)) if callable(func) else math.nan
            return (v, v)
    if y is None and func == "mean":
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            n = x.size
            theta_b = np.mean(x[_boot_indices(n, n_boot, seed)], axis=-1)[None, :]
            theta_hat = np.array([np.mean(x)])
            jack = ((x.sum() - x) / (n - 1))[None, :]
            for j in (jack, None):
                ci = _interval(theta_b, theta_hat, j)[:, 0]
                if np.all(np.isfinite(ci)):
                    return (float(ci[0]), float(ci[1]))
        return (math.nan, math.nan)
    for method in ("bca", "per"):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                ci = pg.compute_bootci(
                    x, y=y, func=func, paired=paired, method=method, n_boot=n_boot, decimals=DECIMALS, seed=seed
                )
            except (ValueError, FloatingPointError, ZeroDivisionError):
                continue
        if np.all(np.isfinite(ci)):
            return (float(ci[0]), float(ci[1]))
    return (math.nan, math.nan)


def bootci_tasks(A: np.ndarray, stat, n_boot: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Task-clustered bootstrap CIs of several statistics at once.

    ``A`` is (n_tasks, m): per-task sums; ``stat(S, n)`` maps column sums ``S`` (rows, m) of a
    resample of ``n`` tasks to (rows, q) statistics. The task indices are resampled as
    ``pg.compute_bootci(np.arange(n_tasks), func=..., seed=seed)`` resamples them; each
    resample's column sums are one matrix product, so q statistics cost one bootstrap, and the
    BCa jackknife uses leave-one-out sums. BCa first; outputs where BCa degenerates (no spread)
    get the percentile interval.
    """
    A = np.asarray(A, dtype=float)
    nt = A.shape[0]
    point = np.asarray(stat(A.sum(0, keepdims=True), nt), dtype=float)[0]
    lo, hi = np.full(point.shape, math.nan), np.full(point.shape, math.nan)
    if nt < 2:
        return lo, hi
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        w = _resamples(int(nt), int(n_boot), seed)[1]
        theta_b = np.asarray(stat(w @ A, nt), dtype=float).T  # (q, B)
        total = np.ones((1, nt)) @ A
        theta_hat = np.asarray(stat(total, nt), dtype=float)[0]
        jack = np.asarray(stat(total - A, nt - 1), dtype=float).T  # (q, n)
        for j in (jack, None):
            todo = ~(np.isfinite(lo) & np.isfinite(hi))
            if not todo.any():
                break
            ci = _interval(theta_b[todo], theta_hat[todo], None if j is None else j[todo])
            lo[todo], hi[todo] = ci[0], ci[1]
    # an output with no spread at all across tasks: the interval is the point
    for j in np.flatnonzero(~np.isfinite(lo)):
        if np.isfinite(point[j]):
            colvals = stat(A, 1)[:, j]
            if np.all(colvals == colvals[0]) or np.all(np.isnan(colvals)):
                lo[j] = hi[j] = point[j]
    return lo, hi


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
    """Long table of pass^k for k = 1..trials per arm."""
    tasks = task_table(episodes)
    rows = []
    for key, g in _arm_frame(tasks, ARM_KEYS):
        for k in range(1, int(g["n"].max()) + 1):
            rows.append(
                {
                    **dict(zip(ARM_KEYS, key)),
                    "k": k,
                    "n_tasks": int((g["n"] >= k).sum()),
                    "pass_hat_k": pass_hat_k(g["successes"], g["n"], k),
                }
            )
    return pd.DataFrame(rows, columns=[*ARM_KEYS, "k", "n_tasks", "pass_hat_k"])


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


# ---------------------------------------------------------------------------------- amplification
def _calls_col(channel: str) -> str:
    return "user_tool_calls" if channel in USER_SIDE_CHANNELS else "agent_tool_calls"


def amplification_table(
    episodes: pd.DataFrame, n_boot: int = 2000, seed: int = 0, tasks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per channel: errors per call and per episode, quantized/full ratio with paired task bootstrap.

    ``ratio_per_call`` = (quantized errors / calls) / (full errors / calls), pooled over tasks;
    ``ratio_per_task`` = mean over tasks of the quantized per-episode rate / same for full.
    Calls are agent tool calls, user tool calls for ``user_tool_error``, both for ``all_errors``
    (every recorded error, counted toward the budget or not). CIs: one paired bootstrap over
    tasks (both arms resampled together) for all channels at once.
    """
    tasks = task_table(episodes) if tasks is None else tasks
    base = [c for c in channel_columns(episodes) if c != "hallucinated_tool"]
    channels = channel_columns(episodes) + ["all_errors"]
    rows = []
    for grp, prec, ref, tr in iter_pairs(tasks, CMP_KEYS, "precision", REFERENCE_PRECISION):
        if len(ref) == 0:
            continue
        fn, qn = ref["n"].to_numpy(float), tr["n"].to_numpy(float)
        blocks = []
        for ch in channels:
            if ch == "all_errors":
                fe, qe = (
                    ref[[f"ch_{c}" for c in base]].sum(axis=1).to_numpy(float),
                    tr[[f"ch_{c}" for c in base]].sum(axis=1).to_numpy(float),
                )
                fc = (ref["agent_tool_calls"] + ref["user_tool_calls"]).to_numpy(float)
                qc = (tr["agent_tool_calls"] + tr["user_tool_calls"]).to_numpy(float)
            else:
                fe, qe = ref[f"ch_{ch}"].to_numpy(float), tr[f"ch_{ch}"].to_numpy(float)
                fc, qc = ref[_calls_col(ch)].to_numpy(float), tr[_calls_col(ch)].to_numpy(float)
            blocks.append(np.column_stack([qe, qc, fe, fc, qe / qn, fe / fn]))
        A = np.hstack(blocks)  # (n_tasks, 6 * n_channels)

        def stat(S, n):
            S = S.reshape(S.shape[0], len(channels), 6)
            with np.errstate(all="ignore"):
                per_call = (S[..., 0] / S[..., 1]) / (S[..., 2] / S[..., 3])
                per_task = S[..., 4] / S[..., 5]
            return np.hstack([per_call, per_task])

        point = stat(A.sum(0, keepdims=True), len(A))[0]
        lo, hi = bootci_tasks(A, stat, n_boot=n_boot, seed=seed)
        nc = len(channels)
        for j, ch in enumerate(channels):
            b = A[:, 6 * j : 6 * j + 6].sum(0)
            has_ref = b[2] > 0
            rows.append(
                {
                    **grp,
                    "reference": REFERENCE_PRECISION,
                    "precision": prec,
                    "channel": ch,
                    "n_tasks": len(A),
                    "count_ref": int(b[2]),
                    "count_treat": int(b[0]),
                    "calls_ref": int(b[3]),
                    "calls_treat": int(b[1]),
                    "rate_per_call_ref": b[2] / b[3] if b[3] else math.nan,
                    "rate_per_call_treat": b[0] / b[1] if b[1] else math.nan,
                    "ratio_per_call": point[j] if has_ref else math.nan,
                    "ratio_per_call_ci_low": lo[j] if has_ref else math.nan,
                    "ratio_per_call_ci_high": hi[j] if has_ref else math.nan,
                    "rate_per_episode_ref": b[5] / len(A),
                    "rate_per_episode_treat": b[4] / len(A),
                    "ratio_per_task": point[nc + j] if has_ref else math.nan,
                    "ratio_per_task_ci_low": lo[nc + j] if has_ref else math.nan,
                    "ratio_per_task_ci_high": hi[nc + j] if has_ref else math.nan,
                }
            )
    cols = [
        *CMP_KEYS,
        "reference",
        "precision",
        "channel",
        "n_tasks",
        "count_ref",
        "count_treat",
        "calls_ref",
        "calls_treat",
        "rate_per_call_ref",
        "rate_per_call_treat",
        "ratio_per_call",
        "ratio_per_call_ci_low",
        "ratio_per_call_ci_high",
        "rate_per_episode_ref",
        "rate_per_episode_treat",
        "ratio_per_task",
        "ratio_per_task_ci_low",
        "ratio_per_task_ci_high",
    ]
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------------- stability
def stability_table(
    episodes: pd.DataFrame, error_events: pd.DataFrame, tasks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Spearman rho of per-(task, tool) error counts full vs quantized; share of novel events.

    The correlation runs over the full grid (paired tasks x every tool either arm erred at,
    zeros included): restricted to the union of observed keys, sparse counts would bias rho
    negative even for two draws of one process. A *novel* event is a quantized-arm event at a
    (task, tool, channel) key the full arm of the same (study, model, domain, budget, repair)
    never produced (note: with few trials per task, sampling alone makes some events novel).
    Scope ``all`` uses every channel, ``hallucinated_tool`` only invented_tool + other_side_tool.
    Scored episodes of paired tasks only.
    """
    cols = [
        *CMP_KEYS,
        "reference",
        "precision",
        "scope",
        "n_tasks",
        "n_tools",
        "n_keys",
        "events_ref",
        "events_treat",
        "spearman_r",
        "spearman_p",
        "novel_events",
        "novel_share",
        "novel_keys",
    ]
    tasks = task_table(episodes) if tasks is None else tasks
    if len(error_events) == 0:
        return pd.DataFrame(columns=cols)
    ev = error_events[episodes["scored"].to_numpy()[error_events["episode_row"].to_numpy()]]
    keys = ARM_KEYS + ["task_id", "tool", "channel"]
    cnt = ev.groupby(keys, observed=True).size().rename("count").reset_index()
    # integer codes, sorted like the strings: grids and keys are built from them, not from text
    codes = {}
    names = {}
    for c in ("task_id", "tool", "channel"):
        code, uniq = pd.factorize(cnt[c].astype(str).to_numpy(dtype=object), sort=True)
        codes[c], names[c] = code.astype(np.int64), np.asarray(uniq, dtype=object)
    prec_str = cnt["precision"].astype(str).to_numpy(dtype=object)
    count_v = cnt["count"].to_numpy(float)
    n_tool, n_chan = max(len(names["tool"]), 1), max(len(names["channel"]), 1)
    event_key = (codes["task_id"] * n_tool + codes["tool"]) * n_chan + codes["channel"]
    hall_codes = np.flatnonzero(np.isin(names["channel"], ["invented_tool", "other_side_tool"]))
    is_hall = np.isin(codes["channel"], hall_codes)
    task_lookup = pd.Index(names["task_id"])
    group_rows = {
        k if isinstance(k, tuple) else (k,): np.asarray(ix)
        for k, ix in cnt.groupby(CMP_KEYS, observed=True, sort=True).indices.items()
    }
    rows = []
    empty = np.zeros(0, dtype=np.int64)
    for grp, prec, ref, tr in iter_pairs(tasks, CMP_KEYS, "precision", REFERENCE_PRECISION):
        key = tuple(grp[k] for k in CMP_KEYS)
        gi = group_rows.get(key, empty)
        paired = sorted(set(ref.index.astype(str)))
        # position of each event task among the paired tasks (sorted as strings); -1: not paired
        task_pos = np.full(len(names["task_id"]), -1, dtype=np.int64)
        where = task_lookup.get_indexer(paired)
        task_pos[where[where >= 0]] = np.flatnonzero(where >= 0)
        gi = gi[task_pos[codes["task_id"][gi]] >= 0]
        for scope in ("all", "hallucinated_tool"):
            si = gi if scope == "all" else gi[is_hall[gi]]
            fi = si[prec_str[si] == REFERENCE_PRECISION]
            qi = si[prec_str[si] == str(prec)]
            tools = np.union1d(codes["tool"][fi], codes["tool"][qi])  # sorted codes = sorted names
            tool_pos = np.full(n_tool, -1, dtype=np.int64)
            tool_pos[tools] = np.arange(len(tools))
            size = len(paired) * len(tools)

            def grid_counts(ix):
                pos = task_pos[codes["task_id"][ix]] * len(tools) + tool_pos[codes["tool"][ix]]
                return np.bincount(pos, weights=count_v[ix], minlength=size)

            fv, qv = grid_counts(fi), grid_counts(qi)
            r = p = math.nan
            if size >= 3 and np.ptp(fv) > 0 and np.ptp(qv) > 0:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    c = pg.corr(fv, qv, method="spearman")
                r, p = float(c["r"].iloc[0]), float(c["p_val"].iloc[0])
            novel_mask = ~np.isin(event_key[qi], event_key[fi])
            n_q = int(count_v[qi].sum())
            novel = int(count_v[qi][novel_mask].sum())
            rows.append(
                {
                    **grp,
                    "reference": REFERENCE_PRECISION,
                    "precision": prec,
                    "scope": scope,
                    "n_tasks": len(paired),
                    "n_tools": len(tools),
                    "n_keys": size,
                    "events_ref": int(count_v[fi].sum()),
                    "events_treat": n_q,
                    "spearman_r": r,
                    "spearman_p": p,
                    "novel_events": novel,
                    "novel_share": novel / n_q if n_q else math.nan,
                    "novel_keys": int(novel_mask.sum()),
                }
            )
    return pd.DataFrame(rows, columns=cols)


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
                }
            )
    cols = [*CURVE_KEYS, "source_budget", "K", "n_tasks", "success", "ci_low", "ci_high", "real_run", "real_success"]
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
