"""A command's --help shows its usage lines as written: a module docstring that continues a shell
command with a backslash is a raw string, so the backslash and the line break reach `__doc__` (a plain
string joins the two lines into one, padded with the next line's indent)."""

from __future__ import annotations

import ast
from pathlib import Path

from osd.analysis import record

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    p for folder in ("osd", "benchmarks", "data", "llamacpp_patches") for p in (ROOT / folder).rglob("*.py")
)


def docstring_source(path: Path) -> str | None:
    """The module docstring's literal as written in `path`, prefix and quotes included."""
    source = path.read_text(encoding="utf-8")
    body = ast.parse(source).body
    if not body or not isinstance(body[0], ast.Expr) or not isinstance(body[0].value, ast.Constant):
        return None
    if not isinstance(body[0].value.value, str):
        return None
    return ast.get_source_segment(source, body[0].value)


def test_every_docstring_with_a_line_continuation_is_raw() -> None:
    continued = {p: s for p in SOURCES if (s := docstring_source(p)) and "\\\n" in s.replace("\\\\", "")}
    assert len(continued) > 10  # the CLIs' usage examples
    plain = [str(p.relative_to(ROOT)) for p, literal in continued.items() if literal[0] not in "rR"]
    assert not plain, f'docstrings that continue a line with a backslash, not raw (make them r"""): {plain}'


def test_a_continued_command_keeps_its_backslash_in_the_help() -> None:
    assert "--target osd/demo/models/tiny/teacher \\\n" in record.__doc__
