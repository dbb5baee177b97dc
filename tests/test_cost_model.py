"""Eq. 2 of the paper and its helpers against closed forms."""

from __future__ import annotations

import pytest

from osd.cost_model import (
    alpha_from_tokens_per_step,
    best_gamma,
    expected_tokens_per_step,
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
