"""Benchmarks call the library, not each other (issue 45): every benchmarks/*.py imports `osd` and
third-party packages only, never another benchmark (what several share lives in `osd`)."""

from __future__ import annotations

import ast
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def benchmark_imports(tree: ast.AST) -> list[str]:
    """The imports of `tree` that reach the benchmarks package: `benchmarks...` or relative ones, at
    any depth (inside functions too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "benchmarks"]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.split(".")[0] == "benchmarks":
                found.append("." * node.level + module)
    return found


def test_no_benchmark_imports_another_benchmark():
    files = sorted(BENCHMARKS.glob("*.py"))
    assert len(files) > 10  # the scan sees the drivers
    offending = {f.name: names for f in files if (names := benchmark_imports(ast.parse(f.read_text())))}
    assert offending == {}


def test_scan_sees_every_form_of_import():
    """The check above would fail on any way of importing a benchmark (the scan itself is tested)."""
    code = (
        "import benchmarks.bench_engine\nfrom benchmarks import online_single\n"
        "def f():\n    from benchmarks.ablations import write_part\n    from . import x\n"
        "import osd.results\nfrom osd.spec import hf_generate\n"
    )
    assert benchmark_imports(ast.parse(code)) == [
        "benchmarks.bench_engine",
        "benchmarks",
        "benchmarks.ablations",
        ".",
    ]
