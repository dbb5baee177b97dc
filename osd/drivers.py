"""The command line every experiment driver (benchmarks/*.py) shares: its parser, with --threads."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch


def make_parser(doc: str | None) -> argparse.ArgumentParser:
    """The driver's parser (its docstring as the description), with --threads (1 by default: the demo
    models are too small to gain from more, and on a shared CPU extra threads mostly wait for each other)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """The parsed flags, with torch set to use --threads threads."""
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    return args
