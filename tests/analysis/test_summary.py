"""The per-cell summary (episodes.summary.npz) gives exactly what parsing the JSONL gives, or nothing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from flatscore.analysis import aggregate, load_cells
from flatscore.analysis import summary as summary_mod
from flatscore.analysis.summary import SUMMARY_FILE, read_summary, write_summary
from flatscore.analysis.synthetic import SyntheticStudy, write_study

SPEC = SyntheticStudy(
    precisions=("full", "int4"), budgets=(10, 2), repairs=(False, True), n_tasks=12, trials=3, infra_rate=0.05
)


def _frames_equal(a, b) -> None:
    pd.testing.assert_frame_equal(a.episodes, b.episodes)
    pd.testing.assert_frame_equal(a.error_events, b.error_events)
    pd.testing.assert_frame_equal(a.cells, b.cells)


def test_summaries_give_the_same_frames_and_tables(tmp_path):
    dirs = write_study(SPEC, tmp_path, summaries=False)
    assert not any((d / SUMMARY_FILE).exists() for d in dirs)
    parsed = load_cells(dirs)
    agg_parsed = aggregate(dirs, tmp_path / "agg_parsed", n_boot=200)
    assert all(write_summary(d) is not None for d in dirs)
    assert all(read_summary(d) is not None for d in dirs)
    _frames_equal(parsed, load_cells(dirs))
    agg_summary = aggregate(dirs, tmp_path / "agg_summary", n_boot=200)
    for name, path in agg_parsed.items():
        if path.suffix in (".csv", ".md"):
            assert path.read_bytes() == agg_summary[name].read_bytes(), name


def test_summary_of_another_jsonl_is_ignored(tmp_path):
    (d,) = write_study(SyntheticStudy(n_tasks=6, trials=2, budgets=(10,), precisions=("full",)), tmp_path)
    f = d / "episodes.jsonl"
    lines = f.read_bytes().splitlines(keepends=True)
    f.write_bytes(b"".join(lines[:-1]))  # one episode fewer, summary left as it was
    assert read_summary(d) is None
    assert len(load_cells([d]).episodes) == len(lines) - 1
    rec = json.loads(lines[0])
    rec["reward"] = 1.0 - rec["reward"]  # same size, other bytes: the SHA-256 tells
    f.write_bytes(
        json.dumps(rec, separators=(",", ":")).encode().ljust(len(lines[0]) - 1) + b"\n" + b"".join(lines[1:])
    )
    assert f.stat().st_size == sum(map(len, lines))
    assert read_summary(d) is None
    assert load_cells([d]).episodes["reward"].iloc[0] == rec["reward"]


def test_edited_or_foreign_summary_is_ignored(tmp_path, monkeypatch):
    (d,) = write_study(SyntheticStudy(n_tasks=6, trials=2, budgets=(10,), precisions=("full",)), tmp_path)
    with np.load(d / SUMMARY_FILE) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["ep_reward"] = 1.0 - arrays["ep_reward"]  # edited, checksum fields kept
    np.savez(d / SUMMARY_FILE, **arrays)
    assert read_summary(d) is None
    write_summary(d)
    assert read_summary(d) is not None
    monkeypatch.setattr(summary_mod, "CHANNELS", (*summary_mod.CHANNELS, "new_channel"))
    assert read_summary(d) is None  # built for another channel list
    (d / SUMMARY_FILE).write_bytes(b"not a zip")
    assert read_summary(d) is None


def test_no_summary_where_the_loader_must_parse(tmp_path):
    (d,) = write_study(SyntheticStudy(n_tasks=6, trials=2, budgets=(10,), precisions=("full",)), tmp_path)
    f = d / "episodes.jsonl"
    recs = [json.loads(line) for line in f.read_text().splitlines()]
    recs[1]["channels"]["brand_new"] = 2  # a channel outside CHANNELS
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert write_summary(d) is None and not (d / SUMMARY_FILE).exists()
    assert load_cells([d]).episodes["ch_brand_new"].tolist()[:3] == [0, 2, 0]
    f.write_text(f.read_text()[:-20])  # truncated last line: no summary, the loader's error stays
    assert write_summary(d) is None
    with pytest.raises(ValueError, match="truncated last line"):
        load_cells([d])
