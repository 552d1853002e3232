"""``aggregate`` and ``report``: the study's statistics, plots and report page."""

from __future__ import annotations

import argparse
from pathlib import Path

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
    expected = None
    if args.config:
        import yaml

        text = args.config if args.config.lstrip().startswith("{") else Path(args.config).read_text()
        expected = expected_from_config(yaml.safe_load(text))
    verify_cells(cells, expected)
    out = Path(args.out)
    written = aggregate(cells, out, equivalence_margin=args.equivalence_margin, power_gaps=tuple(args.power_gaps))
    collect_plots(out, written)
    print(f"aggregated {len(cells)} cells -> {args.out} ({len(written)} files)")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from flatscore.analysis.report_page import write_report_page

    out = write_report_page(Path(args.aggregate), Path(args.out))
    print(f"wrote {out}")
    return 0
