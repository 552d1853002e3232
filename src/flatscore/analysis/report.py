"""``aggregate``: cells -> tidy CSV tables, PNG figures and a Markdown summary.

Every number in ``summary.md`` is read from the tables written next to it. Parts of the design
that are absent (no quantized arm, no repair-on cells, a single budget, ...) are skipped and the
summary says which and why. The summary's text is rendered by
:mod:`flatscore.analysis.report_markdown`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable

import pandas as pd

from flatscore.analysis import arms, divergence, exact_tests, noise_floor, plots, plots_divergence, stats
from flatscore.analysis.load import StudyData, load_cells, split_replicates
from flatscore.analysis.report_markdown import md_table, render_summary
from flatscore.analysis.report_markdown_noise import render_noise_sections

__all__ = ["TABLES", "aggregate", "compute_tables", "md_table", "render_summary"]

TABLES = (
    "success",
    "passk",
    "comparisons",
    "amplification",
    "stability",
    "budget_curves",
    "counterfactual",
    "repair",
    "power",
    # exact paired tests, small-sample intervals, the A/A noise floor, first divergence
    "mcnemar",
    "cochran",
    "intervals",
    "tost",
    "tost_curve",
    "noise_floor",
    "divergence",
    "divergence_summary",
    "divergence_channels",
    # what each arm ran on (scheme, backend, dtype, compute)
    "arms",
)


def compute_tables(
    data: StudyData,
    equivalence_margin: float = 0.075,
    power_gaps=(0.05, 0.10, 0.15),
    power_ratios=(1.5, 2.0, 2.5),
    n_boot: int = 2000,
    seed: int = 0,
    divergence_window: int = 4,
) -> dict[str, pd.DataFrame]:
    """Every table of :data:`TABLES`. A/A replicates enter the noise floor only: every other table
    is computed from the study's own cells, as it was before replicates existed."""
    all_cells = data.cells
    data, replicates = split_replicates(data)
    ep = data.episodes
    tasks = stats.task_table(ep)
    tables = {
        "success": stats.success_table(ep, n_boot=n_boot, seed=seed),
        "passk": stats.passk_table(ep),
        "comparisons": stats.compare_precisions(ep, margin=equivalence_margin, n_boot=n_boot, seed=seed, tasks=tasks),
        "amplification": stats.amplification_table(ep, n_boot=n_boot, seed=seed, tasks=tasks),
        "stability": stats.stability_table(ep, data.error_events, tasks=tasks),
        "budget_curves": stats.budget_curves(ep, n_boot=n_boot, seed=seed),
        "counterfactual": stats.counterfactual_table(ep),
        "repair": stats.repair_table(ep, margin=equivalence_margin, n_boot=n_boot, seed=seed, tasks=tasks),
        "power": stats.power_table(ep, gaps=power_gaps, ratios=power_ratios, tasks=tasks),
        "mcnemar": exact_tests.mcnemar_table(ep),
        "cochran": exact_tests.cochran_table(ep),
        "intervals": exact_tests.interval_table(ep),
    }
    tables["tost"], tables["tost_curve"] = exact_tests.tost_tables(ep, equivalence_margin)
    tables["noise_floor"] = noise_floor.noise_floor_table(ep, replicates, tables["comparisons"])
    pairs = divergence.divergence_table(all_cells, ep, window=divergence_window)
    tables["divergence"] = pairs
    tables["divergence_summary"] = divergence.divergence_summary(pairs)
    tables["divergence_channels"] = divergence.divergence_channels(pairs)
    tables["arms"] = arms.arms_table(all_cells)
    return tables


def aggregate(
    cell_dirs: Iterable[Path],
    out_dir: Path,
    equivalence_margin: float = 0.075,
    power_gaps=(0.05, 0.10, 0.15),
    power_ratios=(1.5, 2.0, 2.5),
    n_boot: int = 2000,
    seed: int = 0,
    divergence_window: int = 4,
) -> dict[str, Path]:
    """Load ``cell_dirs``, write ``<name>.csv`` for every table, the PNGs and ``summary.md``.

    Returns ``{name: path}`` for everything written (tables by name, ``plot_*``, ``summary``).
    """
    cell_dirs = [Path(d) for d in cell_dirs]
    if not cell_dirs:
        raise ValueError("aggregate: no cell directories given")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = load_cells(cell_dirs)
    tables = compute_tables(data, equivalence_margin, power_gaps, power_ratios, n_boot, seed, divergence_window)
    paths: dict[str, Path] = {}
    for name in TABLES:
        p = out_dir / f"{name}.csv"
        tables[name].to_csv(p, index=False)
        paths[name] = p
    # the figures live once, in plots/ (the workflow's report collects that folder; summary.md links it)
    fig_dir = out_dir / "plots"
    fig_dir.mkdir(exist_ok=True)
    figs = {
        "plot_budget_curves": plots.plot_budget_curves(tables["budget_curves"], fig_dir / "budget_curves.png"),
        "plot_amplification": plots.plot_amplification(tables["amplification"], fig_dir / "amplification.png"),
        "plot_repair": plots.plot_repair(tables["repair"], fig_dir / "repair.png"),
        "plot_first_divergence": plots_divergence.plot_first_divergence(
            tables["divergence"], tables["divergence_channels"], fig_dir / "first_divergence.png"
        ),
        "plot_noise_floor": plots_divergence.plot_noise_floor(tables["noise_floor"], fig_dir / "noise_floor.png"),
        "plot_tost_curve": plots_divergence.plot_tost_curve(tables["tost_curve"], fig_dir / "tost_curve.png"),
    }
    paths.update({k: v for k, v in figs.items() if v is not None})
    summary = out_dir / "summary.md"
    headline = out_dir / "headline.json"
    headline.write_text(json.dumps(headline_metrics(tables), indent=1, sort_keys=True), encoding="utf-8")
    paths["headline"] = headline
    more = render_noise_sections(tables, equivalence_margin)
    summary.write_text(render_summary(data, tables, figs, equivalence_margin, more), encoding="utf-8")
    paths["summary"] = summary
    return paths


#: Headline figures of the study run (MLflow metrics): table -> (name column, value columns).
HEADLINE = {
    "noise_floor": ("arm", ("flip_rate", "flip_ci_high", "icc", "gap", "lossless")),
    "mcnemar": ("precision", ("mcnemar_p", "mcnemar_p_holm")),
    "divergence_summary": ("precision", ("share_diverged", "turn_median", "share_failures_at_divergence")),
}


def headline_metrics(tables: dict[str, pd.DataFrame]) -> dict[str, float]:
    """``<figure>/<model>/<domain>/K<budget>/repair-<on|off>/<arm>`` -> value, for the study run."""
    out: dict[str, float] = {}
    for name, (arm, values) in HEADLINE.items():
        for _, r in tables[name].iterrows():
            where = f"{r['model']}/{r['domain']}/K{int(r['budget'])}/repair-{'on' if r['repair'] else 'off'}"
            label = str(r[arm]).replace("full (A/A)", "full-AA")
            for v in values:
                value = float(r[v]) if r[v] is not None and r[v] == r[v] else math.nan
                if math.isfinite(value):
                    out[f"{v}/{where}/{label}"] = value
    return out
