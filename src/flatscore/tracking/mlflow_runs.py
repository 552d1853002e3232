"""The MLflow client calls of the cell logger: experiment, study run, finding a cell's runs, log_batch.

Every call goes through :func:`~flatscore.tracking.store.with_retry` (a shared sqlite store
answers "database is locked" under contention). Runs are found by tags, never by name, so that
concurrent writers converge: duplicates are resolved by :func:`elect` (earliest, then smallest id).
MLflow is imported inside the functions: importing :mod:`flatscore.tracking` must stay cheap for
the episodes command, which only logs when asked to.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flatscore.tracking.store import default_artifact_root, with_retry

TAG_KIND = "flatscore.kind"
TAG_STUDY = "flatscore.study"
TAG_CELL_HASH = "flatscore.cell_hash"
TAG_CONTENT = "flatscore.content_sha256"
TAG_REVISION = "flatscore.revision"
TAG_CELL_ID = "flatscore.cell_id"
TAG_PARENT = "mlflow.parentRunId"
#: Cell runs name their study run here instead of nesting under it: nested, the UI folds every
#: cell run under one collapsed study row, and a newcomer sees one run where the study has dozens.
TAG_STUDY_RUN = "flatscore.study_run_id"
#: MLflow 3's UI opens an experiment by its kind; without it, on the traces page.
TAG_EXPERIMENT_KIND = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
TAG_RUN_NAME = "mlflow.runName"

#: MLflow's limits on one log_batch call.
BATCH_ENTITIES, BATCH_PARAMS, BATCH_TAGS = 1000, 100, 100


def client(uri: str) -> Any:
    """An ``MlflowClient`` bound to ``uri`` (not to the global tracking URI)."""
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def get_or_create_experiment(mlflow_client: Any, name: str, uri: str) -> str:
    """The id of experiment ``name``: restored if deleted, created if absent (a lost race is fine)."""
    from mlflow.exceptions import MlflowException

    def get() -> Any:
        return mlflow_client.get_experiment_by_name(name)

    exp = with_retry(get, what="get_experiment")
    if exp is not None:
        if exp.lifecycle_stage == "deleted":
            with_retry(lambda: mlflow_client.restore_experiment(exp.experiment_id), what="restore_experiment")
        if TAG_EXPERIMENT_KIND not in exp.tags:  # made before flatscore set it
            with_retry(
                lambda: mlflow_client.set_experiment_tag(exp.experiment_id, TAG_EXPERIMENT_KIND, EXPERIMENT_KIND),
                what="set_experiment_tag",
            )
        return exp.experiment_id
    try:
        return with_retry(
            lambda: mlflow_client.create_experiment(
                name,
                artifact_location=default_artifact_root(uri),
                tags={TAG_STUDY: name, TAG_EXPERIMENT_KIND: EXPERIMENT_KIND},
            ),
            what="create_experiment",
        )
    except MlflowException as e:  # another process won the race
        exp = with_retry(get, what="get_experiment")
        if exp is None:
            raise e
        return exp.experiment_id


def search(mlflow_client: Any, exp_id: str, filter_string: str) -> list[Any]:
    """Active runs of ``exp_id`` matching ``filter_string``, oldest first."""
    from mlflow.entities import ViewType

    return with_retry(
        lambda: mlflow_client.search_runs(
            [exp_id],
            filter_string=filter_string,
            run_view_type=ViewType.ACTIVE_ONLY,
            max_results=1000,
            order_by=["attributes.start_time ASC"],
        ),
        what="search_runs",
    )


def quote(value: str) -> str:
    """``value`` as a quoted string literal of MLflow's search filter syntax."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def elect(runs: Iterable[Any]) -> Any:
    """The canonical run of duplicates: earliest start time, then smallest id."""
    return min(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def find_or_create_study_run(mlflow_client: Any, exp_id: str, study: str) -> str:
    """The id of the study's parent run, created (finished, empty) if there is none."""
    flt = f"tags.`{TAG_KIND}` = 'study' and tags.`{TAG_STUDY}` = {quote(study)}"
    runs = search(mlflow_client, exp_id, flt)
    if runs:
        return elect(runs).info.run_id
    run = with_retry(
        lambda: mlflow_client.create_run(exp_id, run_name=study, tags={TAG_KIND: "study", TAG_STUDY: study}),
        what="create_run(study)",
    )
    with_retry(lambda: mlflow_client.set_terminated(run.info.run_id, "FINISHED"), what="set_terminated")
    # Without a shared lock (several machines on one server) two processes may both create it:
    # keep the elected one, drop ours if we lost.
    runs = search(mlflow_client, exp_id, flt)
    winner = elect(runs).info.run_id if runs else run.info.run_id
    if winner != run.info.run_id:
        with_retry(lambda: mlflow_client.delete_run(run.info.run_id), what="delete_run")
    return winner


def find_cell_runs(mlflow_client: Any, exp_id: str, cell_hash: str) -> list[Any]:
    """Every active run of the cell with identity hash ``cell_hash`` (normally one)."""
    flt = f"tags.`{TAG_KIND}` = 'cell' and tags.`{TAG_CELL_HASH}` = {quote(cell_hash)}"
    return search(mlflow_client, exp_id, flt)


def log_batch(
    mlflow_client: Any, run_id: str, *, metrics: Iterable = (), params: Iterable = (), tags: Iterable = ()
) -> None:
    """Log any number of metrics, params and tags in as few calls as MLflow's batch limits allow."""
    metrics, params, tags = list(metrics), list(params), list(tags)
    while metrics or params or tags:
        p, params = params[:BATCH_PARAMS], params[BATCH_PARAMS:]
        t, tags = tags[:BATCH_TAGS], tags[BATCH_TAGS:]
        room = BATCH_ENTITIES - len(p) - len(t)
        m, metrics = metrics[:room], metrics[room:]
        with_retry(lambda: mlflow_client.log_batch(run_id, metrics=m, params=p, tags=t), what="log_batch")
