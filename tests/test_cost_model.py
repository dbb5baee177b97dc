"""Eq. 2 of the paper and its helpers against closed forms."""

from __future__ import annotations

import random

import pytest

from osd.cost_model import (
    PassCosts,
    alpha_from_tokens_per_step,
    best_gamma,
    expected_tokens_per_step,
    query_time,
    speedup,
    speedup_measured_verify,
)


def test_expected_tokens_is_the_geometric_sum():
    for alpha in (0.0, 0.3, 0.8):
        assert expected_tokens_per_step(alpha, 4) == pytest.approx(sum(alpha**i for i in range(5)))
    assert expected_tokens_per_step(1.0, 4) == 5.0


def test_speedup_closed_form():
    assert speedup(0.8, 5, 0.1) == pytest.approx((1 - 0.8**6) / (0.2 * 1.5))
    assert speedup_measured_verify(0.8, 5, 0.1, 1.0) == pytest.approx(speedup(0.8, 5, 0.1))
    assert speedup_measured_verify(0.8, 5, 0.1, 2.0) < speedup(0.8, 5, 0.1)


def test_best_gamma_matches_the_paper_setting():
    # alpha 0.6: cheaper drafts afford longer proposals
    assert [best_gamma(0.6, c) for c in (0.01, 0.02, 0.05, 0.1)] == [7, 6, 4, 3]


def test_alpha_from_tokens_per_step_inverts_expected_tokens():
    for alpha in (0.1, 0.5, 0.9):
        assert alpha_from_tokens_per_step(expected_tokens_per_step(alpha, 5), 5) == pytest.approx(
            alpha, abs=1e-6
        )
    with pytest.raises(ValueError):
        alpha_from_tokens_per_step(7.0, 5)


def test_query_time_is_prefill_plus_verifications_and_reduces_to_eq2():
    assert query_time(0.3, 0, 0.0, 1.0, 32, prefill=5.0) == 37.0  # the target alone: prefill + N steps
    # alpha 0.5, gamma 3: E[tokens] = 1.875, so 30 tokens take 16 verifications of 3 * 0.1 + 1.2 steps
    assert query_time(0.5, 3, 0.1, 1.2, 30, prefill=4.0) == pytest.approx(4.0 + 16 * 1.5)
    alone, speculated = query_time(0.7, 0, 0.0, 1.0, 64), query_time(0.7, 4, 0.05, 1.3, 64)
    assert alone / speculated == pytest.approx(speedup_measured_verify(0.7, 4, 0.05, 1.3))


def test_pass_costs_keep_rising_passes_of_any_shape_and_pool_a_dip():
    """Non-decreasing passes are kept as measured, straight or not (flat over 2-4 tokens, then a jump); a dip
    between two passes takes a neighbour's cost, a falling pair their median; the one-token step is kept, capped
    at k = 1's."""
    for passes in ([1.0, 1.2, 1.4, 1.6], [1.0, 1.04, 1.06, 1.13, 1.35, 1.5]):
        assert PassCosts.fit(passes).smoothed == pytest.approx(passes)
    assert PassCosts.fit([1.0, 1.2, 0.9, 1.6, 1.8]).smoothed == pytest.approx([1.0, 1.2, 1.2, 1.6, 1.8])
    assert PassCosts.fit([1.0, 1.3, 1.1]).smoothed == pytest.approx([1.0, 1.2, 1.2])
    assert PassCosts.fit([2.0, 1.5, 1.7]).at(0) == pytest.approx(1.5)  # a step above the 2-token pass


def test_pass_costs_never_fall_and_one_slow_pass_does_not_drag_its_neighbours_up():
    rng = random.Random(0)
    for _ in range(200):
        passes = [rng.uniform(0.5, 2.0) for _ in range(rng.randint(1, 8))]
        smoothed = PassCosts.fit(passes).smoothed
        assert len(smoothed) == len(passes) and smoothed[0] <= passes[0]
        assert all(a <= b for a, b in zip(smoothed[1:], smoothed[2:], strict=False))  # k >= 1: never falling
        assert min(passes[1:], default=0.0) <= min(smoothed[1:], default=0.0)
        assert max(smoothed[1:], default=0.0) <= max(passes[1:], default=0.0)
    slow = PassCosts.fit([1.0, 3.0, 1.07, 1.13, 1.35])  # k = 1 timed at 3x
    assert slow.smoothed[1:] == pytest.approx([1.13, 1.13, 1.13, 1.35])
