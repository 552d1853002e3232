"""The study's report page and the fixed set of plots the workflow promises.

The workflow's outputs must be the same for every study design, but some designs cannot give
some plots (one budget: no budget curve; one repair setting: no repair ablation). Every plot
file therefore exists: the real one, or a labelled placeholder that says why it is empty.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The plots of every aggregate folder (file stem -> title of the placeholder).
PLOTS = {
    "budget_curves": "budget curves",
    "amplification": "channel amplification",
    "repair": "repair ablation",
    "first_divergence": "first divergence",
    "noise_floor": "A/A noise floor",
    "tost_curve": "TOST curve",
}


def collect_plots(out: Path, written: Mapping[str, Any]) -> None:
    """Make every plot of :data:`PLOTS` exist in ``out/plots/``: :func:`aggregate` draws the ones its
    design allows there; each one it did not draw becomes a placeholder (replacing a stale figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder = out / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    for name, title in PLOTS.items():
        source = written.get(f"plot_{name}")
        target = folder / f"{name}.png"
        if source and Path(source).exists():
            continue
        fig, ax = plt.subplots(figsize=(5, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, f"{title}: not computable for this design\n(see summary.md)", ha="center", va="center")
        fig.savefig(target, dpi=100)
        plt.close(fig)


def write_report_page(aggregate_dir: Path, out: Path) -> Path:
    """``index.md``: the aggregate's summary (its answer and figures first), its tables, and where to
    browse the runs. The figures appear once, linked to ``plots/`` from the report's own folder."""
    out.parent.mkdir(parents=True, exist_ok=True)
    summary = raw = (aggregate_dir / "summary.md").read_text()
    # summary.md links its figures in its own plots/; from the report's folder they are elsewhere
    summary = re.sub(
        r"\]\((plots/[^)/]+\.png)\)",
        lambda m: "](" + os.path.relpath(aggregate_dir / m.group(1), out.parent) + ")",
        summary,
    )
    lines = [summary.rstrip()]
    placeholders = [p for p in sorted((aggregate_dir / "plots").glob("*.png")) if f"](plots/{p.name})" not in raw]
    if placeholders:
        lines += ["", "## Plots this design cannot give", ""]
        lines += [f"![{p.stem}]({os.path.relpath(p, out.parent)})" for p in placeholders]
    tables = sorted(aggregate_dir.glob("*.csv"))
    lines += ["", "## Tables", ""] + [f"- [{t.name}]({os.path.relpath(t, out.parent)})" for t in tables]
    lines += ["", "Browse every cell's run, metrics and trajectories with `flatscore ui` (MLflow UI on 127.0.0.1).", ""]
    out.write_text("\n".join(lines))
    return out
