"""The report opens with the study's answer, then its figures, each shown once with a link that works."""

from __future__ import annotations

import re

from flatscore.analysis import aggregate
from flatscore.analysis.report_page import collect_plots, write_report_page
from flatscore.analysis.synthetic import SyntheticStudy, write_study


def _study(tmp_path, int4_shift: float, int8_identical: bool = False):
    spec = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(10, 2),
        repairs=(False, True),
        n_tasks=80,
        trials=4,
        success_shift={"full": 0.0, "int4": int4_shift},
        hallucination_mult={"full": 1.0, "int4": 3.0},
        other_mult={"full": 1.0, "int4": 1.0},
    )
    paths = aggregate(write_study(spec, tmp_path / "cells"), tmp_path / "agg", n_boot=300)
    collect_plots(tmp_path / "agg", paths)
    return paths


def test_summary_answers_first_with_the_numbers_of_the_tables(tmp_path):
    paths = _study(tmp_path, int4_shift=-0.4)
    text = paths["summary"].read_text()
    answer, figures, success = (text.index(h) for h in ("## The answer", "## Figures", "## Success per arm"))
    assert answer < figures < success
    story = text[answer:figures]
    assert "a significant gap" in story  # planted: 40 points lower
    assert "hallucinated_tool x" in story  # planted: 3x the hallucinations
    # the numbers are the comparison table's
    import pandas as pd

    c = pd.read_csv(paths["comparisons"])
    row = c[(c["budget"] == 10) & ~c["repair"]].iloc[0]
    assert f"{100 * row['success_treat']:.1f}% against {100 * row['success_ref']:.1f}%" in story
    assert "Repair on vs off" in story
    assert "Power at K=10 with 80 tasks" in story  # what an inconclusive verdict could have seen


def test_report_page_shows_each_figure_once_with_working_links(tmp_path):
    _study(tmp_path, int4_shift=0.0)
    page = write_report_page(tmp_path / "agg", tmp_path / "report" / "index.md")
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", page.read_text())
    from flatscore.analysis.report_page import PLOTS

    assert len(links) == len(PLOTS) and len(set(links)) == len(links), links
    assert all((page.parent / link).is_file() for link in links), links


def test_at_the_floor_the_story_gives_counts_and_divergence_instead_of_ratios(tmp_path):
    """Both arms at 0%: no ratio and no verdict, but the answer still says which errors moved and
    where the quantized trajectories left full precision's (here planted at message 8, even trials)."""
    spec = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(10,),
        n_tasks=12,
        trials=2,
        infra_rate=0.0,
        success_shift={"full": -2.0, "int4": -2.0},
        divergence_turn=8,
    )
    paths = aggregate(write_study(spec, tmp_path / "cells"), tmp_path / "agg", n_boot=200)
    text = paths["summary"].read_text()
    story = text[text.index("## The answer") : text.index("## Figures")]
    assert "a floor, nothing to compare" in story and " x" not in story.split("Errors at K=10:")[1].split("\n")[0]
    line = next(s for s in story.splitlines() if "Errors at K=10:" in s)
    assert "no ratio at the floor; error counts, full -> int4:" in line
    counts = re.findall(r"(\w+) (\d+) -> (\d+)", line)
    import pandas as pd

    amp = pd.read_csv(paths["amplification"]).set_index("channel")
    assert counts and all(
        (int(amp.loc[c, "count_ref"]), int(amp.loc[c, "count_treat"])) == (int(a), int(b)) for c, a, b in counts
    )
    assert "Trajectories at K=10: 12/24 episode pairs leave full precision's (first divergence at message 8" in story
