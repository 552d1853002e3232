"""The study's question answered for one run, in a few sentences with the numbers.

A reader opens a report to learn whether the quantized model is as good as full precision, and
whether a flat score at a loose error budget hides damage that a tight budget shows. The tables
answer that across dozens of rows; this module reads them and writes the answer first: per model
and domain (repair off), the gap at the loosest and the tightest budget, the channels whose
errors the quantized arm multiplied, and what repair changed.
"""

from __future__ import annotations

import math

import pandas as pd

from flatscore.analysis.bounds import CEILING, FLOOR


def _pts(v: float) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{100 * v:+.1f}"


def _pct(v: float) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{100 * v:.1f}%"


def _verdict(row: pd.Series, margin: float) -> str:
    """One clause: the bound, equivalence, a significant gap, or an inconclusive one."""
    if row["bound"] == FLOOR:
        return "both at 0%: a floor, nothing to compare"
    if row["bound"] == CEILING:
        return "both at 100%: a ceiling"
    ci = f"95% CI [{_pts(row['diff_ci_low'])}, {_pts(row['diff_ci_high'])}]"
    if bool(row["equivalent_holm"]):
        return f"flat: equivalent within ±{100 * margin:.1f} points (TOST, Holm), {ci}"
    if bool(row["significant_holm"]):
        return f"a significant gap (Wilcoxon, Holm), {ci}"
    return f"inconclusive at {int(row['n_tasks'])} tasks: neither equivalent nor significantly different, {ci}"


def _gap_sentence(row: pd.Series, margin: float) -> str:
    return (
        f"at K={int(row['budget'])} it solves {_pct(row['success_treat'])} against "
        f"{_pct(row['success_ref'])} at full precision ({_pts(row['diff'])} points; {_verdict(row, margin)})"
    )


def _repair_off_at(df: pd.DataFrame, model: str, domain: str, budget: int) -> pd.DataFrame:
    """The rows of one (model, domain, budget) with repair off: what the answer reads per group."""
    return df[
        (df["model"].astype(str) == model)
        & (df["domain"].astype(str) == domain)
        & (df["budget"] == budget)
        & ~df["repair"].astype(bool)
    ]


def _amplified(amp: pd.DataFrame, precision: str) -> str:
    rows = amp[(amp["precision"].astype(str) == precision) & (amp["channel"] != "all_errors")]
    if len(rows) and (rows["bound"].fillna("") == FLOOR).all():
        # no ratio at the floor; the counts still say which mistakes the quantized arm made more often
        moved = rows[(rows["count_ref"] + rows["count_treat"]) > 0].copy()
        moved = moved[moved["channel"] != "hallucinated_tool"]  # the sum of two channels already listed
        moved["change"] = (moved["count_treat"] - moved["count_ref"]).abs()
        parts = [
            f"{r['channel']} {int(r['count_ref'])} -> {int(r['count_treat'])}"
            for _, r in moved.sort_values("change", ascending=False, kind="stable").head(4).iterrows()
        ]
        return "no ratio at the floor; error counts, full -> " + precision + ": " + (", ".join(parts) or "none")
    up = rows[rows["ratio_per_task_ci_low"] > 1.0].sort_values("ratio_per_task", ascending=False)
    down = rows[rows["ratio_per_task_ci_high"] < 1.0]
    parts = [f"{r['channel']} x{r['ratio_per_task']:.2f}" for _, r in up.iterrows()]
    text = "amplified (per-episode ratio, 95% CI above 1): " + (", ".join(parts) if parts else "none")
    if len(down):
        text += "; reduced: " + ", ".join(str(c) for c in down["channel"])
    return text


def _power_sentence(power: pd.DataFrame | None, model: str, domain: str, budget: int) -> str:
    """What gap this run could have detected: an inconclusive verdict is only news beside it."""
    if power is None or len(power) == 0:
        return ""
    rows = _repair_off_at(power, model, domain, budget)
    rows = rows[rows["kind"] == "success_gap"]
    if len(rows) == 0:
        return ""
    worst = rows.sort_values("power_now").groupby("target", sort=True).first().reset_index()
    parts = [
        f"{100 * r['target']:.0f} points {100 * r['power_now']:.0f}%"
        + ("" if r["power_now"] >= 0.8 else f" ({r['n_tasks_needed']:.0f} tasks for 80%)")
        for _, r in worst.iterrows()
        if math.isfinite(r["power_now"])
    ]
    if not parts:
        return ""
    n_now = int(rows["n_tasks_now"].max())
    return f"- Power at K={budget} with {n_now} tasks (paired, alpha 0.05) to detect a gap of " + "; ".join(parts) + "."


def _diverged(div: pd.DataFrame | None, model: str, domain: str, budget: int, precision: str) -> str:
    """Where the quantized trajectories first left full precision's: news even where no verdict is."""
    if div is None or len(div) == 0:
        return ""
    rows = _repair_off_at(div, model, domain, budget)
    rows = rows[rows["precision"].astype(str) == precision]
    if len(rows) == 0:
        return ""
    r = rows.iloc[0]
    text = (
        f"  Trajectories at K={budget}: {int(r['n_diverged'])}/{int(r['n_pairs'])} episode pairs leave full precision's"
    )
    if int(r["n_diverged"]):
        text += f" (first divergence at message {r['turn_median']:.0f}, median)"
    return text + "."


def study_story(t: dict[str, pd.DataFrame], margin: float) -> list[str]:
    """Markdown lines of the answer for this run; empty where no quantized/full pair exists."""
    comparisons = t["comparisons"]
    if len(comparisons) == 0:
        return []
    lines = ["## The answer for this run", ""]
    off = comparisons[~comparisons["repair"].astype(bool)]
    if len(off) == 0:
        off = comparisons
    amp = t["amplification"]
    repair = t["repair"]
    for (model, domain), group in off.groupby(["model", "domain"], observed=True, sort=True):
        loose_k, tight_k = int(group["budget"].max()), int(group["budget"].min())
        lines.append(f"**{model} on {domain}.**")
        for precision, rows in group.groupby("precision", observed=True, sort=True):
            loose = rows[rows["budget"] == loose_k].iloc[0]
            sentence = f"- {str(precision)}: {_gap_sentence(loose, margin)}"
            if tight_k != loose_k:
                tight = rows[rows["budget"] == tight_k].iloc[0]
                sentence += f"; {_gap_sentence(tight, margin)}"
            lines.append(sentence + ".")
            arm_amp = _repair_off_at(amp, str(model), str(domain), loose_k)
            if len(arm_amp):
                lines.append(f"  Errors at K={loose_k}: {_amplified(arm_amp, str(precision))}.")
            diverged = _diverged(t.get("divergence_summary"), str(model), str(domain), loose_k, str(precision))
            if diverged:
                lines.append(diverged)
        power = _power_sentence(t.get("power"), str(model), str(domain), loose_k)
        if power:
            lines.append(power)
        rep = repair[
            (repair["model"].astype(str) == str(model))
            & (repair["domain"].astype(str) == str(domain))
            & (repair["budget"] == loose_k)
        ]
        if len(rep):
            changes = ", ".join(f"{r['precision']} {_pts(r['diff'])}" for _, r in rep.iterrows())
            lines.append(f"- Repair on vs off at K={loose_k} (points of success): {changes}.")
        lines.append("")
    return lines
