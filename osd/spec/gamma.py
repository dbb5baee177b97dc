"""gamma, the number of draft tokens proposed per verification step (the reference's --max_propose_num):
one type, one parser with one rule, and the default of each use, stated here once.

A `Gamma` is an int >= 0 or "auto". 0 is plain target decoding through the engine (the baseline every
speedup is measured against); "auto" lets `osd.spec.adaptive.GammaPolicy` choose k per step. A use
that needs proposals (measuring or distilling alpha) refuses 0, and one without a policy refuses
"auto", each with an error naming the flag and the reason.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Literal, TypeAlias

Gamma: TypeAlias = int | Literal["auto"]
AUTO = "auto"

DEFAULT = 5  # the engine, osd.train's --max_propose_num and the analysis tools: the reference's default
DEMO = 3  # the embedded pair's best gamma at its measured costs (osd.cost_model.best_gamma): the main job
ALPHA_FIGURES = 4  # the online experiments' alpha figures and the replay tools (recorded with 4)
STANDARD_TIMING = 1  # the demo pair's timing drivers (Standard SD, ablations, online cost): best_gamma at
# the v2 draft's alpha ~0.2, kept so their recorded figures reproduce

# why a use refuses 0 or "auto" (parse_gamma's plain_decoding / auto)
NEEDS_PROPOSALS = "alpha is measured on proposed tokens; give 1 or more"
NO_POLICY = "this tool measures a fixed gamma; give an integer"


def parse_gamma(
    value: int | str,
    flag: str = "--max_propose_num",
    plain_decoding: str | None = None,
    auto: str | None = None,
) -> Gamma:
    """`value` (an int, or its text from a command line) as a Gamma. `plain_decoding` / `auto`: why this
    use cannot take 0 / "auto" (None: it can); a refused or malformed value raises ValueError naming `flag`."""
    if value == AUTO:
        if auto is not None:
            raise ValueError(f"{flag} 'auto' is not available here: {auto}")
        return AUTO
    try:
        gamma = int(value)
    except (TypeError, ValueError):
        gamma = -1
    if isinstance(value, bool) or gamma < 0 or str(gamma) != str(value).strip():
        raise ValueError(f"{flag} must be an integer >= 0 or 'auto', got {value!r}")
    if gamma == 0 and plain_decoding is not None:
        raise ValueError(f"{flag} 0 (decoding with the target alone) is not available here: {plain_decoding}")
    return gamma


def gamma_arg(flag: str = "--max_propose_num", **refusals: str) -> Callable[[str], Gamma]:
    """`parse_gamma` as an argparse `type` (a refused value is a usage error naming `flag`)."""

    def parse(text: str) -> Gamma:
        try:
            return parse_gamma(text, flag, **refusals)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from e

    return parse


def add_gamma_flag(parser: argparse.ArgumentParser, default: Gamma, help: str = "", **refusals: str) -> None:
    """--max_propose_num (alias --gamma, as the drivers called it; read as `args.gamma`), parsed here."""
    parser.add_argument(
        "--max_propose_num", "--gamma", dest="gamma", type=gamma_arg(**refusals), default=default,
        help=f"gamma: draft tokens per verification step{'; ' + help if help else ''} (default {default})",
    )  # fmt: skip
