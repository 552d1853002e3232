"""Error channels of quantized vs full arms: amplification ratios and failure-mode stability.

Amplification: per channel, errors per call and per episode of the quantized arm over the full
arm's, with one paired task bootstrap for all channels (:func:`~flatscore.analysis.bootstrap.bootci_tasks`).
Stability: whether the quantized arm errs at the same (task, tool) places as the full arm
(Spearman over the full grid) and how many of its events are novel.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import pingouin as pg

from flatscore.analysis.bootstrap import bootci_tasks
from flatscore.analysis.bounds import FLOOR, NO_ERRORS, success_bound
from flatscore.analysis.tasks import (
    ARM_KEYS,
    CMP_KEYS,
    REFERENCE_PRECISION,
    USER_SIDE_CHANNELS,
    channel_columns,
    iter_pairs,
    task_table,
)
from flatscore.engine.records import SERVER_CHANNELS


# ---------------------------------------------------------------------------------- amplification
def _calls_col(channel: str) -> str:
    return "user_tool_calls" if channel in USER_SIDE_CHANNELS else "agent_tool_calls"


def amplification_table(
    episodes: pd.DataFrame, n_boot: int = 2000, seed: int = 0, tasks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per channel: errors per call and per episode, quantized/full ratio with paired task bootstrap.

    ``ratio_per_call`` = (quantized errors / calls) / (full errors / calls), pooled over tasks;
    ``ratio_per_task`` = mean over tasks of the quantized per-episode rate / same for full.
    Calls are agent tool calls, user tool calls for ``user_tool_error``, both for ``all_errors``
    (every recorded error of the model, counted toward the budget or not; the server's channels,
    ``SERVER_CHANNELS``, get their own rows but are not in it). CIs: one paired bootstrap over
    tasks (both arms resampled together) for all channels at once.

    No ratio where it would compare nothing: ``bound`` is ``floor`` where both arms solve no task
    (their errors are those of two failures) and ``no errors`` where neither arm made an error of
    the channel. At the ``ceiling`` (both arms solve every task) the ratio stays: errors recovered
    within the budget are exactly the damage a flat score hides.
    """
    tasks = task_table(episodes) if tasks is None else tasks
    # the model's errors only: a server's parser misses are not summed with them (own rows still)
    base = [c for c in channel_columns(episodes) if c != "hallucinated_tool" and c not in SERVER_CHANNELS]
    channels = channel_columns(episodes) + ["all_errors"]
    rows = []
    for grp, prec, ref, tr in iter_pairs(tasks, CMP_KEYS, "precision", REFERENCE_PRECISION):
        if len(ref) == 0:
            continue
        fn, qn = ref["n"].to_numpy(float), tr["n"].to_numpy(float)
        arms_bound = success_bound(ref["pass_rate"], tr["pass_rate"])
        blocks = []
        for ch in channels:
            if ch == "all_errors":
                fe, qe = (
                    ref[[f"ch_{c}" for c in base]].sum(axis=1).to_numpy(float),
                    tr[[f"ch_{c}" for c in base]].sum(axis=1).to_numpy(float),
                )
                fc = (ref["agent_tool_calls"] + ref["user_tool_calls"]).to_numpy(float)
                qc = (tr["agent_tool_calls"] + tr["user_tool_calls"]).to_numpy(float)
            else:
                fe, qe = ref[f"ch_{ch}"].to_numpy(float), tr[f"ch_{ch}"].to_numpy(float)
                fc, qc = ref[_calls_col(ch)].to_numpy(float), tr[_calls_col(ch)].to_numpy(float)
            blocks.append(np.column_stack([qe, qc, fe, fc, qe / qn, fe / fn]))
        A = np.hstack(blocks)  # (n_tasks, 6 * n_channels)

        def stat(S, n):
            S = S.reshape(S.shape[0], len(channels), 6)
            with np.errstate(all="ignore"):
                per_call = (S[..., 0] / S[..., 1]) / (S[..., 2] / S[..., 3])
                per_task = S[..., 4] / S[..., 5]
            return np.hstack([per_call, per_task])

        point = stat(A.sum(0, keepdims=True), len(A))[0]
        lo, hi = bootci_tasks(A, stat, n_boot=n_boot, seed=seed)
        nc = len(channels)
        for j, ch in enumerate(channels):
            b = A[:, 6 * j : 6 * j + 6].sum(0)
            bound = arms_bound or (NO_ERRORS if b[0] == 0 and b[2] == 0 else "")
            has_ref = b[2] > 0 and bound not in (FLOOR, NO_ERRORS)
            rows.append(
                {
                    **grp,
                    "reference": REFERENCE_PRECISION,
                    "precision": prec,
                    "channel": ch,
                    "n_tasks": len(A),
                    "count_ref": int(b[2]),
                    "count_treat": int(b[0]),
                    "calls_ref": int(b[3]),
                    "calls_treat": int(b[1]),
                    "rate_per_call_ref": b[2] / b[3] if b[3] else math.nan,
                    "rate_per_call_treat": b[0] / b[1] if b[1] else math.nan,
                    "ratio_per_call": point[j] if has_ref else math.nan,
                    "ratio_per_call_ci_low": lo[j] if has_ref else math.nan,
                    "ratio_per_call_ci_high": hi[j] if has_ref else math.nan,
                    "rate_per_episode_ref": b[5] / len(A),
                    "rate_per_episode_treat": b[4] / len(A),
                    "ratio_per_task": point[nc + j] if has_ref else math.nan,
                    "ratio_per_task_ci_low": lo[nc + j] if has_ref else math.nan,
                    "ratio_per_task_ci_high": hi[nc + j] if has_ref else math.nan,
                    "bound": bound,
                }
            )
    cols = [
        *CMP_KEYS,
        "reference",
        "precision",
        "channel",
        "n_tasks",
        "count_ref",
        "count_treat",
        "calls_ref",
        "calls_treat",
        "rate_per_call_ref",
        "rate_per_call_treat",
        "ratio_per_call",
        "ratio_per_call_ci_low",
        "ratio_per_call_ci_high",
        "rate_per_episode_ref",
        "rate_per_episode_treat",
        "ratio_per_task",
        "ratio_per_task_ci_low",
        "ratio_per_task_ci_high",
        "bound",
    ]
    return pd.DataFrame(rows, columns=cols)


# ------------------------------------------------------------------------------------- stability
def stability_table(
    episodes: pd.DataFrame, error_events: pd.DataFrame, tasks: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Spearman rho of per-(task, tool) error counts full vs quantized; share of novel events.

    The correlation runs over the full grid (paired tasks x every tool either arm erred at,
    zeros included): restricted to the union of observed keys, sparse counts would bias rho
    negative even for two draws of one process. A *novel* event is a quantized-arm event at a
    (task, tool, channel) key the full arm of the same (study, model, domain, budget, repair)
    never produced (note: with few trials per task, sampling alone makes some events novel).
    Scope ``all`` uses every channel of the model's (not the server's), ``hallucinated_tool`` only
    invented_tool + other_side_tool.
    Scored episodes of paired tasks only.
    """
    cols = [
        *CMP_KEYS,
        "reference",
        "precision",
        "scope",
        "n_tasks",
        "n_tools",
        "n_keys",
        "events_ref",
        "events_treat",
        "spearman_r",
        "spearman_p",
        "novel_events",
        "novel_share",
        "novel_keys",
    ]
    tasks = task_table(episodes) if tasks is None else tasks
    if len(error_events) == 0:
        return pd.DataFrame(columns=cols)
    ev = error_events[episodes["scored"].to_numpy()[error_events["episode_row"].to_numpy()]]
    ev = ev[~ev["channel"].astype(str).isin(SERVER_CHANNELS)]  # where the model errs, not the server
    keys = ARM_KEYS + ["task_id", "tool", "channel"]
    cnt = ev.groupby(keys, observed=True).size().rename("count").reset_index()
    # integer codes, sorted like the strings: grids and keys are built from them, not from text
    codes = {}
    names = {}
    for c in ("task_id", "tool", "channel"):
        code, uniq = pd.factorize(cnt[c].astype(str).to_numpy(dtype=object), sort=True)
        codes[c], names[c] = code.astype(np.int64), np.asarray(uniq, dtype=object)
    prec_str = cnt["precision"].astype(str).to_numpy(dtype=object)
    count_v = cnt["count"].to_numpy(float)
    n_tool, n_chan = max(len(names["tool"]), 1), max(len(names["channel"]), 1)
    event_key = (codes["task_id"] * n_tool + codes["tool"]) * n_chan + codes["channel"]
    hall_codes = np.flatnonzero(np.isin(names["channel"], ["invented_tool", "other_side_tool"]))
    is_hall = np.isin(codes["channel"], hall_codes)
    task_lookup = pd.Index(names["task_id"])
    group_rows = {
        k if isinstance(k, tuple) else (k,): np.asarray(ix)
        for k, ix in cnt.groupby(CMP_KEYS, observed=True, sort=True).indices.items()
    }
    rows = []
    empty = np.zeros(0, dtype=np.int64)
    for grp, prec, ref, tr in iter_pairs(tasks, CMP_KEYS, "precision", REFERENCE_PRECISION):
        key = tuple(grp[k] for k in CMP_KEYS)
        gi = group_rows.get(key, empty)
        paired = sorted(set(ref.index.astype(str)))
        # position of each event task among the paired tasks (sorted as strings); -1: not paired
        task_pos = np.full(len(names["task_id"]), -1, dtype=np.int64)
        where = task_lookup.get_indexer(paired)
        task_pos[where[where >= 0]] = np.flatnonzero(where >= 0)
        gi = gi[task_pos[codes["task_id"][gi]] >= 0]
        for scope in ("all", "hallucinated_tool"):
            si = gi if scope == "all" else gi[is_hall[gi]]
            fi = si[prec_str[si] == REFERENCE_PRECISION]
            qi = si[prec_str[si] == str(prec)]
            tools = np.union1d(codes["tool"][fi], codes["tool"][qi])  # sorted codes = sorted names
            tool_pos = np.full(n_tool, -1, dtype=np.int64)
            tool_pos[tools] = np.arange(len(tools))
            size = len(paired) * len(tools)

            def grid_counts(ix):
                pos = task_pos[codes["task_id"][ix]] * len(tools) + tool_pos[codes["tool"][ix]]
                return np.bincount(pos, weights=count_v[ix], minlength=size)

            fv, qv = grid_counts(fi), grid_counts(qi)
            r = p = math.nan
            if size >= 3 and np.ptp(fv) > 0 and np.ptp(qv) > 0:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    c = pg.corr(fv, qv, method="spearman")
                r, p = float(c["r"].iloc[0]), float(c["p_val"].iloc[0])
            novel_mask = ~np.isin(event_key[qi], event_key[fi])
            n_q = int(count_v[qi].sum())
            novel = int(count_v[qi][novel_mask].sum())
            rows.append(
                {
                    **grp,
                    "reference": REFERENCE_PRECISION,
                    "precision": prec,
                    "scope": scope,
                    "n_tasks": len(paired),
                    "n_tools": len(tools),
                    "n_keys": size,
                    "events_ref": int(count_v[fi].sum()),
                    "events_treat": n_q,
                    "spearman_r": r,
                    "spearman_p": p,
                    "novel_events": novel,
                    "novel_share": novel / n_q if n_q else math.nan,
                    "novel_keys": int(novel_mask.sum()),
                }
            )
    return pd.DataFrame(rows, columns=cols)
