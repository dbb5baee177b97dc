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
class PassCosts:
    """Measured target passes over k + 1 tokens, k = 0..K (seconds, or any unit), smoothed so that one noisy
    repetition cannot sway a choice of k: the passes k >= 1 (verifications) by running medians of three (one pass
    timed too fast or too slow between two others is replaced by a neighbour), then made non-decreasing (k + 1
    tokens never look cheaper than k), but not forced onto a straight line: a kernel that multiplies the weights
    with up to 4 rows at once makes passes over 2-4 tokens cost about one step and the fifth token a jump. k = 0,
    a one-token step (other kernels), keeps its own measurement, capped at k = 1's."""

    smoothed: tuple[float, ...]  # [K + 1]

    @classmethod
    def fit(cls, passes: Sequence[float]) -> PassCosts:
        verifications = _non_decreasing(_running_medians(passes[1:]))
        plain = min(passes[0], verifications[0]) if verifications else passes[0]
        return cls((plain, *verifications))

    def at(self, k: int) -> float:
        """The smoothed pass over k + 1 tokens (k <= K)."""
        return self.smoothed[k]


def _running_medians(values: Sequence[float]) -> list[float]:
    """Each value but the two ends replaced by the median of it and its two neighbours."""
    inner = [statistics.median(values[i - 1 : i + 2]) for i in range(1, len(values) - 1)]
    return list(values) if len(values) < 3 else [values[0], *inner, values[-1]]


def _non_decreasing(values: Sequence[float]) -> list[float]:
    """A non-decreasing sequence near `values`: a value below the block before it is pooled with that block, until
    no block's median exceeds the next one's (pool adjacent violators, blocks at their medians, so that one slow
    value does not drag the others up to it)."""
    blocks: list[list[float]] = []  # the values of each pooled block, in order
    for value in values:
        blocks.append([value])
        while len(blocks) > 1 and statistics.median(blocks[-2]) > statistics.median(blocks[-1]):
            last = blocks.pop()
            blocks[-1] += last
    return [statistics.median(block) for block in blocks for _ in block]
