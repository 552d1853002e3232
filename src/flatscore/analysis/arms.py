"""The Arms table: what each (model, precision) ran on, and whether the arms of one comparison differ
in anything besides their precision.

A quantized arm is compared with its model's full-precision arm. If the two also ran on different
backends or in different dtypes (fp8 in process in float32 beside full on a bfloat16 server), the
gap between them mixes the quantization with the runtime; and a "fp8" arm whose matmuls ran in
float32 measured FP8 rounding, not FP8 arithmetic. Both are easy to miss in a table of success
rates, so the summary says them in words. The facts come from each cell's ``arm_*`` fields
(:mod:`flatscore.models.arm`), read into the cells frame by :mod:`flatscore.analysis.load`.
"""

from __future__ import annotations

import pandas as pd

from flatscore.analysis.load import ARM_INFO_COLUMNS, REFERENCE_PRECISION

#: The table's columns: one row per (model, precision).
ARMS_COLUMNS = ["model", "precision", "scheme", "backend", "dtype", "compute", "user", "cells"]


def _one(values: pd.Series) -> str:
    """The arm's value; several (cells of one arm that ran differently) joined, so the table shows it."""
    found = sorted({str(v) for v in values if str(v)})
    return " / ".join(found) if found else "–"


def arms_table(cells: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, precision) of ``cells`` (the loader's cells frame), reference precision first."""
    if cells.empty:
        return pd.DataFrame(columns=ARMS_COLUMNS)
    missing = [c for c in ARM_INFO_COLUMNS if c not in cells.columns]
    if missing:
        raise ValueError(f"arms_table: the cells frame has no {missing} (load it with flatscore.analysis.load)")
    rows = []
    for (model, precision), group in cells.groupby(["model", "precision"], observed=True, sort=True):
        rows.append(
            {
                "model": str(model),
                "precision": str(precision),
                "scheme": _one(group["arm_scheme"]),
                "backend": _one(group["arm_backend"]),
                "dtype": _one(group["arm_dtype"]),
                "compute": _one(group["arm_compute"]),
                "user": _one(group["arm_user"]),
                "cells": len(group),
            }
        )
    table = pd.DataFrame(rows, columns=ARMS_COLUMNS)
    first = (table["precision"] != REFERENCE_PRECISION).astype(int)
    return table.assign(_first=first).sort_values(["model", "_first", "precision"]).drop(columns="_first")


def arms_findings(table: pd.DataFrame) -> list[str]:
    """Sentences: per model, whether its arms share backend and dtype, and which arms differ."""
    lines = []
    for model, group in table.groupby("model", sort=True):
        for column, what in (("backend", "backend"), ("dtype", "dtype")):
            values = dict(zip(group["precision"], group[column]))
            if len(set(values.values())) > 1:
                each = ", ".join(f"{p}: {v}" for p, v in values.items())
                lines.append(
                    f"- **{model}: the arms differ in {what}** ({each}): a gap between them is not the "
                    "quantization's alone."
                )
        if len(set(group["backend"])) == 1 and len(set(group["dtype"])) == 1:
            lines.append(
                f"- {model}: every arm ran on {group['backend'].iloc[0]} in {group['dtype'].iloc[0]}; "
                "the arms differ in their weights (and activation rounding) only."
            )
        emulated = [p for p, c in zip(group["precision"], group["compute"]) if "emulated" in c or "is not" in c]
        if emulated:
            lines.append(
                f"- {model}: in {', '.join(emulated)} the low-bit rounding is real but the arithmetic ran in a "
                "wider dtype (see compute)."
            )
    return lines


def protocol_findings(table: pd.DataFrame) -> list[str]:
    """Sentences: which user simulator (and so which dual-control protocol) the study's episodes met.

    A score under the scripted user is not comparable with tau2-bench's (its agents ask in plain
    language and an LLM plays the user), so the summary says which protocol produced it."""
    users = sorted({u for value in table["user"] for u in str(value).split(" / ") if u and u != "–"})
    lines = []
    if len(users) > 1:
        lines.append(
            f"- **The arms met different user simulators** ({', '.join(users)}): a gap between them is not "
            "the quantization's alone."
        )
    if "scripted" in users:
        lines.append(
            "- User simulator: scripted (the demo protocol). The agent asks for a phone action as "
            "`Please do this on your phone: name()` and the user performs it; a made-up action is "
            "`invented_user_action`. Scores under this protocol are not tau2-bench scores."
        )
    for user in (u for u in users if u.startswith("llm:")):
        lines.append(
            f"- User simulator: {user}. It role-plays each scenario in plain language and calls its own "
            "phone tools (dual control as tau2-bench runs it); its failed phone actions count as "
            "`user_tool_error`, never as the agent's errors."
        )
    return lines


def render_arms(table: pd.DataFrame) -> list[str]:
    """The summary's Arms section (Markdown lines); nothing when no cell recorded its arm (cells from
    before arms were recorded, synthetic studies): a table of dashes would say nothing."""
    if (table[["scheme", "backend", "dtype"]] == "–").all(axis=None):
        return []
    header = "| " + " | ".join(ARMS_COLUMNS) + " |"
    out = ["## Arms (what each precision ran on)", "", header, "|" + "---|" * len(ARMS_COLUMNS)]
    for _, r in table.iterrows():
        out.append("| " + " | ".join(str(r[c]).replace("|", "/") for c in ARMS_COLUMNS) + " |")
    return [*out, "", *arms_findings(table), *protocol_findings(table), ""]
