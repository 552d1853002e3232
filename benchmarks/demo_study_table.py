"""Print the demo study's measured numbers: the model build, then success and error channels per cell.

Run after ``snakemake --cores all`` (reads ``results/``):

    python benchmarks/demo_study_table.py [results]

It prints what the README quotes: the demo model's training steps, loss and time, the
quantized sizes and times, and per precision x domain x budget x repair the eval-split success
rate and the error counts per channel — all read from the files the workflow wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CHANNELS = (
    "invented_tool",
    "other_side_tool",
    "malformed_call",
    "invalid_arguments",
    "tool_error",
    "user_tool_error",
    "invented_user_action",
)


def main(results: Path) -> int:
    models = sorted((results / "models").glob("*/*/flatscore_manifest.json"))
    print("| model | precision | what | figures |\n|---|---|---|---|")
    for path in models:
        m = json.loads(path.read_text())
        precision = path.parent.name
        if m.get("kind") == "demo":
            what = f"trained {m.get('steps')} steps, final loss {m.get('final_loss')}, {m.get('seconds')} s"
        else:
            what = (
                f"{m.get('scheme')} group {m.get('group_size')}: {m.get('size_bytes_before')} -> "
                f"{m.get('size_bytes_after')} bytes in {m.get('seconds')} s"
            )
        print(f"| {path.parent.parent.name} | {precision} | {m.get('kind')} | {what} |")
    print()
    header = "| precision | domain | K | repair | episodes | success | " + " | ".join(CHANNELS) + " |"
    print(header)
    print("|" + "---|" * (6 + len(CHANNELS)))
    rows = []
    for path in sorted((results / "cells").rglob("metrics.json")):
        if ".superseded" in path.parts:
            continue
        cell = json.loads((path.parent / "cell.json").read_text())
        m = json.loads(path.read_text())
        rows.append(((cell["precision"], cell["domain"], -cell["budget"], cell["repair"]), cell, m))
    order = {"full": 0, "int8": 1, "int4": 2}
    for _, cell, m in sorted(rows, key=lambda r: (r[0][1], order.get(r[0][0], 9), r[0][2], r[0][3])):
        counts = " | ".join(str(int(m.get(f"channel_{c}", 0))) for c in CHANNELS)
        print(
            f"| {cell['precision']} | {cell['domain']} | {cell['budget']} | {'on' if cell['repair'] else 'off'} | "
            f"{int(m['n_scored'])} | {m['success_rate']:.3f} | {counts} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "results")))
