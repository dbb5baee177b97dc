"""Pooled acceptance rate: the one definition every report, log and benchmark uses."""

from __future__ import annotations


def pooled_alpha(alpha_sum: float, num_proposed: int) -> float | None:
    """Token-weighted alpha: the summed exact acceptance rates (sum over the vocabulary of min(p, q) at
    each proposed position) over the number of proposed positions; None when nothing was proposed
    (no draft served: there is no rate to report, and NaN is not valid JSON)."""
    return alpha_sum / num_proposed if num_proposed else None


def format_alpha(alpha: float | None, spec: str = ".3f") -> str:
    """An alpha for a table: "-" when there is none."""
    return "-" if alpha is None else format(alpha, spec)
