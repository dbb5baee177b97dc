"""Eq. 2 of the paper and its helpers against closed forms."""

from __future__ import annotations

import pytest

from osd.cost_model import (
    PassLine,
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


def test_pass_line_keeps_collinear_passes_and_lifts_a_noisy_dip():
    """Theil-Sen through the passes k >= 1: exact on a straight line; one dip below it is not followed (the
    median slope and intercept ignore it); the one-token step is kept, capped at the line's k = 1."""
    line = PassLine.fit([1.0, 1.2, 1.4, 1.6])
    assert [line.at(k) for k in range(4)] == pytest.approx([1.0, 1.2, 1.4, 1.6])
    dipped = PassLine.fit([1.0, 1.2, 0.9, 1.6, 1.8])
    assert dipped.at(2) == pytest.approx(1.4) and dipped.at(4) == pytest.approx(1.8)
    assert PassLine.fit([2.0, 1.5, 1.7]).at(0) == pytest.approx(1.5)  # a step above the 2-token pass
    assert PassLine.fit([1.0, 1.3, 1.1]).slope == 0.0  # never a falling line
