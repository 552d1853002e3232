"""Exact paired tests, small-sample intervals and the ICC, each against an independent computation
(scipy, statsmodels, pingouin on the same numbers)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
import statsmodels.formula.api as smf
from scipy import stats as sps
from scipy.special import comb
from statsmodels.stats.anova import anova_lm
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import ttost_paired

from flatscore.analysis import exact_tests as et
from flatscore.analysis.load import load_cells, split_replicates
from flatscore.analysis.noise_floor import icc1
from flatscore.analysis.synthetic import SyntheticStudy, write_study

KEYS = ["study", "model", "domain", "budget", "repair"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    spec = SyntheticStudy(
        precisions=("full", "int8", "int4"),
        domains=("retail", "telecom"),
        budgets=(10, 3),
        n_tasks=15,
        trials=3,
        success_shift={"full": 0.0, "int8": 0.0, "int4": -0.15},
    )
    data = load_cells(write_study(spec, tmp_path_factory.mktemp("exact")))
    return data.episodes


def _wide(ep: pd.DataFrame) -> pd.DataFrame:
    """Independent pairing: scored episodes merged on (group, task, trial), one column per precision."""
    sc = ep[ep["scored"]].astype({"precision": str, "task_id": str, "study": str, "model": str, "domain": str})
    sc = sc.assign(ok=sc["reward"] > 0.5)
    return sc.pivot_table(index=[*KEYS, "task_id", "trial"], columns="precision", values="ok", aggfunc="first")


def test_mcnemar_counts_and_exact_p_match_scipy_binomial(study):
    table = et.mcnemar_table(study)
    wide = _wide(study)
    assert len(table) == 2 * 2 * 2  # domains x budgets x quantized precisions
    for _, r in table.iterrows():
        g = wide.loc[(r["study"], r["model"], r["domain"], r["budget"], r["repair"])][["full", r["precision"]]]
        g = g.dropna().astype(bool)
        b = int((g["full"] & ~g[r["precision"]]).sum())
        c = int((~g["full"] & g[r["precision"]]).sum())
        assert (r["n_pairs"], r["ref_only"], r["treat_only"]) == (len(g), b, c)
        assert r["mcnemar_p"] == pytest.approx(sps.binomtest(b, b + c, 0.5).pvalue, rel=1e-9)
        lo, hi = sps.binomtest(b + c, len(g)).proportion_ci(method="wilson")
        assert (r["flip_ci_low"], r["flip_ci_high"]) == pytest.approx((lo, hi), rel=1e-9)
    expected = multipletests(table["mcnemar_p"], method="holm")[1]
    assert table["mcnemar_p_holm"].to_numpy() == pytest.approx(expected, rel=1e-9)


def test_cochran_q_matches_pingouin(study):
    table = et.cochran_table(study)
    wide = _wide(study)
    assert len(table) == 4 and set(table["precisions"]) == {"full,int4,int8"}
    for _, r in table.iterrows():
        g = wide.loc[(r["study"], r["model"], r["domain"], r["budget"], r["repair"])].dropna().astype(float)
        long = g.reset_index().melt(id_vars=["task_id", "trial"], var_name="precision", value_name="ok")
        long["pair"] = long["task_id"] + "#" + long["trial"].astype(str)
        ref = pg.cochran(long, dv="ok", within="precision", subject="pair")
        assert r["n_pairs"] == len(g)
        assert r["cochran_Q"] == pytest.approx(float(ref["Q"].iloc[0]), rel=1e-9)
        assert r["cochran_p"] == pytest.approx(float(ref["p_unc"].iloc[0]), rel=1e-9)


def test_cochran_needs_three_precisions(study):
    two = study[study["precision"].astype(str) != "int8"]
    assert len(et.cochran_table(two)) == 0


@pytest.mark.parametrize("k, n", [(0, 5), (1, 7), (6, 9), (12, 12), (37, 80)])
def test_wilson_and_clopper_pearson_match_scipy(k, n):
    res = sps.binomtest(k, n)
    assert et.binomial_interval(k, n, "wilson") == pytest.approx(tuple(res.proportion_ci(method="wilson")), abs=1e-12)
    assert et.binomial_interval(k, n, "beta") == pytest.approx(tuple(res.proportion_ci(method="exact")), abs=1e-9)


def test_interval_table_counts_each_arm(study):
    iv = et.interval_table(study)
    for _, r in iv.iterrows():
        arm = study[
            (study["domain"] == r["domain"]) & (study["budget"] == r["budget"]) & (study["precision"] == r["precision"])
        ]
        arm = arm[arm["scored"]]
        k = int((arm["reward"] > 0.5).sum())
        assert (r["n_episodes"], r["passed"]) == (len(arm), k)
        lo, hi = sps.binomtest(k, len(arm)).proportion_ci(method="exact")
        assert (r["cp_low"], r["cp_high"]) == pytest.approx((lo, hi), abs=1e-9)
        assert r["small"] == (len(arm) < et.SMALL_CELL)


def test_tost_on_pass1_and_passk_and_the_curve_match_statsmodels(study):
    table, curve = et.tost_tables(study, 0.1)
    assert set(table["metric"]) == {"pass^1", "pass^3"}
    sc = study[study["scored"]].assign(ok=lambda f: f["reward"] > 0.5)
    per_task = sc.groupby([*KEYS, "precision", "task_id"], observed=True)["ok"].agg(["sum", "size"]).reset_index()
    for _, r in table.iterrows():
        k = r["k"]
        g = per_task[(per_task["domain"] == r["domain"]) & (per_task["budget"] == r["budget"])]
        g = g[g["size"] >= k].assign(v=lambda f: comb(f["sum"], k) / comb(f["size"], k))
        wide = g.pivot_table(index="task_id", columns="precision", values="v", observed=True)
        both = wide[["full", r["precision"]]].dropna()
        x, y = both[r["precision"]].to_numpy(), both["full"].to_numpy()
        assert r["n_tasks"] == len(both) and r["diff"] == pytest.approx((x - y).mean())
        assert r["tost_p"] == pytest.approx(ttost_paired(x, y, -0.1, 0.1)[0], rel=1e-7)
        mine = curve[
            (curve["domain"] == r["domain"])
            & (curve["budget"] == r["budget"])
            & (curve["precision"] == r["precision"])
            & (curve["metric"] == r["metric"])
        ]
        assert list(mine["margin"]) == list(et.TOST_MARGINS)
        for m, p in zip(mine["margin"].iloc[::7], mine["tost_p"].iloc[::7]):
            assert p == pytest.approx(ttost_paired(x, y, -m, m)[0], rel=1e-7)
        assert np.all(np.diff(mine["tost_p"].to_numpy()) <= 1e-12)  # a wider margin is easier to meet
    assert table["tost_p_holm"].to_numpy() == pytest.approx(multipletests(table["tost_p"], method="holm")[1])


def test_icc1_matches_the_one_way_anova_of_statsmodels():
    rng = np.random.default_rng(3)
    task_effect = rng.normal(0.5, 0.2, size=25)
    rates = pd.DataFrame({f"run{j}": np.clip(task_effect + rng.normal(0, 0.15, 25), 0, 1) for j in range(3)})
    icc, lo, hi = icc1(rates)
    long = rates.reset_index(names="task").melt(id_vars="task", value_name="rate")
    aov = anova_lm(smf.ols("rate ~ C(task)", data=long).fit())
    msb, msw = aov["mean_sq"].iloc[0], aov["mean_sq"].iloc[1]
    assert icc == pytest.approx((msb - msw) / (msb + 2 * msw), rel=1e-9)
    assert lo < icc < hi


def test_split_replicates_keeps_event_rows_pointing_at_their_episodes(tmp_path):
    spec = SyntheticStudy(n_tasks=10, trials=2, budgets=(10,), replicates=1)
    dirs = write_study(spec, tmp_path)
    data = load_cells(sorted(dirs, key=lambda d: "-r1-" not in d.name))  # replicates first: rows shift
    assert data.episodes["replicate"].iloc[0] == 1
    main, reps = split_replicates(data)
    assert len(reps) == len(main.episodes) // 2 and (reps["replicate"] == 1).all()
    assert (main.episodes["replicate"] == 0).all()
    ev = main.error_events
    rows = main.episodes.iloc[ev["episode_row"].to_numpy()]
    assert (rows["task_id"].astype(str).to_numpy() == ev["task_id"].astype(str).to_numpy()).all()
    assert (rows["precision"].astype(str).to_numpy() == ev["precision"].astype(str).to_numpy()).all()
