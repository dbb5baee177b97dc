"""The project's own Python files, for tests that scan the source tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def project_sources(*folders: str) -> list[Path]:
    """The `.py` files under `folders` that are tracked or untracked, but none that git ignores (llama.cpp's
    tree, unpacked under llamacpp_patches/work/ by a build, has scripts of its own), sorted."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *folders],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted(
        ROOT / name for name in listed.split("\0") if name.endswith(".py") and (ROOT / name).is_file()
    )
