"""How every command line ends on a user error: one error line on stderr, exit status 1; a
traceback only for a bug.

User errors are `ValueError` (a bad flag value, file, record, recording or model: the project's
own errors subclass it and name the file, flag or model) and `OSError` (a missing or unwritable
path, a full disk). Anything else is a bug and keeps its traceback. Usage errors stay argparse's
(exit status 2).

    if __name__ == "__main__":
        sys.exit(run_main(main, "osd.analysis.record"))
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

USER_ERRORS = (ValueError, OSError)
# how libraries that write through Rust or C++ (safetensors, torch.save) report a full disk
DISK_FULL = ("No space left on device", "file write failed")


def run_main(main: Callable[[], object], prog: str | None = None) -> int:
    """Run `main()`: exit status 0, or 1 with `{prog}: error: {message}` on stderr for a user error.

    `prog` defaults to the script's file name, as argparse names it in usage errors."""
    try:
        main()
    except USER_ERRORS as e:
        print(f"{prog or Path(sys.argv[0]).name}: error: {e}", file=sys.stderr)
        return 1
    return 0


def positive_int(text: str) -> int:
    """An argparse type for a count flag (`--limit`): an integer of at least 1, else a usage error."""
    value = int(text)  # a ValueError here is argparse's "invalid positive_int value"
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}; expected at least 1")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type for a count that may be 0 (`--offline_steps`: 0 = none), else a usage error."""
    value = int(text)  # a ValueError here is argparse's "invalid non_negative_int value"
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value}; expected 0 or more")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type for a rate that may be 0 (`--learning_rate`), else a usage error (NaN included)."""
    value = float(text)  # a ValueError here is argparse's "invalid non_negative_float value"
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}; expected a number of 0 or more")
    return value


def refuse_non_finite(flags: object) -> None:
    """Raise naming the first float field of a flags dataclass that is NaN or infinite (a NaN passes
    every range check written as `value < minimum`)."""
    for f in dataclasses.fields(flags):
        value = getattr(flags, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{f.name} must be a finite number, got {value}")


def positive_float(text: str) -> float:
    """An argparse type for a size that must be above 0 (`--window`), else a usage error."""
    value = float(text)  # a ValueError here is argparse's "invalid positive_float value"
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}; expected a number above 0")
    return value


@contextmanager
def disk_full_as_oserror(folder: str | Path) -> Iterator[None]:
    """Within: a library's error for a failed write (a full disk) becomes an OSError naming `folder`;
    safetensors and torch.save report it as their own exception types, with the reason in words."""
    try:
        yield
    except Exception as e:
        if isinstance(e, OSError) or not any(words in str(e) for words in DISK_FULL):
            raise
        raise OSError(
            errno.ENOSPC, f"writing under {folder} failed ({e}); free some space", str(folder)
        ) from e
