"""Behaviour of flatscore.analysis on synthetic cells with planted properties."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pingouin as pg
import pytest
from PIL import Image

from flatscore.analysis import (
    CorruptRecordError,
    aggregate,
    counterfactual_agreement,
    exact_tests,
    find_cell_dirs,
    load_cells,
    stats,
)
from flatscore.analysis.load import split_replicates
from flatscore.analysis.noise_floor import AA, noise_floor_table
from flatscore.analysis.synthetic import SyntheticStudy, write_study

FAST = dict(n_boot=500)


@pytest.fixture(scope="module")
def full_design(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    spec = SyntheticStudy(
        precisions=("full", "int8", "int4"),
        budgets=(10, 5, 2),
        repairs=(False, True),
        n_tasks=60,
        trials=4,
        infra_rate=0.02,
        replicates=1,  # the A/A noise floor
        divergence_turn=8,  # trajectories that diverge, an error after
        divergence_channel="malformed_call",
    )
    dirs = write_study(spec, root)
    out = root / "agg"
    paths = aggregate(dirs, out, **FAST)
    return spec, dirs, paths


# ------------------------------------------------------------------------------------- loader
def test_loader_dtypes_and_counts(full_design):
    spec, dirs, _ = full_design
    d = load_cells(dirs)
    ep, ev = d.episodes, d.error_events
    assert len(ep) == len(dirs) * spec.n_tasks * spec.trials
    for c in ("cell_id", "model", "precision", "domain", "task_id", "termination"):
        assert isinstance(ep[c].dtype, pd.CategoricalDtype), c
    assert ep["budget"].dtype == np.int16 and ep["trial"].dtype == np.int16
    assert ep["repair"].dtype == bool and ep["scored"].dtype == bool
    assert ep["ch_invented_tool"].dtype == np.int16
    assert (ep["ch_hallucinated_tool"] == ep["ch_invented_tool"] + ep["ch_other_side_tool"]).all()
    # one event row per event, consistent with the per-episode channel counts
    chans = [c for c in ep.columns if c.startswith("ch_") and c != "ch_hallucinated_tool"]
    assert len(ev) == int(ep[chans].to_numpy().sum())
    per_ep = ev.groupby("episode_row").size().reindex(range(len(ep)), fill_value=0).to_numpy()
    assert (per_ep == ep[chans].sum(axis=1).to_numpy()).all()
    assert isinstance(ev["tool"].dtype, pd.CategoricalDtype) and ev["tool"].nunique() > 3
    assert not ep.loc[ep["termination"] == "infrastructure_error", "scored"].any()


def test_corrupt_line_raises_with_file_name(tmp_path):
    (d,) = write_study(SyntheticStudy(n_tasks=5, trials=2, budgets=(10,), precisions=("full",)), tmp_path)
    f = d / "episodes.jsonl"
    lines = f.read_bytes().splitlines(keepends=True)
    f.write_bytes(b"".join(lines[:3] + [lines[3][: len(lines[3]) // 2] + b"\n"] + lines[4:]))
    with pytest.raises(CorruptRecordError) as exc:
        load_cells([d])
    assert str(f) in str(exc.value) and ":4" in str(exc.value)
    assert exc.value.path == f and exc.value.lineno == 4
    # a truncated last line (killed mid-append) is refused too
    f.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])
    with pytest.raises(CorruptRecordError, match="episodes.jsonl"):
        load_cells([d])


# ------------------------------------------------------------------------------------- pass^k
def test_pass_hat_k_matches_brute_force():
    rng = np.random.default_rng(1)
    n_trials = 6
    outcomes = rng.random((25, n_trials)) < rng.random((25, 1))
    for k in range(1, n_trials + 1):
        brute = np.mean(
            [np.mean([all(o[list(s)]) for s in itertools.combinations(range(n_trials), k)]) for o in outcomes]
        )
        est = stats.pass_hat_k(outcomes.sum(axis=1), np.full(25, n_trials), k)
        assert est == pytest.approx(brute, abs=1e-12)


def test_passk_table_from_episodes(full_design):
    spec, dirs, paths = full_design
    pk = pd.read_csv(paths["passk"])
    ep = load_cells(dirs).episodes
    arm = ep[(ep["precision"] == "int4") & (ep["budget"] == 10) & (~ep["repair"]) & ep["scored"]]
    row = pk[(pk["precision"] == "int4") & (pk["budget"] == 10) & (~pk["repair"]) & (pk["k"] == 3)].iloc[0]
    vals = []
    for _, g in arm.groupby("task_id", observed=True):
        r = g["reward"].to_numpy()
        if len(r) >= 3:
            vals.append(np.mean([all(r[list(s)] == 1) for s in itertools.combinations(range(len(r)), 3)]))
    assert row["pass_hat_k"] == pytest.approx(np.mean(vals), abs=1e-12)
    assert row["n_tasks"] == len(vals)
    assert sorted(pk["k"].unique()) == list(range(1, spec.trials + 1))


# -------------------------------------------------------------------------------- budget curves
def _simulate(events_by_episode: dict, rewards: dict, k: int) -> dict:
    """Walk each episode's error events and stop it at its k-th counted error."""
    out = {}
    for key, r in rewards.items():
        counted = 0
        stopped = False
        for counted_flag in events_by_episode.get(key, []):
            counted += counted_flag
            if counted >= k:
                stopped = True
                break
        out[key] = 0.0 if stopped else r
    return out


def test_budget_curve_equals_direct_simulation(full_design):
    _, dirs, paths = full_design
    d = load_cells(dirs)
    ep, ev = d.episodes, d.error_events
    curves = pd.read_csv(paths["budget_curves"])
    sel = (ep["precision"] == "int4") & (~ep["repair"]) & (ep["budget"] == 10) & ep["scored"]
    src = ep[sel]
    rows = set(np.flatnonzero(sel.to_numpy()))
    evs: dict = {}
    for r, c in zip(ev["episode_row"], ev["counted"]):
        if r in rows:
            evs.setdefault(r, []).append(bool(c))
    rewards = dict(zip(np.flatnonzero(sel.to_numpy()), src["reward"].astype(float)))
    task_of = dict(zip(np.flatnonzero(sel.to_numpy()), src["task_id"].astype(str)))
    for k in range(1, 11):
        sim = _simulate(evs, rewards, k)
        per_task = pd.Series(sim).groupby(pd.Series(task_of)).mean()
        row = curves[(curves["precision"] == "int4") & (~curves["repair"]) & (curves["K"] == k)].iloc[0]
        assert row["success"] == pytest.approx(per_task.mean(), abs=1e-12)
        assert row["ci_low"] <= row["success"] <= row["ci_high"]
        if k in (2, 5):  # real runs exist there: the counterfactual equals them (prefix-consistent data)
            assert row["real_run"] and row["real_success"] == pytest.approx(row["success"], abs=1e-12)
    cf = pd.read_csv(paths["counterfactual"])
    assert len(cf) == 3 * 2 * 2  # precisions x repair x smaller budgets (5, 2)
    assert (cf["agreement"] == 1.0).all() and (cf["n"] > 0).all()


def test_counterfactual_agreement_is_measured_not_assumed(tmp_path):
    spec = SyntheticStudy(precisions=("full",), budgets=(10, 2), n_tasks=50, trials=4, cf_flip=0.2, infra_rate=0.0)
    ep = load_cells(write_study(spec, tmp_path)).episodes
    res = counterfactual_agreement(ep[ep["budget"] == 10], ep[ep["budget"] == 2], 2)
    assert res["n"] == 200
    assert 0.7 < res["agreement"] < 0.9  # ~20% of real rewards flipped on purpose
    assert res["n_agree"] == round(res["agreement"] * res["n"])
    assert res["errors_agreement"] == 1.0  # error counts were not tampered with


# -------------------------------------------------------------------------------- amplification
def test_amplification_recovers_planted_ratio(tmp_path):
    spec = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(60,),
        n_tasks=150,
        trials=4,
        hallucination_mult={"full": 1.0, "int4": 2.5},
        other_mult={"full": 1.0, "int4": 1.0},
    )
    ep = load_cells(write_study(spec, tmp_path)).episodes
    amp = stats.amplification_table(ep, n_boot=1000).set_index("channel")
    h = amp.loc["hallucinated_tool"]
    assert h["ratio_per_task_ci_low"] < 2.5 < h["ratio_per_task_ci_high"]
    assert h["ratio_per_task_ci_low"] > 1.5
    assert h["ratio_per_call_ci_low"] > 1.5  # per call: calls grow with the errors, so a bit below 2.5
    t = amp.loc["tool_error"]  # unamplified channel: CI covers 1
    assert t["ratio_per_task_ci_low"] < 1.0 < t["ratio_per_task_ci_high"]
    assert h["count_treat"] > 2 * h["count_ref"]


# ---------------------------------------------------------------------------- tests and TOST
def test_tost_equivalent_for_identical_arms_not_for_20_point_gap(tmp_path):
    same = SyntheticStudy(precisions=("full", "int4"), budgets=(10,), n_tasks=40, trials=4, identical=True)
    ep = load_cells(write_study(same, tmp_path / "same")).episodes
    c = stats.compare_precisions(ep, margin=0.075, **FAST).iloc[0]
    assert c["diff"] == 0 and c["equivalent"] and c["tost_p"] < 0.05 and not c["significant_holm"]

    # same process, independent draws: equivalent with enough tasks
    twin = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(10,),
        n_tasks=300,
        trials=8,
        novel_share=0.0,
        hallucination_mult={"full": 1.0, "int4": 1.0},
        other_mult={"full": 1.0, "int4": 1.0},
    )
    ep = load_cells(write_study(twin, tmp_path / "twin")).episodes
    c = stats.compare_precisions(ep, margin=0.075, **FAST).iloc[0]
    assert c["equivalent"] and abs(c["diff"]) < 0.075

    gap = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(10,),
        n_tasks=60,
        trials=4,
        success_shift={"full": 0.0, "int4": -0.2},
        hallucination_mult={"full": 1.0, "int4": 1.0},
        other_mult={"full": 1.0, "int4": 1.0},
    )
    ep = load_cells(write_study(gap, tmp_path / "gap")).episodes
    c = stats.compare_precisions(ep, margin=0.075, **FAST).iloc[0]
    assert not c["equivalent"] and c["tost_p"] > 0.05
    assert c["diff"] < -0.1 and c["diff_ci_high"] < 0 and c["wilcoxon_p"] < 0.01 and c["ttest_p"] < 0.01


def test_holm_adjusts_upward(full_design):
    _, _, paths = full_design
    c = pd.read_csv(paths["comparisons"])
    assert len(c) == 2 * 3 * 2  # 2 quantized arms x 3 budgets x repair on/off
    for p in ("wilcoxon_p", "ttest_p", "tost_p"):
        ok = c[p].notna()
        assert (c.loc[ok, f"{p}_holm"] >= c.loc[ok, p] - 1e-15).all()
        assert (c.loc[ok, f"{p}_holm"] > c.loc[ok, p]).any()
        _, ref = pg.multicomp(c[p].to_numpy(), method="holm")
        np.testing.assert_allclose(c[f"{p}_holm"], ref)
    # Holm by hand on a known vector: sorted p * (m - rank), cumulative max, capped at 1
    df = pd.DataFrame({"p": [0.01, 0.04, 0.03, 0.5]})
    stats.holm(df, "p")
    np.testing.assert_allclose(df["p_holm"], [0.04, 0.09, 0.09, 0.5])


def test_repair_and_power_tables(full_design):
    _, _, paths = full_design
    r = pd.read_csv(paths["repair"])
    assert len(r) == 3 * 3  # precisions x budgets
    assert {"success_off", "success_on", "diff", "wilcoxon_p_holm", "tost_p"} <= set(r.columns)
    np.testing.assert_allclose(r["diff"], r["success_on"] - r["success_off"], atol=1e-12)
    pw = pd.read_csv(paths["power"])
    g = pw[pw["kind"] == "success_gap"].groupby(["budget", "repair", "precision"])
    for _, grp in g:  # a larger gap needs fewer tasks
        n = grp.sort_values("target")["n_tasks_needed"].to_numpy()
        assert (np.diff(n) <= 0).all() and np.isfinite(n).all()
    row = pw[pw["kind"] == "success_gap"].iloc[0]
    # consistent with pingouin: the needed n gives >= 80% power
    assert pg.power_ttest(d=row["d_z"], n=row["n_tasks_needed"], contrast="paired") >= 0.8
    assert row["episodes_needed_per_arm"] == row["n_tasks_needed"] * row["trials"]


def test_stability_reports_rank_correlation_and_novel_share(tmp_path):
    shares = {}
    for planted in (0.0, 0.3):
        spec = SyntheticStudy(
            precisions=("full", "int4"), budgets=(60,), n_tasks=40, trials=20, novel_share=planted, infra_rate=0.0
        )
        d = load_cells(write_study(spec, tmp_path / str(planted)))
        st = stats.stability_table(d.episodes, d.error_events).set_index("scope")
        assert st.loc["all", "spearman_r"] > 0.4  # same task-specific tool preferences in both arms
        ev = d.error_events
        keys = lambda e: list(zip(e["task_id"].astype(str), e["tool"].astype(str), e["channel"].astype(str)))  # noqa: E731
        full_keys = set(keys(ev[ev["precision"] == "full"]))
        q = keys(ev[ev["precision"] == "int4"])
        assert st.loc["all", "novel_events"] == sum(k not in full_keys for k in q)  # brute force
        assert st.loc["all", "events_treat"] == len(q)
        shares[planted] = st.loc["all", "novel_share"]
    # planting 30% novel tools raises the share by about that much (sampling novelty is the baseline)
    assert 0.2 < shares[0.3] - shares[0.0] < 0.4


# ------------------------------------------------------------------------------- report, plots
def test_summary_and_pngs(full_design):
    _, _, paths = full_design
    for name in (
        "success",
        "comparisons",
        "amplification",
        "stability",
        "budget_curves",
        "counterfactual",
        "repair",
        "power",
    ):
        assert paths[name].exists() and len(pd.read_csv(paths[name])) > 0, name
    for name in ("plot_budget_curves", "plot_amplification", "plot_repair"):
        p = paths[name]
        assert p.stat().st_size > 5000
        with Image.open(p) as im:
            im.verify()
        with Image.open(p) as im:
            assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200
            lo, hi = im.convert("L").getextrema()
            assert hi - lo > 100  # not a blank canvas
    md = paths["summary"].read_text()
    succ = pd.read_csv(paths["success"])
    infra = int(succ["n_infrastructure_error"].sum())
    assert f"Infrastructure failures: {infra} episodes" in md
    cf = pd.read_csv(paths["counterfactual"])
    assert f"{int(cf['n_agree'].sum())} of {int(cf['n'].sum())} matched episodes agree" in md
    assert "Nothing skipped" in md


def test_partial_designs(tmp_path):
    # only the reference arm, one budget, no repair-on cells
    dirs = write_study(SyntheticStudy(precisions=("full",), budgets=(10,), n_tasks=20, trials=2), tmp_path / "a")
    paths = aggregate(dirs, tmp_path / "a_out", **FAST)
    md = paths["summary"].read_text()
    assert "no comparison computed" in md and "ablation skipped" in md and "agreement not checked" in md
    assert len(pd.read_csv(paths["comparisons"])) == 0 and len(pd.read_csv(paths["success"])) == 1
    assert "plot_budget_curves" in paths and "plot_repair" not in paths
    # no int8 arm, a single budget, repair on only for int4 (no pair for full)
    dirs = write_study(SyntheticStudy(precisions=("full", "int4"), budgets=(5,), n_tasks=20, trials=2), tmp_path / "b")
    dirs += write_study(
        SyntheticStudy(precisions=("int4",), budgets=(5,), repairs=(True,), n_tasks=20, trials=2, seed=3),
        tmp_path / "b",
    )[-1:]
    paths = aggregate(sorted(set(dirs)), tmp_path / "b_out", **FAST)
    c = pd.read_csv(paths["comparisons"])
    assert len(c) == 1 and c["precision"].iloc[0] == "int4"
    md = paths["summary"].read_text()
    assert "a single budget was run" in md and "agreement not checked" in md
    assert len(pd.read_csv(paths["amplification"])) > 0 and "plot_amplification" in paths


def test_find_cell_dirs(tmp_path):
    dirs = write_study(SyntheticStudy(n_tasks=3, trials=1), tmp_path)
    assert find_cell_dirs(tmp_path) == sorted(dirs)
    meta = json.loads((dirs[0] / "cell.json").read_text())
    assert meta["precision"] in ("full", "int4")


def test_find_cell_dirs_finds_the_workflows_nested_cells(tmp_path):
    """The workflow writes cells/<model>/<precision>/<domain>/K<b>/repair-<x>/shard<i>: all are found,
    stale results moved under .superseded/ are not, and the nested cells load."""
    flat = write_study(SyntheticStudy(n_tasks=3, trials=1, precisions=("full",), budgets=(10,)), tmp_path)
    nested = []
    for i, d in enumerate(flat):
        meta = json.loads((d / "cell.json").read_text())
        repair = "on" if meta["repair"] else "off"
        target = tmp_path / "cells" / meta["model"] / meta["precision"] / meta["domain"]
        target = target / f"K{meta['budget']}" / f"repair-{repair}" / f"shard{i}"
        target.parent.mkdir(parents=True, exist_ok=True)
        d.rename(target)
        nested.append(target)
    stale = nested[0] / ".superseded" / "0123456789abcdef"
    stale.mkdir(parents=True)
    (stale / "cell.json").write_text((nested[0] / "cell.json").read_text())
    assert find_cell_dirs(tmp_path) == sorted(nested)
    assert len(load_cells(find_cell_dirs(tmp_path)).cells) == len(nested)


def test_closed_form_bootstrap_equals_pingouins():
    """bootstrap._bootci (closed form, numpy's public RandomState draws) gives pg.compute_bootci's BCa
    interval: same resamples as scipy draws for pingouin's seed, same formulas."""
    from flatscore.analysis.bootstrap import _bootci

    rng = np.random.default_rng(4)
    for n, seed in ((12, 0), (40, 3), (75, 11)):
        x = rng.integers(0, 5, n) / 4.0
        ours = _bootci(x, n_boot=800, seed=seed)
        theirs = pg.compute_bootci(x, func="mean", method="bca", n_boot=800, decimals=12, seed=seed)
        assert ours == pytest.approx(tuple(theirs), abs=1e-9)


# ------------------------------------------------------------------------------ floor and ceiling
@pytest.mark.parametrize(("shift", "bound"), [(-2.0, "floor"), (2.0, "ceiling")])
def test_no_verdict_at_the_floor_or_the_ceiling(tmp_path, shift, bound):
    """Two arms that both solve nothing (or everything) are not called equivalent: TOST at 0% vs
    0% would say "equivalent" and the report "lossless". The row says floor/ceiling instead, the
    amplification ratio is withheld at the floor, pass^k and budget curves mark the bound, and so do
    the exact TOST on pass^1 and pass^k and the A/A noise floor's lossless verdict."""
    spec = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(60,),
        n_tasks=20,
        trials=2,
        identical=True,
        success_shift={"full": shift, "int4": shift},
        replicates=1,
    )
    paths = write_study(spec, tmp_path)
    data, replicates = split_replicates(load_cells(paths))
    ep = data.episodes
    tost, curve = exact_tests.tost_tables(ep, margin=0.075)
    assert len(tost) == 2 and (tost["bound"] == bound).all()  # pass^1 and pass^2
    assert tost["tost_p"].isna().all() and not tost["equivalent_holm"].any() and curve["tost_p"].isna().all()
    nf = noise_floor_table(ep, replicates, stats.compare_precisions(ep, **FAST))
    assert set(nf["arm"]) == {AA, "int4"} and (nf["bound"] == bound).all() and not nf["lossless"].any()
    c = stats.compare_precisions(ep, **FAST).iloc[0]
    assert c["bound"] == bound and not c["equivalent"] and not c["equivalent_holm"]
    assert np.isnan(c["tost_p"]) and bound in c["note"]
    amp = stats.amplification_table(ep, n_boot=100)
    assert (amp["bound"] == bound).all()
    with_errors = amp[amp["count_ref"] > 0]
    assert len(with_errors)
    assert with_errors["ratio_per_task"].isna().all() == (bound == "floor")  # kept at the ceiling
    assert (stats.passk_table(ep)["bound"] == bound).all()
    curves = stats.budget_curves(ep, n_boot=100)
    assert (curves.loc[curves["success"] == (0.0 if bound == "floor" else 1.0), "bound"] == bound).all()


def test_summary_says_floor_instead_of_equivalent(tmp_path):
    spec = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(10,),
        n_tasks=12,
        trials=2,
        identical=True,
        success_shift={"full": -2.0, "int4": -2.0},
    )
    paths = aggregate(write_study(spec, tmp_path / "cells"), tmp_path / "agg", **FAST)
    summary = paths["summary"].read_text().splitlines()
    gap_rows = [line for line in summary if "| largest |" in line]
    assert gap_rows and all(line.rstrip(" |").endswith("floor") for line in gap_rows), gap_rows
    tost_rows = [line for line in summary if "| pass^1 |" in line or "| pass^2 |" in line]
    assert len(tost_rows) == 2 and all(line.rstrip(" |").endswith("| floor") for line in tost_rows), tost_rows
    assert not any(line.rstrip(" |").endswith("| yes") for line in tost_rows)
