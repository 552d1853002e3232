"""``aggregate``: cells -> tidy CSV tables, PNG figures and a Markdown summary.

Every number in ``summary.md`` is read from the tables written next to it. Parts of the design
that are absent (no quantized arm, no repair-on cells, a single budget, ...) are skipped and the
summary says which and why. The summary's text is rendered by
:mod:`flatscore.analysis.report_markdown`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import pandas as pd

from flatscore.analysis import plots, stats
from flatscore.analysis.load import StudyData, load_cells
from flatscore.analysis.report_markdown import md_table, render_summary

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
)


def compute_tables(
    data: StudyData,
    equivalence_margin: float = 0.075,
    power_gaps=(0.05, 0.10, 0.15),
    power_ratios=(1.5, 2.0, 2.5),
    n_boot: int = 2000,
    seed: int = 0,
) -> dict[str, pd.DataFrame]:
    ep = data.episodes
    tasks = stats.task_table(ep)
    return {
        "success": stats.success_table(ep, n_boot=n_boot, seed=seed),
        "passk": stats.passk_table(ep),
        "comparisons": stats.compare_precisions(ep, margin=equivalence_margin, n_boot=n_boot, seed=seed, tasks=tasks),
        "amplification": stats.amplification_table(ep, n_boot=n_boot, seed=seed, tasks=tasks),
        "stability": stats.stability_table(ep, data.error_events, tasks=tasks),
        "budget_curves": stats.budget_curves(ep, n_boot=n_boot, seed=seed),
        "counterfactual": stats.counterfactual_table(ep),
        "repair": stats.repair_table(ep, margin=equivalence_margin, n_boot=n_boot, seed=seed, tasks=tasks),
        "power": stats.power_table(ep, gaps=power_gaps, ratios=power_ratios, tasks=tasks),
    }


def aggregate(
    cell_dirs: Iterable[Path],
    out_dir: Path,
    equivalence_margin: float = 0.075,
    power_gaps=(0.05, 0.10, 0.15),
    power_ratios=(1.5, 2.0, 2.5),
    n_boot: int = 2000,
    seed: int = 0,
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
    tables = compute_tables(data, equivalence_margin, power_gaps, power_ratios, n_boot, seed)
    paths: dict[str, Path] = {}
    for name in TABLES:
        p = out_dir / f"{name}.csv"
        tables[name].to_csv(p, index=False)
        paths[name] = p
    figs = {
        "plot_budget_curves": plots.plot_budget_curves(tables["budget_curves"], out_dir / "budget_curves.png"),
        "plot_amplification": plots.plot_amplification(tables["amplification"], out_dir / "amplification.png"),
        "plot_repair": plots.plot_repair(tables["repair"], out_dir / "repair.png"),
    }
    paths.update({k: v for k, v in figs.items() if v is not None})
    summary = out_dir / "summary.md"
    summary.write_text(render_summary(data, tables, figs, equivalence_margin), encoding="utf-8")
    paths["summary"] = summary
    return paths
