"""A command's --help shows its usage lines as written: a module docstring that continues a shell
command with a backslash is a raw string, so the backslash and the line break reach `__doc__` (a plain
string joins the two lines into one, padded with the next line's indent)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from osd.analysis import record
from tests.sources import project_sources

ROOT = Path(__file__).resolve().parents[1]
SOURCES = project_sources("osd", "benchmarks", "data", "llamacpp_patches")


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


# A help string must survive argparse's `help % params`: a bare '%' (e.g. "10%.") breaks `--help` of the
# whole command. Checked on the source, for argparse flags and dataclass fields alike.
class AnyParam(dict):
    """argparse's params (the action's fields and prog): any %(name)s formats."""

    def __missing__(self, key: str) -> str:
        return ""


def help_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every constant `help=` keyword and `"help":` dict entry in a source file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.keyword) and node.arg == "help":
            value = node.value
        elif isinstance(node, ast.Dict):
            value = next((v for k, v in zip(node.keys, node.values, strict=True)
                          if isinstance(k, ast.Constant) and k.value == "help"), None)  # fmt: skip
        else:
            continue
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            found.append((value.lineno, value.value))
    return found


def test_the_sources_have_help_strings():
    assert sum(len(help_strings(p)) for p in SOURCES) > 100  # the check below reads what it should


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_help_strings_format_as_argparse_renders_them(path):
    for line, text in help_strings(path):
        try:
            text % AnyParam()
        except (ValueError, TypeError) as e:
            pytest.fail(f"{path.relative_to(ROOT)}:{line}: help {text!r} does not format ({e}); write '%%'")
