"""The tracked tree stays small enough to travel: a lent GPU machine takes a working tree of at most 64 MiB,
and wheels must fit beside it (issue 45). Superseded results are deleted (git keeps them), test pairs stay tiny."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT_MIB = 56


def _tracked_files() -> list[Path]:
    top = None
    if shutil.which("git") is not None:
        found = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True
        )
        top = Path(found.stdout.strip()).resolve() if found.returncode == 0 else None
    if top != ROOT:
        pytest.skip(
            f"{ROOT} is not the root of a git checkout (or git is missing): no tracked tree to measure"
        )
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_tracked_tree_is_at_most_56_mib() -> None:
    # what `git ls-files -z | xargs -0 du -cb` sums: the bytes of every tracked file in the working tree
    # (a tracked file deleted but not yet committed counts as 0)
    sizes = {p: p.lstat().st_size for p in _tracked_files() if p.is_symlink() or p.exists()}
    total = sum(sizes.values())
    biggest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
    assert total <= LIMIT_MIB * 2**20, (
        f"the tracked tree is {total / 2**20:.1f} MiB, over {LIMIT_MIB} MiB; biggest files: "
        + ", ".join(f"{p.relative_to(ROOT)} ({n / 2**20:.1f} MiB)" for p, n in biggest)
    )
