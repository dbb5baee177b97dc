"""Recording an experiment's results: Markdown tables, results.json with the command and the machine, and
the ablations' parts (`{out}/parts/NAME.json`, merged by `osd.analysis.ablation_report`).

Every file records the command that wrote it (`python -m MODULE ARGS`) and names no machine path
(`osd.paths.repo_relative`), so a recorded result says how to make it again.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from osd.paths import repo_relative
from osd.spec.timing import machine


def markdown_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """Rows as a Markdown table (floats with 3 decimals; an undefined figure, None, as "-"; a missing cell
    empty)."""

    def cell(v: object) -> str:
        return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def command_line(module: str, argv: Sequence[str] | None = None) -> str:
    """`python -m {module} ARGS`: the command that ran `module` with `argv` (default: this process's), a path
    inside this repository given whole as an argument made relative to its root (`repo_relative`)."""
    args = repo_relative(sys.argv[1:] if argv is None else list(argv))
    return " ".join(["python -m", module, *args])


def save_results(
    out_dir: Path, results: dict, table: str, module: str, argv: Sequence[str] | None = None
) -> None:
    """results.json (with the command that wrote it, `command_line(module, argv)`, and the machine it ran
    on) and table.md in out_dir; the table is printed too."""
    results = {"command": command_line(module, argv), "machine": machine(), **results}
    (out_dir / "results.json").write_text(json.dumps(repo_relative(results), indent=1))
    (out_dir / "table.md").write_text(table + "\n")
    print(table)


def write_result(
    out: str | Path, module: str, argv: Sequence[str] | None, args: argparse.Namespace, record: dict
) -> dict:
    """One JSON file at `out` (its folder made): the command that wrote it (`command_line(module, argv)`), the
    machine, the arguments and `record`; returns what it wrote, before paths were made repository-relative."""
    result = {"command": command_line(module, argv), "machine": machine(), "args": vars(args), **record}
    write_json(out, result)
    return result


def write_json(out: str | Path, result: dict) -> None:
    """`result` as JSON at `out` (its folder made), its paths made repository-relative (`repo_relative`)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(repo_relative(result), indent=1))
    print(f"wrote {path}")


def write_part(out: Path, name: str, module: str, argv: Sequence[str] | None, record: dict) -> Path:
    """`{out}/parts/{name}.json`: one ablation run's record, with the command that wrote it."""
    path = out / "parts" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": command_line(module, argv), **record}
    path.write_text(json.dumps(repo_relative(record), indent=1) + "\n")
    return path
