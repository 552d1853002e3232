"""Figures of the noise floor, the TOST curve and the first divergence (from their aggregate tables).

Like :mod:`flatscore.analysis.plots`: each function writes one PNG and returns its path, or
returns ``None`` (writing nothing) when its table has nothing to draw. Each figure shows every
group's largest budget with repair off where present: smaller budgets repeat the same episodes
cut shorter.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from flatscore.analysis.noise_floor import AA
from flatscore.analysis.plots import MAX_PANELS, _grid, _save, plt, sns


def _largest_budget(df: pd.DataFrame) -> pd.DataFrame:
    """Rows at their (study, model, domain)'s largest budget, repair off where present."""
    if (~df["repair"].astype(bool)).any():
        df = df[~df["repair"].astype(bool)]
    kmax = df.groupby(["study", "model", "domain"], observed=True)["budget"].transform("max")
    return df[df["budget"] == kmax]


def plot_first_divergence(pairs: pd.DataFrame, channels: pd.DataFrame, path) -> object:
    """Left: where quantized trajectories first leave full precision's (message index), by what the
    quantized side did there; right: per channel, the share of first errors after a divergence that
    amplify an error full precision also made at that task (Wilson 95% CI)."""
    if pairs is None or not pairs["diverged"].any():
        return None
    d = _largest_budget(pairs[pairs["diverged"].astype(bool)])
    aa = d[d["precision"] == AA]
    d = d[d["precision"] != AA]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
    kinds = sorted(d["kind"].astype(str).unique())
    bins = np.arange(max(d["turn"].max() if len(d) else 0, aa["turn"].max() if len(aa) else 0) + 2) - 0.5
    if len(d):
        left.hist([d.loc[d["kind"] == k, "turn"] for k in kinds], bins=bins, stacked=True, label=kinds)
    if len(aa):
        left.hist(aa["turn"], bins=bins, histtype="step", color="black", lw=1.2, label="full vs full (A/A)")
    left.set_xlabel("first divergence (message index)")
    left.set_ylabel("episode pairs")
    left.set_title("first divergence, quantized vs full", fontsize=9)
    left.legend(fontsize=7, title="quantized side did", title_fontsize=7)
    c = _largest_budget(channels) if len(channels) else channels
    if len(c):
        pooled = c.groupby(["precision", "channel"], observed=True)[["n_first_errors", "n_amplified"]].sum()
        pooled = pooled.reset_index()
        share = pooled["n_amplified"] / pooled["n_first_errors"]
        labels = pooled["precision"].astype(str) + " " + pooled["channel"].astype(str)
        y = np.arange(len(pooled))
        right.barh(y, share, color=sns.color_palette("colorblind", 8)[1])
        for i, (n, k) in enumerate(zip(pooled["n_first_errors"], pooled["n_amplified"])):
            right.text(min(share.iloc[i] + 0.02, 0.9), i, f"{k}/{n}", va="center", fontsize=7)
        right.set_yticks(y)
        right.set_yticklabels(labels, fontsize=7)
        right.set_xlim(0, 1)
    right.set_xlabel("share amplifying a full-precision error")
    right.set_title("first error after the divergence, by channel", fontsize=9)
    return _save(fig, path)


def plot_noise_floor(table: pd.DataFrame, path) -> object:
    """Flip rate (share of (task, trial) pairs whose verdict differs from full precision's) with its
    Wilson 95% CI, the A/A replicate beside each quantized arm."""
    if table is None or len(table) == 0:
        return None
    t = _largest_budget(table)
    panels = list(t.groupby(["study", "model", "domain"], observed=True, sort=True))[:MAX_PANELS]
    fig, axes = _grid(len(panels), width=4.6)
    for ax, (key, g) in zip(axes, panels):
        g = g.sort_values("arm", key=lambda s: s.map(lambda a: (a != AA, a)))
        x = np.arange(len(g))
        y = g["flip_rate"].to_numpy(float)
        err = np.vstack([y - g["flip_ci_low"].to_numpy(float), g["flip_ci_high"].to_numpy(float) - y])
        colors = ["grey" if a == AA else "tab:red" for a in g["arm"]]
        ax.bar(x, y, yerr=np.clip(np.nan_to_num(err), 0, None), color=colors, capsize=3)
        ax.set_xticks(x)
        ax.set_xticklabels(g["arm"].astype(str), fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_ylabel("flip rate vs full (95% CI)")
        ax.set_title(f"{key[1]} / {key[2]} / K={int(g['budget'].iloc[0])}", fontsize=9)
    return _save(fig, path)


def plot_tost_curve(curve: pd.DataFrame, path) -> object:
    """TOST p against the equivalence margin, pass^1 and pass^k, per quantized arm."""
    if curve is None or len(curve) == 0 or not np.isfinite(curve["tost_p"].astype(float)).any():
        return None
    c = _largest_budget(curve)
    panels = list(c.groupby(["study", "model", "domain"], observed=True, sort=True))[:MAX_PANELS]
    fig, axes = _grid(len(panels))
    for ax, (key, g) in zip(axes, panels):
        for (prec, metric), s in g.groupby(["precision", "metric"], observed=True, sort=True):
            style = "-" if metric == "pass^1" else "--"
            ax.plot(s["margin"], s["tost_p"], style, marker="o", ms=2, label=f"{prec} {metric}")
        ax.axhline(0.05, color="black", lw=0.8, ls=":")
        ax.set_xlabel("equivalence margin (success difference)")
        ax.set_ylabel("TOST p")
        ax.set_ylim(0, 1)
        ax.set_title(f"{key[1]} / {key[2]} / K={int(g['budget'].iloc[0])}", fontsize=9)
        ax.legend(fontsize=7)
    return _save(fig, path)


__all__ = ["plot_first_divergence", "plot_noise_floor", "plot_tost_curve"]
