"""The command that opens MLflow's UI on a tracking store (bound to localhost by default)."""

from __future__ import annotations

import shutil
import sys

from flatscore.tracking.store import is_sqlite, sqlite_path


def ui_command(tracking_uri: str, host: str = "127.0.0.1", port: int = 5000) -> list[str]:
    """``mlflow ui --backend-store-uri URI --host HOST --port PORT`` as an argv list.

    Binds 127.0.0.1 unless another host is asked for explicitly. For a sqlite store the UI
    serves the artifacts written next to it (``<db dir>/mlartifacts``).
    """
    exe = shutil.which("mlflow")
    argv = [exe] if exe else [sys.executable, "-m", "mlflow"]
    argv += ["ui", "--backend-store-uri", tracking_uri]
    if is_sqlite(tracking_uri) and tracking_uri.startswith("sqlite:///"):
        argv += ["--artifacts-destination", str(sqlite_path(tracking_uri).parent / "mlartifacts")]
    argv += ["--host", str(host), "--port", str(int(port))]
    return argv
