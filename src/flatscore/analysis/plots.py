"""PNG figures from the aggregate tables (matplotlib Agg backend; never opens a window).

Each function takes a table from :mod:`flatscore.analysis.stats` and a path, writes the PNG
and returns the path, or returns ``None`` (writing nothing) when the table has nothing to draw.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

MAX_PANELS = 12
PRECISION_ORDER = ["full", "int8", "fp8", "int4"]


def _order(values) -> list:
    vals = sorted({str(v) for v in values})
    return [p for p in PRECISION_ORDER if p in vals] + [v for v in vals if v not in PRECISION_ORDER]


def _grid(n: int, width: float = 4.2, height: float = 3.2):
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _save(fig, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_budget_curves(curves: pd.DataFrame, path: Path) -> Path | None:
    """Success vs error budget K (counterfactual from the Kmax run), CI band per precision;
    real runs at smaller budgets as black-edged markers."""
    if curves is None or len(curves) == 0:
        return None
    panels = list(curves.groupby(["study", "model", "domain", "repair"], observed=True, sort=True))[:MAX_PANELS]
    fig, axes = _grid(len(panels))
    palette = dict(zip(_order(curves["precision"]), sns.color_palette("colorblind", 8)))
    for ax, (key, g) in zip(axes, panels):
        for prec in _order(g["precision"]):
            c = g[g["precision"].astype(str) == prec].sort_values("K")
            col = palette[prec]
            ax.plot(c["K"], c["success"], marker="o", ms=3, color=col, label=prec)
            ax.fill_between(c["K"], c["ci_low"], c["ci_high"], color=col, alpha=0.2, linewidth=0)
            real = c[c["real_run"].astype(bool)]
            ax.scatter(real["K"], real["real_success"], marker="s", s=36, facecolor="none", edgecolor="black", zorder=3)
        study, model, domain, repair = key
        ax.set_title(f"{model} / {domain} / repair={'on' if repair else 'off'}", fontsize=9)
        ax.set_xlabel("error budget K")
        ax.set_ylabel("success (task mean)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=7, title="precision (squares: real runs)", title_fontsize=7, loc="lower right")
    return _save(fig, path)


def plot_amplification(amp: pd.DataFrame, path: Path) -> Path | None:
    """Quantized/full error-rate ratio per channel (per episode, paired task bootstrap CI) at each
    group's largest budget, repair off where present."""
    if amp is None or len(amp) == 0:
        return None
    a = amp.copy()
    a = a[np.isfinite(a["ratio_per_task"].astype(float))]
    if len(a) == 0:
        return None
    if (a["repair"].astype(bool) == False).any():  # noqa: E712
        a = a[a["repair"].astype(bool) == False]  # noqa: E712
    kmax = a.groupby(["study", "model", "domain"], observed=True)["budget"].transform("max")
    a = a[a["budget"] == kmax]
    panels = list(a.groupby(["study", "model", "domain"], observed=True, sort=True))[:MAX_PANELS]
    fig, axes = _grid(len(panels), width=6.0)
    palette = dict(zip(_order(a["precision"]), sns.color_palette("colorblind", 8)[1:]))
    for ax, (key, g) in zip(axes, panels):
        chans = list(dict.fromkeys(g["channel"].astype(str)))
        precs = _order(g["precision"])
        w = 0.8 / max(len(precs), 1)
        x = np.arange(len(chans))
        for i, prec in enumerate(precs):
            s = g[g["precision"].astype(str) == prec].set_index("channel").reindex(chans)
            y = s["ratio_per_task"].to_numpy(float)
            err = np.vstack(
                [y - s["ratio_per_task_ci_low"].to_numpy(float), s["ratio_per_task_ci_high"].to_numpy(float) - y]
            )
            err = np.where(np.isfinite(err), np.clip(err, 0, None), 0)
            ax.bar(
                x + (i - (len(precs) - 1) / 2) * w,
                np.nan_to_num(y),
                w,
                yerr=err,
                capsize=2,
                color=palette[prec],
                label=f"{prec} / full",
            )
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(x)
        ax.set_xticklabels(chans, rotation=35, ha="right", fontsize=7)
        ax.set_ylabel("error-rate ratio (per episode)")
        ax.set_title(f"{key[1]} / {key[2]} / K={int(g['budget'].iloc[0])}", fontsize=9)
        ax.legend(fontsize=7, loc="upper left")
    return _save(fig, path)


def plot_repair(rep: pd.DataFrame, path: Path) -> Path | None:
    """Repair effect (on - off success, paired bootstrap CI) per (model, precision, domain, budget)."""
    if rep is None or len(rep) == 0:
        return None
    r = rep.copy()
    r["label"] = (
        r["model"].astype(str)
        + " "
        + r["precision"].astype(str)
        + " "
        + r["domain"].astype(str)
        + " K="
        + r["budget"].astype(int).astype(str)
    )
    r = r.sort_values(["model", "domain", "budget", "precision"]).reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(r) + 1.5))
    y = np.arange(len(r))
    d = r["diff"].to_numpy(float)
    err = np.vstack([d - r["diff_ci_low"].to_numpy(float), r["diff_ci_high"].to_numpy(float) - d])
    err = np.where(np.isfinite(err), np.clip(err, 0, None), 0)
    colors = ["tab:green" if v >= 0 else "tab:red" for v in d]
    ax.barh(y, d, xerr=err, color=colors, capsize=3, alpha=0.8)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(y)
    ax.set_yticklabels(r["label"], fontsize=8)
    ax.set_xlabel("success with repair - without (task mean, 95% CI)")
    ax.set_title("reflexive repair ablation", fontsize=10)
    return _save(fig, path)
