"""osd.user_errors: user errors end a command line with one error line, bugs keep their traceback,
a full disk reported by a library in words becomes an OSError naming the folder, and a count flag
below 1 is a usage error."""

from __future__ import annotations

import argparse
import errno
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors import SafetensorError

from osd.user_errors import disk_full_as_oserror, non_negative_float, non_negative_int, positive_int, run_main
from tests.sources import project_sources


def fail(error: Exception) -> Callable[[], None]:
    def main() -> None:
        raise error

    return main


@pytest.mark.parametrize("error", [ValueError("bad.json, record 3: no user turn"), FileNotFoundError("x")])
def test_a_user_error_is_one_line_and_status_1(error, capsys):
    assert run_main(fail(error), "tool") == 1
    assert capsys.readouterr().err == f"tool: error: {error}\n"


def test_a_bug_keeps_its_traceback():
    with pytest.raises(KeyError):
        run_main(fail(KeyError("prompt")), "tool")


def test_a_full_disk_reported_by_safetensors_names_the_folder(tmp_path):
    """Issue 24: osd.train on a full disk (a 5 MB tmpfs) ended in safetensors' SafetensorError traceback."""
    words = "Error while serializing: I/O error: No space left on device (os error 28)"
    with pytest.raises(OSError) as raised, disk_full_as_oserror(tmp_path):
        raise SafetensorError(words)
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path)
    assert words in str(raised.value)
    with pytest.raises(RuntimeError, match="a bug"), disk_full_as_oserror(tmp_path):
        raise RuntimeError("a bug")


# flag type -> (a value it takes, values it refuses, the refusal's words); "two" is argparse's own error
RANGES = {
    positive_int: ("5", ["0", "-3"], "expected at least 1"),
    non_negative_int: ("0", ["-1"], "expected 0 or more"),
    non_negative_float: ("0", ["-1", "nan", "inf"], "expected a number of 0 or more"),
}


@pytest.mark.parametrize(
    ("kind", "text"), [(k, t) for k, (_, bad, _) in RANGES.items() for t in [*bad, "two"]]
)
def test_a_flag_out_of_its_range_is_a_usage_error_naming_it(kind, text, capsys):
    good, _, words = RANGES[kind]
    parser = argparse.ArgumentParser(prog="tool")
    parser.add_argument("--flag", type=kind)
    assert parser.parse_args(["--flag", good]).flag == kind(good)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--flag", text])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --flag: " in err
    assert (words in err) == (text != "two")


MAIN_BLOCK = '\nif __name__ == "__main__":\n'
RUNS_MAIN = re.compile(r"run_main\(|from osd\.cli import")


def test_every_command_line_entry_point_ends_through_run_main():
    """Issue 49 (rule 7): `python -m benchmarks.draft_alpha` on a missing recording ended in a traceback;
    every script with a `__main__` block (osd, data, benchmarks, llamacpp_patches) runs its main through
    run_main, so a user error is one line."""
    root = Path(__file__).resolve().parents[1]
    scripts = project_sources("osd", "data", "benchmarks", "llamacpp_patches")
    blocks = {p: text.split(MAIN_BLOCK, 1)[1] for p in scripts if MAIN_BLOCK in (text := p.read_text())}
    assert len(blocks) > 40  # the scan sees the entry points
    # osd/train.py runs osd.cli.train, the console script's run_main
    assert [str(p.relative_to(root)) for p, block in blocks.items() if not RUNS_MAIN.search(block)] == []
