"""MLflow tracking for flatscore: one run per cell, nested under a study run.

Public API::

    resolve_tracking_uri(uri_or_none, results_dir) -> str
    ensure_store(uri) -> None
    log_cell(cell_dir, tracking_uri=None, experiment_name=None, *, traces=None) -> str
    try_log_cell(cell_dir, tracking_uri=None, experiment_name=None, **kw) -> str | None
    sync_results(results_dir, tracking_uri=None, experiment_name=None, **kw) -> dict[str, int]
    ui_command(tracking_uri, host="127.0.0.1", port=5000) -> list[str]
"""

from flatscore.tracking.cell_logger import is_pending, log_cell, sync_results, try_log_cell
from flatscore.tracking.store import ensure_store, resolve_tracking_uri
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
