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
    p.add_argument("--experiment", default=schema_default("tracking", "experiment"))
    p.add_argument("--marker", default=None, help="file to write when the store is ready")
    p.set_defaults(func=cmd_init_tracking)

    p = sub.add_parser("sync", help="log every cell not yet in MLflow (after the store was unreachable)")
    p.add_argument("--results", default="results")
    p.add_argument("--tracking-uri", default=None, help=f"default: the study's, from <results>/{STORE_MARKER}")
    p.add_argument(
        "--experiment",
        default=None,
        help=f"default: the study's, from <results>/{STORE_MARKER} (else {schema_default('tracking', 'experiment')!r})",
    )
    p.add_argument("--marker", default=None, help="file to write with the counts")
    p.set_defaults(func=cmd_sync)

    p = sub.add_parser("ui", help="start the MLflow UI for the study's store on 127.0.0.1")
    p.add_argument("--results", default="results")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5000)
    p.set_defaults(func=cmd_ui)


#: What the workflow's tracking_store rule leaves: the study's store and experiment, so that a
#: later ``flatscore sync`` logs where the study logs without being told again.
STORE_MARKER = "tracking/store.json"


def _study_tracking(results: str) -> dict:
    path = Path(results) / STORE_MARKER
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_marker(path: str | None, payload: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(payload, sort_keys=True) + "\n")


def cmd_init_tracking(args: argparse.Namespace) -> int:
    from flatscore.tracking import ensure_store, resolve_tracking_uri

    uri = resolve_tracking_uri(args.tracking_uri, args.results)
    ensure_store(uri)
    _write_marker(args.marker, {"tracking_uri": uri, "experiment": args.experiment})
    print(f"MLflow store ready: {uri}")
    return 0


def cmd_sync(args: argparse.Namespace) -> int:
    from flatscore.tracking import sync_results

    study = _study_tracking(args.results)
    uri = args.tracking_uri or study.get("tracking_uri")
    experiment = args.experiment or study.get("experiment") or schema_default("tracking", "experiment")
    counts = sync_results(args.results, uri, experiment)
    print(f"MLflow sync into experiment {experiment!r}: {counts}")
    _write_marker(args.marker, counts)
    return 0


def cmd_ui(args: argparse.Namespace) -> int:
    from flatscore.tracking import resolve_tracking_uri, ui_command

    command = ui_command(resolve_tracking_uri(args.tracking_uri, args.results), host=args.host, port=args.port)
    print("starting:", " ".join(command))
    os.execvp(command[0], command)
    return 0  # pragma: no cover
