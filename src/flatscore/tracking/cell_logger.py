"""Log one study cell to MLflow: one experiment per study, a "study" run, one run per cell
found again by its identity hash, never duplicated.

A cell folder (``<results>/cells/...``) holds ``cell.json``, ``episodes.jsonl`` and
``metrics.json``. :func:`log_cell` makes the cell's MLflow run match that folder:

* same content as already logged (tag ``flatscore.content_sha256``) -> no-op, same run id;
* content changed -> the *same* run gets new metric values (next step), fresh artifacts and
  traces; params already logged are immutable in MLflow and are kept;
* no run yet -> one is created beside the study run (tag ``flatscore.study_run_id``; not nested,
  so the UI lists every cell instead of folding them under one collapsed row), named by the
  cell's identity (:func:`~flatscore.tracking.cell_reader.cell_run_name`) and spanning the
  time its episodes ran (not the time logging took).

The content tag is written last, so a run interrupted half-way is redone on the next call.
After success a marker ``tracking.json`` is written in the cell folder; cells without a
current marker are "pending" (:mod:`flatscore.tracking.sync` logs them). :func:`try_log_cell`
never raises (the episode run must not die because MLflow is down).

What a run is made of is read by :mod:`~flatscore.tracking.cell_reader`, the MLflow calls are in
:mod:`~flatscore.tracking.mlflow_runs`, secrets are removed by :mod:`flatscore.redact`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import flatscore.tracking.mlflow_runs as runs
from flatscore.atomic_write import write_json_atomic
from flatscore.engine.cell_folder import CELL_FILE, CHANNEL_TABLE_FILE, EPISODES_FILE, MARKER_FILE, METRICS_FILE
from flatscore.redact import drop_secrets, redact_text, secret_env_values
from flatscore.tracking.cell_reader import (
    cell_run_name,
    channel_table_csv,
    content_sha256,
    numeric_metrics,
    read_cell,
    read_episodes,
    results_dir_of,
    scalar_params,
)
from flatscore.tracking.store import (
    bounded_http_env,
    ensure_store,
    file_lock,
    is_http,
    resolve_tracking_uri,
    store_lock_path,
    with_retry,
)

_log = logging.getLogger(__name__)

#: The artifact folder of a cell's run.
ARTIFACT_DIR = "cell"
#: Default: log traces for cells of at most this many episodes.
TRACE_MAX_EPISODES = 200
#: cell.json fields also set as plain tags (for the UI's run table).
_TAGGED_FIELDS = ("model", "precision", "domain", "budget", "repair", "agent", "backend")
#: What each arm ran on (flatscore.models.arm), tagged too: arms that differ in backend or dtype
#: show in the run table beside their precision.
_TAGGED_FIELDS += ("arm_scheme", "arm_backend", "arm_dtype")


# --------------------------------------------------------------------------------------------
# markers


def read_marker(cell_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The cell's ``tracking.json`` (run id, URI, content checksum logged), None if absent or bad."""
    try:
        return json.loads((Path(cell_dir) / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _marker(run_id: str, uri: str, sha: str, exp_id: str | None = None) -> dict[str, Any]:
    m = {
        "run_id": run_id,
        "uri": uri,
        "content_sha256": sha,
        "logged_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if exp_id is not None:
        m["experiment_id"] = exp_id
    return m


def _write_marker(cell_dir: Path, payload: dict[str, Any]) -> None:
    write_json_atomic(Path(cell_dir) / MARKER_FILE, payload)


def _write_marker_if_stale(cell_dir: Path, run_id: str, uri: str, sha: str) -> None:
    m = read_marker(cell_dir)
    if not m or m.get("run_id") != run_id or m.get("uri") != uri or m.get("content_sha256") != sha:
        _write_marker(cell_dir, _marker(run_id, uri, sha))


# --------------------------------------------------------------------------------------------
# public API


def log_cell(
    cell_dir: str | os.PathLike[str],
    tracking_uri: str | None = None,
    experiment_name: str | None = None,
    *,
    traces: bool | None = None,
) -> str:
    """Log (or update) one cell's run; return its run id. Raises on tracking failure.

    ``tracking_uri`` None -> ``sqlite:///<results>/mlflow.db``; ``experiment_name`` None ->
    the cell's study. ``traces`` None -> log one MLflow trace per episode when the cell has at
    most :data:`TRACE_MAX_EPISODES` episodes.
    """
    cell_dir = Path(cell_dir).resolve()
    uri = resolve_tracking_uri(tracking_uri, results_dir_of(cell_dir))
    cell, metrics = read_cell(cell_dir)
    sha = content_sha256(cell_dir)
    study = str(cell.get("study") or "flatscore")
    cell_hash = str(cell["cell_hash"])
    experiment_name = experiment_name or study
    run_name = cell_run_name(cell_dir, cell)

    ensure_store(uri)
    client = runs.client(uri)
    exp_id = runs.get_or_create_experiment(client, experiment_name, uri)

    episodes: list[dict[str, Any]] | None = None
    with file_lock(store_lock_path(uri, results_dir_of(cell_dir))):
        parent_id = runs.find_or_create_study_run(client, exp_id, study)
        found = runs.find_cell_runs(client, exp_id, cell_hash)
        if found:
            keep = runs.elect(found)
            for dup in found:  # heal duplicates left by lock-free concurrent writers
                if dup.info.run_id != keep.info.run_id:
                    with_retry(lambda d=dup: client.delete_run(d.info.run_id), what="delete_run")
            run_id = keep.info.run_id
            existing = keep
        else:
            tags = {
                runs.TAG_KIND: "cell",
                runs.TAG_CELL_HASH: cell_hash,
                runs.TAG_STUDY: study,
                runs.TAG_STUDY_RUN: parent_id,
            }
            episodes = read_episodes(cell_dir / EPISODES_FILE)  # read once: also logged below
            start_ms = episode_span_ms(cell_dir / EPISODES_FILE, episodes)[0]
            run = with_retry(
                lambda: client.create_run(exp_id, start_time=start_ms, run_name=run_name, tags=tags),
                what="create_run(cell)",
            )
            run_id = run.info.run_id
            existing = None

    if existing is not None and existing.data.tags.get(runs.TAG_CONTENT) == sha and existing.info.status == "FINISHED":
        _write_marker_if_stale(cell_dir, run_id, uri, sha)
        return run_id

    from mlflow.entities import Metric, Param, RunTag

    revision = 0
    if existing is not None:
        try:
            revision = int(existing.data.tags.get(runs.TAG_REVISION, "-1")) + 1
        except ValueError:
            revision = 1
        if existing.info.status != "RUNNING":
            with_retry(lambda: client.update_run(run_id, status="RUNNING"), what="update_run")

    secrets = secret_env_values()
    params = {k: redact_text(v, secrets) for k, v in scalar_params(cell).items()}
    if existing is not None:  # params are immutable: only add new ones, report changed ones
        old = existing.data.params
        changed = [k for k, v in params.items() if k in old and old[k] != v]
        if changed:
            _log.warning("cell %s: params changed since first logged, kept old values: %s", cell_hash, changed)
        params = {k: v for k, v in params.items() if k not in old}

    if episodes is None:
        episodes = read_episodes(cell_dir / EPISODES_FILE)
    now_ms = int(time.time() * 1000)
    metric_values = numeric_metrics(metrics)
    metric_values.setdefault("n_episodes", float(len(episodes)))
    mlf_metrics = [Metric(k, v, now_ms, revision) for k, v in sorted(metric_values.items())]
    tags = {
        runs.TAG_KIND: "cell",
        runs.TAG_CELL_HASH: cell_hash,
        runs.TAG_STUDY: study,
        runs.TAG_CELL_ID: run_name,
        runs.TAG_RUN_NAME: run_name,  # renames a run first logged under its bare folder name
        runs.TAG_STUDY_RUN: parent_id,
        runs.TAG_REVISION: str(revision),
    }
    for k in _TAGGED_FIELDS:
        if k in cell and cell[k] is not None and not isinstance(cell[k], (dict, list)):
            tags[k] = redact_text(str(cell[k]), secrets)
    runs.log_batch(
        client,
        run_id,
        metrics=mlf_metrics,
        params=[Param(k, v) for k, v in sorted(params.items())],
        tags=[RunTag(k, v) for k, v in tags.items()],
    )

    _log_artifacts(client, run_id, cell_dir, cell, episodes, secrets)

    if traces is None:
        traces = len(episodes) <= TRACE_MAX_EPISODES
    if traces and episodes:
        try:
            from flatscore.tracking.traces import log_episode_traces

            log_episode_traces(uri, exp_id, run_id, episodes, secrets=secrets, replace=existing is not None)
        except Exception as e:  # noqa: BLE001 - traces are a convenience, never fatal
            _log.warning("cell %s: traces not logged: %s", cell_hash, e)

    # Last: the content tag says "this run holds this content".
    with_retry(lambda: client.set_tag(run_id, runs.TAG_CONTENT, sha), what="set_tag")
    if existing is not None and runs.TAG_PARENT in existing.data.tags:  # nested by an older flatscore
        with_retry(lambda: client.delete_tag(run_id, runs.TAG_PARENT), what="delete_tag")
    end_ms = episode_span_ms(cell_dir / EPISODES_FILE, episodes)[1]
    with_retry(lambda: client.set_terminated(run_id, "FINISHED", end_time=end_ms), what="set_terminated")
    _write_marker(cell_dir, _marker(run_id, uri, sha, exp_id))
    return run_id


def episode_span_ms(path: Path, episodes: list[dict[str, Any]] | None = None) -> tuple[int | None, int | None]:
    """(first start, last end) of a cell's episodes in epoch ms, from their ``timing``; (None, None)
    where the records predate ``ended_at`` (MLflow then uses the logging time)."""
    if episodes is None:
        episodes = read_episodes(path) if path.exists() else []
    spans = [
        (t["ended_at"] - float(t.get("wall_seconds") or 0.0), t["ended_at"])
        for t in (e.get("timing") or {} for e in episodes)
        if isinstance(t.get("ended_at"), (int, float))
    ]
    if not spans:
        return None, None
    return int(min(s for s, _ in spans) * 1000), int(max(e for _, e in spans) * 1000)


def _log_artifacts(
    client: Any, run_id: str, cell_dir: Path, cell: dict[str, Any], episodes: list[dict[str, Any]], secrets: list[str]
) -> None:
    """The run's ``cell/`` artifacts: cell.json without secrets, the episodes and metrics files
    (secret values redacted) and the per-task channel table."""
    with tempfile.TemporaryDirectory(prefix="flatscore-artifacts-") as tmp:
        stage = Path(tmp) / ARTIFACT_DIR
        stage.mkdir()
        (stage / CELL_FILE).write_text(
            redact_text(json.dumps(drop_secrets(cell), indent=2, sort_keys=True), secrets) + "\n",
            encoding="utf-8",
        )
        for name in (EPISODES_FILE, METRICS_FILE):
            src = cell_dir / name
            if not src.exists():
                continue
            if secrets:
                text = src.read_text(encoding="utf-8")
                (stage / name).write_text(redact_text(text, secrets), encoding="utf-8")
            else:
                shutil.copyfile(src, stage / name)
        (stage / CHANNEL_TABLE_FILE).write_text(channel_table_csv(episodes), encoding="utf-8")
        with_retry(lambda: client.log_artifacts(run_id, str(stage), ARTIFACT_DIR), what="log_artifacts")


def try_log_cell(
    cell_dir: str | os.PathLike[str],
    tracking_uri: str | None = None,
    experiment_name: str | None = None,
    **kwargs: Any,
) -> str | None:
    """:func:`log_cell` that never raises: on any failure log a warning, return None and leave
    the cell pending (``flatscore sync`` logs it later). HTTP retries are bounded."""
    try:
        with bounded_http_env() if tracking_uri and is_http(tracking_uri) else contextlib.nullcontext():
            return log_cell(cell_dir, tracking_uri, experiment_name, **kwargs)
    except Exception as e:  # noqa: BLE001 - by contract
        _log.warning("MLflow logging of %s failed, cell left pending: %s: %s", cell_dir, type(e).__name__, e)
        return None
