"""The Arms table names each arm's scheme, backend, dtype and compute, and says when the arms of one
comparison differ in backend or dtype (a gap between them is then not the quantization's alone)."""

from __future__ import annotations

import json

from flatscore.analysis import aggregate, load_cells
from flatscore.analysis.arms import arms_findings, arms_table, render_arms
from flatscore.analysis.synthetic import SyntheticStudy, write_study

SPEC = SyntheticStudy(precisions=("full", "int4", "fp8"), budgets=(10,), repairs=(False,), n_tasks=6, trials=2)

IN_PROCESS = {"arm_backend": "transformers (in process)", "arm_dtype": "float32"}
ARMS = {
    "full": {"arm_scheme": "none", "arm_compute": "unquantized: weights and matmul in the run dtype"},
    "int4": {"arm_scheme": "w4a16", "arm_compute": "weights int4; transformers: the low-bit arithmetic is not"},
    "fp8": {"arm_scheme": "fp8_dynamic", "arm_compute": "weights float8_e4m3fn; transformers: FP8 emulated"},
}


def _study(tmp_path, fp8_runtime: dict[str, str] | None = None) -> list:
    dirs = write_study(SPEC, tmp_path)
    for d in dirs:
        cell = json.loads((d / "cell.json").read_text())
        cell.update(IN_PROCESS, **ARMS[cell["precision"]])
        if cell["precision"] == "fp8" and fp8_runtime:
            cell.update(fp8_runtime)
        (d / "cell.json").write_text(json.dumps(cell))
    return dirs


def test_one_row_per_arm_reference_first(tmp_path):
    cells = load_cells(_study(tmp_path)).cells
    table = arms_table(cells)
    assert list(table["precision"]) == ["full", "fp8", "int4"]
    fp8 = table.set_index("precision").loc["fp8"]
    assert (fp8["scheme"], fp8["backend"], fp8["dtype"]) == ("fp8_dynamic", "transformers (in process)", "float32")
    assert fp8["cells"] == (cells["precision"] == "fp8").sum() > 0
    findings = "\n".join(arms_findings(table))
    assert "every arm ran on transformers (in process) in float32" in findings
    assert "differ" not in findings.replace("differ in their weights", "")
    assert "in fp8, int4 the low-bit rounding is real but the arithmetic ran in a wider dtype" in findings


def test_arms_that_differ_in_backend_and_dtype_are_said_plainly(tmp_path):
    dirs = _study(tmp_path, {"arm_backend": "openai (vllm server)", "arm_dtype": "bfloat16"})
    table = arms_table(load_cells(dirs).cells)
    findings = arms_findings(table)
    assert any("the arms differ in backend" in line and "fp8: openai (vllm server)" in line for line in findings)
    assert any("the arms differ in dtype" in line and "full: float32" in line for line in findings)
    summary = (aggregate(dirs, tmp_path / "agg", n_boot=50)["summary"]).read_text()
    assert "## Arms (what each precision ran on)" in summary
    assert "| fp8 | fp8_dynamic | openai (vllm server) | bfloat16 |" in summary
    assert "a gap between them is not the quantization's alone" in summary
    assert (tmp_path / "agg" / "arms.csv").exists()


def test_cells_without_arm_fields_give_no_section(tmp_path):
    """Synthetic cells (and cells from before arms were recorded) carry none: no table of dashes."""
    table = arms_table(load_cells(write_study(SPEC, tmp_path)).cells)
    assert len(table) == 3 and render_arms(table) == []


def test_the_summary_says_which_user_protocol_the_study_used(tmp_path):
    """Scripted cells carry no user_* identity key (the demo protocol); LLM-user cells name their model."""
    dirs = _study(tmp_path)
    table = arms_table(load_cells(dirs).cells)
    assert set(table["user"]) == {"scripted"}
    text = "\n".join(render_arms(table))
    assert "User simulator: scripted (the demo protocol)" in text and "not tau2-bench scores" in text
    assert "different user simulators" not in text

    for d in dirs:
        cell = json.loads((d / "cell.json").read_text())
        cell.setdefault("identity", {}).update(user_model="results/models/qwen/full", user_temperature=0.0)
        (d / "cell.json").write_text(json.dumps(cell))
    summary = (aggregate(dirs, tmp_path / "agg", n_boot=50)["summary"]).read_text()
    assert "User simulator: llm: qwen/full (temperature 0.0)" in summary
    assert "calls its own phone tools" in summary and "scripted" not in summary.split("## Arms")[1].split("##")[0]


def test_arms_that_met_different_users_are_said_plainly(tmp_path):
    dirs = _study(tmp_path)
    for d in dirs:
        cell = json.loads((d / "cell.json").read_text())
        if cell["precision"] == "int4":
            cell.setdefault("identity", {}).update(user_model="qwen", user_temperature=0.7)
        (d / "cell.json").write_text(json.dumps(cell))
    text = "\n".join(render_arms(arms_table(load_cells(dirs).cells)))
    assert "**The arms met different user simulators** (llm: qwen (temperature 0.7), scripted)" in text
