"""The study-level run gets the aggregate: its tables, summary and plots as artifacts, headline metrics.

Cells are logged one run each (:mod:`flatscore.tracking.cell_logger`) under the study's parent
run; the statistics over all of them belong to that parent. Metrics are logged with the step of
the run's next revision, so an aggregate rerun after new cells adds a point instead of
overwriting the old one; artifacts under ``aggregate/`` are replaced file by file.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from pathlib import Path

from flatscore.tracking import mlflow_runs as runs
from flatscore.tracking.store import ensure_store, file_lock, resolve_tracking_uri, store_lock_path, with_retry

ARTIFACT_DIR = "aggregate"
TAG_AGGREGATE_REVISION = "flatscore.aggregate_revision"


def log_aggregate(
    aggregate_dir: str | os.PathLike[str],
    results_dir: str | os.PathLike[str],
    study: str,
    metrics: Mapping[str, float],
    tracking_uri: str | None = None,
    experiment_name: str | None = None,
) -> str:
    """Log ``aggregate_dir`` (every file in it, plots included) and the finite ``metrics`` to the
    study's run; return its id. ``tracking_uri`` None: ``sqlite:///<results>/mlflow.db``."""
    from mlflow.entities import Metric, RunTag

    uri = resolve_tracking_uri(tracking_uri, results_dir)
    ensure_store(uri)
    client = runs.client(uri)
    exp_id = runs.get_or_create_experiment(client, experiment_name or study, uri)
    with file_lock(store_lock_path(uri, results_dir)):
        run_id = runs.find_or_create_study_run(client, exp_id, study)
    run = with_retry(lambda: client.get_run(run_id), what="get_run(study)")
    revision = int(run.data.tags.get(TAG_AGGREGATE_REVISION, "-1")) + 1
    now = int(time.time() * 1000)
    finite = {k: float(v) for k, v in metrics.items() if v is not None and math.isfinite(float(v))}
    runs.log_batch(
        client,
        run_id,
        metrics=[Metric(k, v, now, revision) for k, v in sorted(finite.items())],
        tags=[RunTag(TAG_AGGREGATE_REVISION, str(revision))],
    )
    with_retry(
        lambda: client.log_artifacts(run_id, str(Path(aggregate_dir)), ARTIFACT_DIR), what="log_artifacts(aggregate)"
    )
    return run_id
