"""The codebase's shape: no import circle, no oversized module, formatters and linters clean.

These hold the architecture in place: a circle or a 900-line module creeps back one small
change at a time, and only a test notices the first step.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "src" / "flatscore"
MAX_LINES = 500


def _module_name(path: Path) -> tuple[str, bool]:
    """Dotted name of a source file, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Every dotted name an import statement may refer to (a module, or a name inside one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [prefix] + [f"{prefix}.{alias.name}" for alias in node.names]


def import_graph() -> dict[str, set[str]]:
    """First-party module -> the first-party modules it imports (anywhere in its body)."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = {name: is_package for name, is_package in files}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for (name, is_package), path in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _imported(name, is_package, node):
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                # a submodule importing its own package's __init__ is not a circle of modules
                if target and target != name and not (modules[target] and name.startswith(target + ".")):
                    graph[name].add(target)
    return graph


def test_import_graph_sees_imports() -> None:
    """The parser must find real edges, or the no-circle test below would pass on nothing."""
    graph = import_graph()
    assert "flatscore.engine.episode" in graph
    assert sum(len(edges) for edges in graph.values()) > 50


def test_no_import_circle() -> None:
    try:
        tuple(TopologicalSorter(import_graph()).static_order())
    except CycleError as cycle:
        pytest.fail(f"import circle: {' -> '.join(cycle.args[1])}")


def test_no_source_file_over_limit() -> None:
    sizes = {p.relative_to(REPO): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    too_long = {str(p): n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines (split them by job): {too_long}"


def _tool(name: str) -> str:
    path = shutil.which(name) or (str(Path(sys.executable).parent / name))
    if not Path(path).exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]' installs it)")
    return path


@pytest.mark.parametrize("args", [["check", "."], ["format", "--check", "."]], ids=["check", "format"])
def test_ruff_clean(args: list[str]) -> None:
    res = subprocess.run([_tool("ruff"), *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_snakefmt_clean() -> None:
    res = subprocess.run(
        [_tool("snakefmt"), "--check", "Snakefile", "workflow/rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stdout + res.stderr


#: Which packages each package may import (besides itself and the dependency-free top-level
#: modules): data flows one way, domains -> engine -> tracking / analysis, with agents and
#: backends beside the engine, and only the command line sees everything.
ALLOWED_IMPORTS = {
    "domains": set(),
    "backends": set(),
    "agents": {"domains", "backends"},
    "engine": {"domains", "backends", "agents"},
    "models": {"domains", "backends", "agents", "engine"},
    "tracking": {"engine"},
    "analysis": {"engine"},
    "commands": {"domains", "backends", "agents", "engine", "models", "tracking", "analysis"},
    "cli": {"commands"},
}
TOP_LEVEL = {
    "flatscore",
    "flatscore.atomic_write",
    "flatscore.config_defaults",
    "flatscore.gguf_header",
    "flatscore.redact",
}


def _room(module: str) -> str:
    return module.split(".")[1] if module not in TOP_LEVEL else ""


def test_imports_flow_one_way() -> None:
    wrong = []
    for module, targets in import_graph().items():
        room = _room(module)
        for target in targets:
            other = _room(target)
            if module in TOP_LEVEL and target not in TOP_LEVEL:
                wrong.append(f"{module} -> {target} (top-level modules import no package)")
            elif room and other and other != room and other not in ALLOWED_IMPORTS[room]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the one-way flow (see docs/architecture.md):\n" + "\n".join(sorted(wrong))
