"""The speculative-decoding cost model (Leviathan et al. 2023, Eq. 1-2; OSD paper Eq. 2).

alpha: expected acceptance rate per proposed token; gamma: tokens proposed per step;
c: cost of one draft step / cost of one target step.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def _check(alpha: float, gamma: int) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must lie in [0, 1], got {alpha}")
    if gamma < 0:
        raise ValueError(f"gamma must be >= 0, got {gamma}")


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """E[tokens per target pass] = (1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 at alpha = 1."""
    _check(alpha, gamma)
    if alpha == 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speedup(alpha: float, gamma: int, c: float) -> float:
    """Eq. 2: expected wall-time speedup over target-only decoding, (1-a^(g+1)) / ((1-a)(g c + 1))."""
    return expected_tokens_per_step(alpha, gamma) / (gamma * c + 1.0)


def speedup_measured_verify(alpha: float, gamma: int, c: float, verify_cost: float) -> float:
    """Eq. 2 with a measured verification cost.

    verify_cost: time of one target pass over gamma + 1 tokens / time of one single-token target
    step (1.0 reproduces Eq. 2; on a CPU it is above 1, on a memory-bound GPU close to 1).
    """
    return expected_tokens_per_step(alpha, gamma) / (gamma * c + verify_cost)


def query_time(
    alpha: float, gamma: int, c: float, verify_cost: float, new_tokens: float, prefill: float = 0.0
) -> float:
    """A query's expected time in target steps: a prefill, then new_tokens / E[tokens] verifications, each
    gamma draft steps and one pass of `verify_cost`. gamma 0 with verify_cost 1 is the target alone
    (prefill + new_tokens); the ratio of the two, without a prefill, is `speedup_measured_verify`."""
    return prefill + new_tokens / expected_tokens_per_step(alpha, gamma) * (gamma * c + verify_cost)


def best_gamma(alpha: float, c: float, max_gamma: int = 32, verify_cost: float = 1.0) -> int:
    """The gamma in 1..max_gamma that maximises the expected speedup."""
    return max(range(1, max_gamma + 1), key=lambda g: speedup_measured_verify(alpha, g, c, verify_cost))


def alpha_from_tokens_per_step(tokens_per_step: float, gamma: int, tol: float = 1e-9) -> float:
    """Invert `expected_tokens_per_step` by bisection (e.g. for llama.cpp's accepted/drafted counts)."""
    if not 1.0 <= tokens_per_step <= gamma + 1:
        raise ValueError(f"tokens per step must lie in [1, {gamma + 1}], got {tokens_per_step}")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if expected_tokens_per_step(mid, gamma) < tokens_per_step:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class PassLine:
    """Measured target passes over k + 1 tokens, k = 0..K (seconds, or any unit), smoothed so that one slow
    repetition cannot make k + 1 tokens look cheaper than k: the passes k >= 1 (verifications) by a straight line
    t0 + slope * k fitted robustly (Theil-Sen: the median slope over all pairs, at least 0); k = 0, a one-token step
    (other kernels), keeps its own measurement, capped at the line's k = 1."""

    plain: float
    t0: float
    slope: float

    @classmethod
    def fit(cls, passes: Sequence[float]) -> PassLine:
        points = list(enumerate(passes))[1:]
        slopes = [(v - u) / (j - i) for i, u in points for j, v in points if j > i]
        slope = max(statistics.median(slopes), 0.0) if slopes else 0.0
        t0 = statistics.median(v - slope * k for k, v in points) if points else passes[0]
        return cls(min(passes[0], t0 + slope), t0, slope)

    def at(self, k: int) -> float:
        """The smoothed pass over k + 1 tokens."""
        return self.plain if k == 0 else self.t0 + self.slope * k
