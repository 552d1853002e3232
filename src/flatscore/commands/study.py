"""``aggregate`` and ``report``: the study's statistics, plots and report page."""

from __future__ import annotations

import argparse
from pathlib import Path

from flatscore.commands.arguments import positive_int
from flatscore.config_defaults import schema_default
from flatscore.engine.cell_folder import METRICS_FILE


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("aggregate", help="statistics, budget curves, amplification, repair ablation, plots, summary")
    p.add_argument("--cells", nargs="+", required=True, help="cell folders (or their metrics.json files)")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--config", default=None, help="study config (YAML or JSON file, or inline JSON) the cells must match"
    )
    p.add_argument("--equivalence-margin", type=float, default=schema_default("analysis", "equivalence_margin"))
    p.add_argument("--power-gaps", type=float, nargs="*", default=schema_default("analysis", "power_gaps"))
    p.add_argument(
        "--divergence-window",
        type=positive_int("--divergence-window"),
        default=schema_default("analysis", "divergence_window"),
        help="first divergence: an error within this many messages after it is said to follow it",
    )
    p.add_argument(
        "--log-mlflow", action="store_true", help="log the tables, plots and headline figures to the study's run"
    )
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: <out>/../mlflow.db)")
    p.add_argument("--experiment", default=schema_default("tracking", "experiment"))
    p.add_argument("--study", default=None, help="the study's name (default: the config's study)")
    p.set_defaults(func=cmd_aggregate)

    p = sub.add_parser("report", help="the study's Markdown report page (summary, plots, where to browse runs)")
    p.add_argument("--aggregate", required=True, help="the aggregate folder")
    p.add_argument("--out", required=True, help="index.md to write")
    p.set_defaults(func=cmd_report)


def cmd_aggregate(args: argparse.Namespace) -> int:
    from flatscore.analysis.report import aggregate
    from flatscore.analysis.report_page import collect_plots
    from flatscore.engine.integrity import expected_from_config, verify_cells

    cells = [Path(c).parent if Path(c).name == METRICS_FILE else Path(c) for c in args.cells]
    expected, study = None, args.study
    if args.config:
        import yaml

        text = args.config if args.config.lstrip().startswith("{") else Path(args.config).read_text()
        config = yaml.safe_load(text)
        expected = expected_from_config(config)
        study = study or config.get("study")
    verify_cells(cells, expected)
    out = Path(args.out)
    written = aggregate(
        cells,
        out,
        equivalence_margin=args.equivalence_margin,
        power_gaps=tuple(args.power_gaps),
        divergence_window=args.divergence_window,
    )
    collect_plots(out, written)
    print(f"aggregated {len(cells)} cells -> {args.out} ({len(written)} files)")
    if args.log_mlflow or args.tracking_uri:
        _log_study(args, out, study or "flatscore")
    return 0


def _log_study(args: argparse.Namespace, out: Path, study: str) -> None:
    """The aggregate to the study's MLflow run (results folder: the aggregate folder's parent)."""
    import json

    from flatscore.tracking.study_logger import log_aggregate

    metrics = json.loads((out / "headline.json").read_text())
    run_id = log_aggregate(out, out.parent, study, metrics, args.tracking_uri, args.experiment)
    print(f"logged the aggregate to the study run {run_id} ({len(metrics)} headline metrics)")


def cmd_report(args: argparse.Namespace) -> int:
    from flatscore.analysis.report_page import write_report_page

    out = write_report_page(Path(args.aggregate), Path(args.out))
    print(f"wrote {out}")
    return 0
