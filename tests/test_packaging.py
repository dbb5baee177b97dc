"""pyproject.toml: every console script names a callable whose return value is an exit status, and
requirements.txt (the pinned, tested set) satisfies every declared dependency range."""

from __future__ import annotations

import importlib
import importlib.metadata
import typing
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _declared() -> list[Requirement]:
    """Core and extra requirements, without the project's references to its own extras."""
    extras = [r for group in PROJECT["optional-dependencies"].values() for r in group]
    return [r for r in map(Requirement, [*PROJECT["dependencies"], *extras]) if r.name != PROJECT["name"]]


def _tested_versions() -> dict[str, str]:
    """requirements.txt as {name: version}: its == pin, else (a range: torch, protobuf, ...) the version
    installed here, which the set-up script chose."""
    versions = {}
    for line in (ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            pinned = [s.version for s in req.specifier if s.operator == "=="]
            versions[req.name] = pinned[0] if pinned else importlib.metadata.version(req.name)
    return versions


@pytest.mark.parametrize("name", sorted(PROJECT["scripts"]))
def test_console_script_target(name: str) -> None:
    module, _, attr = PROJECT["scripts"][name].partition(":")
    target = getattr(importlib.import_module(module), attr)
    assert callable(target)
    # the generated script runs sys.exit(target()): anything but None or an int would be status 1
    assert typing.get_type_hints(target)["return"] in (type(None), int), (
        f"{name}: {target} returns no exit status"
    )


def test_tested_versions_within_declared_ranges() -> None:
    tested = _tested_versions()
    for req in _declared():
        assert req.name in tested, f"{req.name} is declared in pyproject.toml but not in requirements.txt"
        assert req.specifier.contains(tested[req.name], prereleases=True), (
            f"{req.name} {tested[req.name]} (requirements.txt) is outside pyproject.toml's {req}"
        )


def test_main_returning_metrics_is_wrapped() -> None:
    """osd.train.main returns its metrics: osd-train must not point at it directly."""
    assert typing.get_type_hints(importlib.import_module("osd.train").main)["return"] not in (type(None), int)
    assert PROJECT["scripts"]["osd-train"] != "osd.train:main"
