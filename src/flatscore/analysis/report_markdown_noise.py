"""The summary's sections on the noise floor, exact paired tests and first divergence.

Split from :mod:`flatscore.analysis.report_markdown` (the sections that existed before) so each
file keeps one job and stays small; every number is read from the aggregate's tables. Each table
shows every group's largest budget (smaller budgets repeat the same episodes cut shorter); the
CSVs hold every budget.
"""

from __future__ import annotations

import pandas as pd

from flatscore.analysis.report_markdown import _ci, _fmt, _pct, md_table


def _kmax(df: pd.DataFrame) -> pd.DataFrame:
    if len(df) == 0:
        return df
    kmax = df.groupby(["study", "model", "domain", "repair"], observed=True)["budget"].transform("max")
    return df[df["budget"] == kmax]


def _p(v) -> str:
    return _fmt(v, 3)


def render_noise_sections(t: dict[str, pd.DataFrame], margin: float) -> tuple[list[str], list[str]]:
    """(lines of the new sections, what was skipped and why)."""
    lines: list[str] = []
    skipped: list[str] = []
    lines += _noise_floor(t["noise_floor"], skipped)
    lines += _exact(t, margin, skipped)
    lines += _divergence(t, skipped)
    return lines, skipped


def _noise_floor(nf: pd.DataFrame, skipped: list[str]) -> list[str]:
    L = ["## A/A noise floor (flip rate and ICC: quantized vs full beside full vs full)", ""]
    if len(nf) == 0:
        skipped.append("noise floor: no quantized or replicate arm paired with full precision")
        return L + ["No arm is paired with full precision: not computed.", ""]
    if not (nf["arm"] == "full (A/A)").any():
        skipped.append("A/A noise floor: no replicates (config `replicates` is 0); no arm can be called lossless")
        L += ["No A/A replicates were run (`replicates: 0`): the flip rates below have no floor to compare with.", ""]
    n = _kmax(nf).assign(
        flip_ci=lambda f: [_ci(a, b) for a, b in zip(f["flip_ci_low"], f["flip_ci_high"])],
        icc_ci=lambda f: [_ci(a, b, False) for a, b in zip(f["icc_ci_low"], f["icc_ci_high"])],
    )
    cols = ["model", "domain", "budget", "repair", "arm", "n_pairs", "gap", "flip_rate", "flip_ci", "icc", "icc_ci"]
    heads = ["model", "domain", "K", "repair", "arm", "pairs", "gap pts", "flip %", "95% CI", "ICC(1,1)", "95% CI"]
    cols += ["aa_gap", "aa_flip_rate", "tost_p", "flip_within_aa", "lossless"]
    heads += ["A/A gap pts", "A/A flip %", "TOST p", "flips within A/A", "lossless"]
    fmt = {"gap": _pct, "flip_rate": _pct, "aa_gap": _pct, "aa_flip_rate": _pct, "flip_ci": str, "icc_ci": str}
    fmt |= {"tost_p": _p, "flip_within_aa": _yes, "lossless": str, "arm": str}
    n = n.assign(lossless=_verdicts(n, "lossless"))
    L += [md_table(n, cols, heads, fmt=fmt), ""]
    L += [
        "Flip rate: share of (task, trial) episode pairs whose verdict differs from full precision's (Wilson "
        "interval). Lossless = TOST-equivalent and a flip rate at most the A/A interval's upper end; "
        "floor (ceiling): both arms fail (pass) every episode, so no verdict.",
        "",
    ]
    return L


def _verdicts(df: pd.DataFrame, column: str) -> list[str]:
    """yes / no, or the bound (floor, ceiling) where the row has one: a bound gets no verdict."""
    bounds = df["bound"].fillna("") if "bound" in df.columns else [""] * len(df)
    return [b if b else _yes(v) for v, b in zip(df[column], bounds)]


def _yes(v) -> str:
    if isinstance(v, float) and v != v:
        return "–"
    return "yes" if bool(v) else "no"


def _exact(t: dict[str, pd.DataFrame], margin: float, skipped: list[str]) -> list[str]:
    L = ["## Exact paired tests (episode pairs matched by task and trial seed; Holm over the whole grid)", ""]
    mc = t["mcnemar"]
    if len(mc) == 0:
        skipped.append("McNemar: no quantized arm with matching full-precision episodes")
        L += ["No quantized arm has matching full-precision episodes: not computed.", ""]
    else:
        cols = ["model", "domain", "budget", "repair", "precision", "n_pairs", "both_pass", "ref_only", "treat_only"]
        cols += ["both_fail", "mcnemar_p", "mcnemar_p_holm"]
        heads = ["model", "domain", "K", "repair", "precision", "pairs", "both pass", "full only", "quant only"]
        heads += ["both fail", "McNemar exact p", "Holm"]
        L += [md_table(_kmax(mc), cols, heads, fmt={"mcnemar_p": _p, "mcnemar_p_holm": _p}), ""]
    cq = t["cochran"]
    if len(cq) == 0:
        skipped.append("Cochran's Q: no group with three or more precisions")
    else:
        cols = ["model", "domain", "budget", "repair", "precisions", "n_pairs", "cochran_Q", "cochran_p"]
        cols += ["cochran_p_holm"]
        heads = ["model", "domain", "K", "repair", "precisions", "pairs", "Q", "p", "Holm"]
        L += ["Cochran's Q across precisions:", "", md_table(_kmax(cq), cols, heads, fmt={"precisions": str}), ""]
    tost = t["tost"]
    if len(tost):
        cols = ["model", "domain", "budget", "repair", "precision", "metric", "n_tasks", "value_ref", "value_treat"]
        cols += ["diff", "tost_p", "tost_p_holm", "equivalent_holm"]
        heads = ["model", "domain", "K", "repair", "precision", "metric", "tasks", "full %", "quant %", "diff pts"]
        heads += [f"TOST p (±{_pct(margin)} pts)", "Holm", "equivalent (Holm)"]
        fmt = {"value_ref": _pct, "value_treat": _pct, "diff": _pct, "metric": str, "tost_p": _p}
        L += ["TOST on pass^1 and pass^k (per-task values; the curve over margins: tost_curve.csv):", ""]
        tost = _kmax(tost)
        tost = tost.assign(equivalent_holm=_verdicts(tost, "equivalent_holm"))
        L += [md_table(tost, cols, heads, fmt=fmt | {"tost_p_holm": _p, "equivalent_holm": str}), ""]
    iv = t["intervals"]
    if len(iv):
        iv = _kmax(iv).assign(
            wilson=lambda f: [_ci(a, b) for a, b in zip(f["wilson_low"], f["wilson_high"])],
            cp=lambda f: [_ci(a, b) for a, b in zip(f["cp_low"], f["cp_high"])],
        )
        cols = ["model", "domain", "budget", "repair", "precision", "n_episodes", "success", "wilson", "cp", "small"]
        heads = ["model", "domain", "K", "repair", "precision", "episodes", "success %", "Wilson 95%"]
        heads += ["Clopper-Pearson 95%", "small cell"]
        L += ["Episode-level success with small-sample intervals (read Clopper-Pearson for small cells):", ""]
        L += [md_table(iv, cols, heads, fmt={"success": _pct, "wilson": str, "cp": str}), ""]
    return L


def _divergence(t: dict[str, pd.DataFrame], skipped: list[str]) -> list[str]:
    L = ["## First divergence (where a quantized trajectory first leaves full precision's)", ""]
    s = t["divergence_summary"]
    if len(s) == 0:
        skipped.append("first divergence: no quantized episode with a full-precision twin")
        return L + ["No quantized episode has a full-precision twin: not computed.", ""]
    s = _kmax(s).assign(
        turns=lambda f: [f"{_fmt(a, 0)} [{_fmt(b, 0)}, {_fmt(c, 0)}]" for a, b, c in zip(*(f[k] for k in TURN_COLS))],
        fail_ci=lambda f: [_ci(a, b) for a, b in zip(f["failures_ci_low"], f["failures_ci_high"])],
    )
    cols = ["model", "domain", "budget", "repair", "precision", "n_pairs", "n_diverged", "turns", "share_tool_call"]
    cols += ["share_error_follows", "n_quant_failures", "share_failures_at_divergence", "fail_ci"]
    heads = ["model", "domain", "K", "repair", "precision", "pairs", "diverged", "turn median [q1, q3]"]
    heads += ["tool call %", "error follows %", "failures", "failures at a divergence %", "95% CI"]
    fmt = {"turns": str, "share_tool_call": _pct, "share_error_follows": _pct, "fail_ci": str}
    L += [md_table(s, cols, heads, fmt=fmt | {"share_failures_at_divergence": _pct}), ""]
    c = t["divergence_channels"]
    if len(c):
        c = _kmax(c).assign(ci=lambda f: [_ci(a, b) for a, b in zip(f["ci_low"], f["ci_high"])])
        cols = ["model", "domain", "budget", "repair", "precision", "channel", "n_first_errors", "n_amplified"]
        cols += ["share_amplified", "ci"]
        heads = ["model", "domain", "K", "repair", "precision", "channel", "first errors", "amplified", "share %"]
        heads += ["95% CI"]
        L += [
            "First error after a divergence, by channel: how often full precision also erred in that channel at "
            "that task (an amplification, not a new kind of error):",
            "",
            md_table(c, cols, heads, fmt={"share_amplified": _pct, "ci": str}),
            "",
        ]
    else:
        skipped.append("divergence channels: no error followed a divergence")
    return L


TURN_COLS = ("turn_median", "turn_q1", "turn_q3")
