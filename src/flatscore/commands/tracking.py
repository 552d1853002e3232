"""``init-tracking``, ``sync``, ``ui``: the study's MLflow store."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from flatscore.config_defaults import schema_default


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init-tracking", help="create the MLflow store once (before concurrent cells log into it)")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--results", default="results")
    p.add_argument("--marker", default=None, help="file to write when the store is ready")
    p.set_defaults(func=cmd_init_tracking)

    p = sub.add_parser("sync", help="log every cell not yet in MLflow (after the store was unreachable)")
    p.add_argument("--results", default="results")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--experiment", default=schema_default("tracking", "experiment"))
    p.add_argument("--marker", default=None, help="file to write with the counts")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("ui", help="start the MLflow UI for the study's store on 127.0.0.1")
    p.add_argument("--results", default="results")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.set_defaults(func=cmd_ui)


def _write_marker(path: str | None, payload: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, sort_keys=True) + "\n")


def cmd_init_tracking(args: argparse.Namespace) -> int:
    from flatscore.tracking import ensure_store, resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri, args.results)
    ensure_store(uri)
    _write_marker(args.marker, {"tracking_uri": uri})
    print(f"MLflow store ready: {uri}")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from flatscore.tracking import sync_results

    counts = sync_results(args.results, args.tracking_uri, args.experiment)
    print(f"MLflow sync: {counts}")
    _write_marker(args.marker, counts)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from flatscore.tracking import resolve_tracking_uri, ui_command

    command = ui_command(resolve_tracking_uri(args.tracking_uri, args.results), host=args.host, port=args.port)
    print("starting:", " ".join(command))
    os.execvp(command[0], command)
    return 0  # pragma: no cover
