"""MLflow tracking for flatscore: one run per cell, nested under a study run.

Public API::

    resolve_tracking_uri(uri_or_none, results_dir) -> str
    ensure_store(uri) -> None
    log_cell(cell_dir, tracking_uri=None, experiment_name=None, *, traces=None) -> str
    try_log_cell(cell_dir, tracking_uri=None, experiment_name=None, **kw) -> str | None
    sync_results(results_dir, tracking_uri=None, experiment_name=None, **kw) -> dict[str, int]
    ui_command(tracking_uri, host="127.0.0.1", port=5000) -> list[str]

Modules, one job each: ``redact`` (secrets), ``cell_reader`` (what a cell's run is made of),
``mlflow_runs`` (the MLflow client calls), ``cell_logger`` (log_cell and the cell's marker),
``sync`` (pending cells), ``traces`` (one trace per episode), ``store`` (URI, store, retries).
"""

from flatscore.tracking.cell_logger import log_cell, try_log_cell
from flatscore.tracking.store import ensure_store, resolve_tracking_uri
from flatscore.tracking.sync import is_pending, sync_results
from flatscore.tracking.ui import ui_command

__all__ = [
    "ensure_store",
    "is_pending",
    "log_cell",
    "resolve_tracking_uri",
    "sync_results",
    "try_log_cell",
    "ui_command",
]
