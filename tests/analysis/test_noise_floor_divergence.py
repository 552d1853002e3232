"""The A/A noise floor and first divergence on synthetic studies with planted properties."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from flatscore.analysis import divergence as dv
from flatscore.analysis.load import load_cells, split_replicates
from flatscore.analysis.noise_floor import AA, noise_floor_table
from flatscore.analysis.report import TABLES, aggregate
from flatscore.analysis.stats import compare_precisions
from flatscore.analysis.synthetic import SyntheticStudy, write_study
from flatscore.tracking.study_logger import log_aggregate

FAST = dict(n_boot=200)
#: the tables that existed before the noise floor: replicates must not change them
OLD_TABLES = TABLES[: TABLES.index("power") + 1]


@pytest.mark.parametrize("turn, channel, share", [(8, "invalid_arguments", 0.5), (14, "tool_error", 0.25)])
def test_planted_divergence_turn_channel_and_amplification_are_recovered(tmp_path, turn, channel, share):
    spec = SyntheticStudy(
        precisions=("full", "int4"),
        budgets=(10,),
        n_tasks=16,
        trials=4,
        infra_rate=0.0,
        divergence_turn=turn,
        divergence_channel=channel,
        amplified_share=share,
        replicates=1,
    )
    data = load_cells(write_study(spec, tmp_path))
    main, _ = split_replicates(data)
    pairs = dv.divergence_table(data.cells, main.episodes, window=2)
    aa = pairs[pairs["precision"] == AA]  # the replicate's planted trajectories equal full precision's
    assert len(aa) == spec.n_tasks * spec.trials and not aa["diverged"].any()
    pairs = pairs[pairs["precision"] == "int4"]
    assert len(pairs) == spec.n_tasks * spec.trials
    diverged = pairs[pairs["diverged"]]
    assert set(diverged["trial"]) == {0, 2} and not pairs.loc[pairs["trial"] % 2 == 1, "diverged"].any()
    assert set(diverged["turn"]) == {turn}
    assert set(diverged["kind"]) == {"tool_call"} and set(diverged["tool"]) == {"wrong_tool"}
    assert set(diverged["error_channel"]) == {channel} and set(diverged["error_distance"]) == {1}
    channels = dv.divergence_channels(pairs)
    assert list(channels["channel"]) == [channel]
    assert channels["share_amplified"].iloc[0] == pytest.approx(share)
    # amplified exactly at the tasks where full precision was planted to err in that channel
    planted = {f"retail_task_{t:04d}" for t in range(round(share * spec.n_tasks))}
    assert set(diverged.loc[diverged["amplified"], "task_id"]) == planted
    summary = dv.divergence_summary(pairs).iloc[0]
    assert summary["share_diverged"] == 0.5 and summary["turn_median"] == turn
    fails = pairs[pairs["quant_failed"]]
    assert summary["share_failures_at_divergence"] == pytest.approx(fails["diverged"].mean())
    lo, hi = sps.binomtest(int(fails["diverged"].sum()), len(fails)).proportion_ci(method="wilson")
    assert (summary["failures_ci_low"], summary["failures_ci_high"]) == pytest.approx((lo, hi))


def test_a_window_shorter_than_the_gap_to_the_error_finds_no_following_error(tmp_path):
    spec = SyntheticStudy(precisions=("full", "int4"), budgets=(10,), n_tasks=6, trials=2, divergence_turn=5)
    data = load_cells(write_study(spec, tmp_path))
    assert dv.divergence_table(data.cells, data.episodes, window=1)["error_follows"].any()
    assert not dv.divergence_table(data.cells, data.episodes, window=0)["error_follows"].any()


def test_first_divergence_compares_what_was_done_not_raw_text_or_call_ids():
    call = {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "t", "arguments": "{}"}}], "raw": "x"}
    same = {"role": "assistant", "tool_calls": [{"id": "b", "function": {"name": "t", "arguments": "{}"}}], "raw": "y"}
    other = {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "u", "arguments": "{}"}}]}
    assert dv.signature(call) == dv.signature(same) != dv.signature(other)
    sig = [dv.signature(m) for m in (call, other)]
    assert dv.first_divergence(sig, sig) is None
    assert dv.first_divergence(sig, sig[:1]) == 1
    assert dv.first_divergence(sig, [sig[0], sig[0]]) == 1
    assert dv.kind_of(other) == ("tool_call", "u") and dv.kind_of(None) == ("ended", "")


def _noise_floor(tmp_path, **kw) -> pd.DataFrame:
    spec = SyntheticStudy(precisions=("full", "int4"), budgets=(10,), n_tasks=30, trials=4, replicates=2, **kw)
    main, reps = split_replicates(load_cells(write_study(spec, tmp_path)))
    return noise_floor_table(main.episodes, reps, compare_precisions(main.episodes, n_boot=200))


def test_identical_arms_are_lossless_and_a_worse_arm_is_not(tmp_path):
    same = _noise_floor(tmp_path / "same", identical=True, infra_rate=0.0)
    aa, q = same[same["arm"] == AA].iloc[0], same[same["arm"] == "int4"].iloc[0]
    assert aa["replicates"] == 2 and aa["n_pairs"] == 2 * 30 * 4
    assert aa["flip_rate"] > 0.1  # independent seeds: the same model disagrees with itself
    assert q["flip_rate"] == 0 and q["icc"] == pytest.approx(1.0)
    assert q["flip_within_aa"] and q["equivalent"] and q["lossless"]
    worse = _noise_floor(tmp_path / "worse", success_shift={"full": 0.0, "int4": -0.35})
    w = worse[worse["arm"] == "int4"].iloc[0]
    assert w["gap"] < -0.2 and not w["equivalent"] and not w["lossless"]
    assert w["aa_flip_rate"] == worse.loc[worse["arm"] == AA, "flip_rate"].iloc[0]


def test_without_replicates_nothing_is_lossless(tmp_path):
    spec = SyntheticStudy(precisions=("full", "int4"), budgets=(10,), n_tasks=10, trials=2, identical=True)
    main, reps = split_replicates(load_cells(write_study(spec, tmp_path)))
    table = noise_floor_table(main.episodes, reps, compare_precisions(main.episodes, n_boot=200))
    assert list(table["arm"]) == ["int4"] and not table["lossless"].any() and table["aa_flip_rate"].isna().all()


def test_replicates_change_no_table_that_existed_before(tmp_path):
    base = dict(precisions=("full", "int4"), budgets=(10, 2), n_tasks=12, trials=2)
    off = aggregate(write_study(SyntheticStudy(**base), tmp_path / "off"), tmp_path / "off" / "agg", **FAST)
    on = aggregate(write_study(SyntheticStudy(**base, replicates=1), tmp_path / "on"), tmp_path / "on" / "agg", **FAST)
    for name in OLD_TABLES:
        assert on[name].read_text() == off[name].read_text(), name
    floor = pd.read_csv(on["noise_floor"])
    assert (floor["arm"] == AA).sum() == 2 and (pd.read_csv(off["noise_floor"])["arm"] != AA).all()
    assert "## A/A noise floor" in on["summary"].read_text()


def test_aggregate_logs_tables_and_headline_figures_to_the_study_run(tmp_path):
    from mlflow.tracking import MlflowClient

    spec = SyntheticStudy(precisions=("full", "int4"), budgets=(10,), n_tasks=10, trials=2, replicates=1)
    spec.divergence_turn = 5
    dirs = write_study(spec, tmp_path)
    out = tmp_path / "aggregate"
    written = aggregate(dirs, out, **FAST)
    log_aggregate(out, tmp_path, "syn", json.loads(written["headline"].read_text()), None, "e")
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("e").experiment_id])
    (study_run,) = [r for r in runs if r.data.tags.get("flatscore.kind") == "study"]
    names = {a.path for a in client.list_artifacts(study_run.info.run_id, "aggregate")}
    assert {"aggregate/noise_floor.csv", "aggregate/divergence.csv", "aggregate/summary.md"} <= names
    floor = pd.read_csv(out / "noise_floor.csv")
    aa = floor[floor["arm"] == AA].iloc[0]
    metric = study_run.data.metrics["flip_rate/demo/retail/K10/repair-off/full-AA"]
    assert metric == pytest.approx(aa["flip_rate"])
    summary = pd.read_csv(out / "divergence_summary.csv").set_index("precision").loc["int4"]
    assert study_run.data.metrics["turn_median/demo/retail/K10/repair-off/int4"] == summary["turn_median"] == 5
    assert np.isfinite(study_run.data.metrics["mcnemar_p/demo/retail/K10/repair-off/int4"])
