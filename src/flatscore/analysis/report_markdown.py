"""The Markdown summary of an aggregate (``summary.md``): every number read from the tables.

Split from :mod:`flatscore.analysis.report` (which computes and writes the tables and figures)
because rendering the prose is its own job, and the larger one.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from flatscore.analysis.arms import render_arms
from flatscore.analysis.load import REFERENCE_PRECISION, StudyData
from flatscore.analysis.story import study_story


def _fmt(v, nd: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v):
            return "–" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return f"{v:.{nd}f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def _pct(v) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{100 * v:.1f}"


def md_table(df: pd.DataFrame, cols: list[str], headers: list[str] | None = None, fmt: dict | None = None) -> str:
    fmt = fmt or {}
    headers = headers or cols
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(fmt.get(c, _fmt)(r[c]) for c in cols) + " |")
    return "\n".join(out)


def _ci(lo, hi, pct: bool = True) -> str:
    f = _pct if pct else (lambda v: _fmt(v, 2))
    return f"[{f(lo)}, {f(hi)}]"


def render_summary(
    data: StudyData,
    t: dict[str, pd.DataFrame],
    figs: dict[str, Path | None],
    margin: float,
    more: tuple[list[str], list[str]] = ([], []),
) -> str:
    """The summary; ``more`` = (lines, skipped) of further sections, placed after the tables."""
    ep = data.episodes
    skipped: list[str] = []
    L: list[str] = ["# flatscore aggregate summary", ""]
    n_unscored = int((~ep["scored"]).sum())
    L += [
        f"{len(data.cells)} cells, {len(ep)} episodes ({len(ep) - n_unscored} scored, {n_unscored} unscored), "
        f"{ep['task_id'].nunique()} tasks, {len(data.error_events)} error events. Precisions: "
        f"{', '.join(sorted(map(str, ep['precision'].unique())))}; budgets: "
        f"{', '.join(map(str, sorted(map(int, ep['budget'].unique()))))}; repair: "
        f"{', '.join(sorted({'on' if r else 'off' for r in ep['repair'].unique()}))}.",
        "",
    ]

    # the answer first, then what the arms ran on, then the plots a reader looks at first, then the tables behind them
    L += study_story(t, margin)
    if "arms" in t:
        L += render_arms(t["arms"])
    L += ["## Figures", ""]
    for k, p in figs.items():
        if p is None:
            skipped.append(f"{k}: nothing to draw")
        else:
            L.append(f"![{k}](plots/{Path(p).name})")
    L += [""]

    # success with unscored beside
    s = t["success"]
    L += ["## Success per arm (task-clustered, 95% bootstrap CI; unscored episodes beside)", ""]
    s2 = s.assign(ci=[_ci(a, b) for a, b in zip(s["ci_low"], s["ci_high"])])
    L += [
        md_table(
            s2,
            [
                "model",
                "domain",
                "precision",
                "budget",
                "repair",
                "n_tasks",
                "n_scored",
                "success",
                "ci",
                "n_infrastructure_error",
                "n_malformed_dropped",
            ],
            [
                "model",
                "domain",
                "precision",
                "K",
                "repair",
                "tasks",
                "scored",
                "success %",
                "95% CI",
                "infra errors",
                "malformed dropped",
            ],
            fmt={"success": _pct, "ci": str},
        ),
        "",
    ]
    infra = int(s["n_infrastructure_error"].sum())
    L += [
        f"Infrastructure failures: {infra} episodes ({_pct(infra / max(len(ep), 1))}% of all), malformed-dropped: "
        f"{int(s['n_malformed_dropped'].sum())}; both are excluded from every score above and below.",
        "",
    ]

    # score gap at Kmax vs smallest budget
    c = t["comparisons"]
    L += ["## Score gap (quantized - full), largest vs smallest budget", ""]
    if len(c) == 0:
        skipped.append("precision comparisons: no quantized arm with a matching full-precision arm")
        L += ["No quantized arm has a matching full-precision arm: no comparison computed.", ""]
    else:
        rows = []
        for key, g in c.groupby(["study", "model", "domain", "repair", "precision"], observed=True, sort=True):
            g = g.sort_values("budget")
            for lab, r in (("largest", g.iloc[-1]), ("smallest", g.iloc[0])):
                if lab == "smallest" and len(g) == 1:
                    continue
                rows.append(
                    {
                        "model": key[1],
                        "domain": key[2],
                        "repair": key[3],
                        "precision": key[4],
                        "which": lab,
                        "budget": int(r["budget"]),
                        "n_tasks": int(r["n_tasks"]),
                        "full": r["success_ref"],
                        "quant": r["success_treat"],
                        "gap": r["diff"],
                        "ci": _ci(r["diff_ci_low"], r["diff_ci_high"]),
                        "p_holm": r["wilcoxon_p_holm"],
                        "tost_p": r["tost_p"],
                        # at 0% vs 0% (or 100% vs 100%) there is nothing to call equivalent
                        "equivalent": r["bound"] or bool(r["equivalent"]),
                    }
                )
        gt = pd.DataFrame(rows)
        L += [
            md_table(
                gt,
                [
                    "model",
                    "domain",
                    "repair",
                    "precision",
                    "which",
                    "budget",
                    "n_tasks",
                    "full",
                    "quant",
                    "gap",
                    "ci",
                    "p_holm",
                    "tost_p",
                    "equivalent",
                ],
                [
                    "model",
                    "domain",
                    "repair",
                    "precision",
                    "which",
                    "K",
                    "tasks",
                    "full %",
                    "quant %",
                    "gap pts",
                    "gap 95% CI",
                    "Wilcoxon p (Holm)",
                    f"TOST p (±{_pct(margin)} pts)",
                    "equivalent",
                ],
                fmt={"full": _pct, "quant": _pct, "gap": _pct, "ci": str, "which": str},
            ),
            "",
        ]
        if c["budget"].nunique() == 1:
            skipped.append("real-run gap at a smaller budget: a single budget was run (see the counterfactual curve)")
        # counterfactual gap at the smallest K from the budget curves
        bc = t["budget_curves"]
        if len(bc):
            k1 = int(bc["K"].min())
            cf = bc[bc["K"] == min(2, int(bc["K"].max()))] if (bc["K"] == 2).any() else bc[bc["K"] == k1]
            kk = int(cf["K"].iloc[0])
            cf = cf.assign(precision=cf["precision"].astype(str))
            full = cf[cf["precision"] == REFERENCE_PRECISION].set_index(["study", "model", "domain", "repair"])[
                "success"
            ]
            lines = []
            for _, r in cf[cf["precision"] != REFERENCE_PRECISION].iterrows():
                k = (r["study"], r["model"], r["domain"], r["repair"])
                if k in full.index:
                    lines.append(
                        f"- {r['model']} / {r['domain']} / repair {'on' if r['repair'] else 'off'} / "
                        f"{r['precision']}: counterfactual gap at K={kk} (from the K={int(r['source_budget'])} "
                        f"run) {_pct(r['success'] - full.loc[k])} points"
                    )
            if lines:
                L += [f"Counterfactual gaps at K={kk} from the largest-budget runs:", "", *lines, ""]

    # channel ratios
    a = t["amplification"]
    L += ["## Per-channel amplification (quantized / full)", ""]
    if len(a) == 0:
        skipped.append("amplification: no quantized/full pair")
        L += ["No quantized/full pair: not computed.", ""]
    else:
        kmax = a.groupby(["study", "model", "domain", "repair"], observed=True)["budget"].transform("max")
        a2 = a[(a["budget"] == kmax)]
        a2 = a2.assign(
            ci_task=[_ci(x, y, False) for x, y in zip(a2["ratio_per_task_ci_low"], a2["ratio_per_task_ci_high"])],
            ci_call=[_ci(x, y, False) for x, y in zip(a2["ratio_per_call_ci_low"], a2["ratio_per_call_ci_high"])],
        )
        # a ratio of two floors (or of two error-free arms) says nothing: name the bound instead
        withheld = [b in ("floor", "no errors") for b in a2["bound"]]
        a2 = a2.assign(
            ratio_per_task=[b if w else v for b, w, v in zip(a2["bound"], withheld, a2["ratio_per_task"])],
            ratio_per_call=[b if w else v for b, w, v in zip(a2["bound"], withheld, a2["ratio_per_call"])],
        )
        L += [
            md_table(
                a2,
                [
                    "model",
                    "domain",
                    "budget",
                    "repair",
                    "precision",
                    "channel",
                    "count_ref",
                    "count_treat",
                    "ratio_per_task",
                    "ci_task",
                    "ratio_per_call",
                    "ci_call",
                ],
                [
                    "model",
                    "domain",
                    "K",
                    "repair",
                    "precision",
                    "channel",
                    "errors full",
                    "errors quant",
                    "ratio /episode",
                    "95% CI",
                    "ratio /call",
                    "95% CI",
                ],
                fmt={
                    "ci_task": str,
                    "ci_call": str,
                    "ratio_per_task": lambda v: _fmt(v, 2),
                    "ratio_per_call": lambda v: _fmt(v, 2),
                },
            ),
            "",
        ]
    st = t["stability"]
    if len(st):
        kmax = st.groupby(["study", "model", "domain", "repair"], observed=True)["budget"].transform("max")
        st2 = st[st["budget"] == kmax]
        L += [
            "Failure-mode stability (Spearman rho of per-(task, tool) error counts; novel = quantized events at "
            "(task, tool, channel) keys the full arm never hit):",
            "",
            md_table(
                st2,
                [
                    "model",
                    "domain",
                    "budget",
                    "repair",
                    "precision",
                    "scope",
                    "spearman_r",
                    "spearman_p",
                    "events_ref",
                    "events_treat",
                    "novel_share",
                ],
                [
                    "model",
                    "domain",
                    "K",
                    "repair",
                    "precision",
                    "scope",
                    "rho",
                    "p",
                    "events full",
                    "events quant",
                    "novel share",
                ],
                fmt={"novel_share": lambda v: _pct(v) + "%"},
            ),
            "",
        ]
    elif len(a):
        skipped.append("failure-mode stability: no error events")

    # repair
    r = t["repair"]
    L += ["## Reflexive repair (on - off)", ""]
    if len(r) == 0:
        skipped.append("repair ablation: no cell pairs with repair on and off")
        L += ["No repair-on/off pair of cells: ablation skipped.", ""]
    else:
        r2 = r.assign(ci=[_ci(x, y) for x, y in zip(r["diff_ci_low"], r["diff_ci_high"])])
        L += [
            md_table(
                r2,
                [
                    "model",
                    "domain",
                    "precision",
                    "budget",
                    "n_tasks",
                    "success_off",
                    "success_on",
                    "diff",
                    "ci",
                    "wilcoxon_p_holm",
                ],
                [
                    "model",
                    "domain",
                    "precision",
                    "K",
                    "tasks",
                    "off %",
                    "on %",
                    "effect pts",
                    "95% CI",
                    "Wilcoxon p (Holm)",
                ],
                fmt={"success_off": _pct, "success_on": _pct, "diff": _pct, "ci": str},
            ),
            "",
        ]

    # counterfactual agreement
    cf = t["counterfactual"]
    L += ["## Budget counterfactual vs real runs", ""]
    if len(cf) == 0:
        skipped.append("counterfactual agreement: no real run at a budget below the largest of its group")
        L += ["No real run at a smaller budget exists for any cell group: agreement not checked.", ""]
    else:
        L += [
            md_table(
                cf,
                [
                    "model",
                    "domain",
                    "precision",
                    "repair",
                    "source_budget",
                    "budget",
                    "n",
                    "agreement",
                    "errors_agreement",
                    "predicted_success",
                    "real_success",
                ],
                [
                    "model",
                    "domain",
                    "precision",
                    "repair",
                    "from K",
                    "real K",
                    "matched",
                    "reward agreement",
                    "error-count agreement",
                    "predicted %",
                    "real %",
                ],
                fmt={"predicted_success": _pct, "real_success": _pct},
            ),
            "",
        ]
        tot_n, tot_a = int(cf["n"].sum()), int(cf["n_agree"].sum())
        L += [
            f"Overall: {tot_a} of {tot_n} matched episodes agree ({_fmt(tot_a / tot_n if tot_n else math.nan, 4)}).",
            "",
        ]

    # power
    pw = t["power"]
    L += ["## Power (paired t-test on per-task rates, 80% power, alpha 0.05)", ""]
    if len(pw) == 0:
        skipped.append("power analysis: no quantized/full pair with >= 2 tasks")
        L += ["Not computed (no quantized/full pair with at least 2 tasks).", ""]
    else:
        kmax = pw.groupby(["study", "model", "domain", "repair"], observed=True)["budget"].transform("max")
        p2 = pw[pw["budget"] == kmax]
        L += [
            md_table(
                p2,
                [
                    "model",
                    "domain",
                    "budget",
                    "repair",
                    "precision",
                    "kind",
                    "target",
                    "sd_diff",
                    "n_tasks_now",
                    "power_now",
                    "n_tasks_needed",
                    "episodes_needed_per_arm",
                ],
                [
                    "model",
                    "domain",
                    "K",
                    "repair",
                    "precision",
                    "kind",
                    "target",
                    "sd(diff)",
                    "tasks now",
                    "power now",
                    "tasks needed",
                    "episodes/arm needed",
                ],
                fmt={"n_tasks_needed": lambda v: _fmt(v, 0), "episodes_needed_per_arm": lambda v: _fmt(v, 0)},
            ),
            "",
        ]

    L += more[0]
    skipped += more[1]
    L += ["## Skipped", ""]
    L += [f"- {x}" for x in skipped] if skipped else ["Nothing skipped: every part of the design was present."]
    return "\n".join(L) + "\n"
