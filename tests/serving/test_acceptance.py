"""osd.serving.acceptance: vLLM's per-step counters read as osd's alpha and loss positions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from osd.serving.acceptance import query_stats, vllm_acceptance, wrong_positions


def counts(accepted: list[int], drafted: list[int]) -> SimpleNamespace:
    return SimpleNamespace(
        per_step_accepted=accepted, per_step_drafted=drafted, num_draft_tokens=sum(drafted)
    )


def token_origins(accepted: list[int], drafted: list[int]) -> list[str]:
    """Reference: who wrote each generated token, spelled out step by step."""
    origins = ["prefill"]
    for a, d in zip(accepted, drafted, strict=True):
        origins += ["draft"] * a + ["recovered" if a < d else "bonus"]
    return origins


@pytest.mark.parametrize(
    "accepted, drafted",
    [([0, 2, 1], [2, 2, 2]), ([3, 3, 0, 1], [3, 3, 3, 3]), ([1, 0, 1], [1, 1, 1]), ([2, 1], [2, 1])],
)
def test_wrong_positions_are_the_recovered_tokens(accepted, drafted) -> None:
    origins = token_origins(accepted, drafted)
    expected = [i for i, origin in enumerate(origins) if origin == "recovered"]
    assert wrong_positions(counts(accepted, drafted), len(origins)) == expected


def test_wrong_positions_past_the_output_are_dropped() -> None:
    # the last step rejected at generated index 6, but max_tokens cut the output at 6 tokens
    assert wrong_positions(counts([0, 2, 1], [2, 2, 2]), 6) == [1]


def test_alpha_counts_up_to_the_first_rejection_vllm_counts_every_proposal() -> None:
    c = counts([0, 2, 1], [3, 3, 3])  # counted positions: 1 + 3 + 2; proposals: 9
    stats = query_stats(c, num_generated=7, groups={"dataset": "sql"}, latency_s=0.5)
    assert (stats.alpha_sum, stats.num_proposed, stats.accepted, stats.steps) == (3.0, 6, 3, 3)
    assert vllm_acceptance(c) == (3, 9)


def test_at_gamma_one_both_rates_agree() -> None:
    c = counts([1, 0, 0, 1, 1], [1] * 5)
    stats = query_stats(c, num_generated=9, groups={}, latency_s=0.0)
    accepted, proposed = vllm_acceptance(c)
    assert stats.alpha_sum / stats.num_proposed == accepted / proposed == 0.6


def test_a_request_served_without_a_draft_counts_nothing() -> None:
    stats = query_stats(None, num_generated=5, groups={}, latency_s=0.1)
    assert (stats.num_proposed, stats.steps) == (0, 0) and wrong_positions(None, 5) == []


def test_summary_level_counters_are_refused() -> None:
    summary = SimpleNamespace(per_step_accepted=[], per_step_drafted=[], num_draft_tokens=6)
    with pytest.raises(ValueError, match="per_request_spec_decode_metrics='detailed'"):
        wrong_positions(summary, 10)


def test_accepting_more_than_drafted_is_an_error() -> None:
    with pytest.raises(ValueError, match="within 0..drafted"):
        vllm_acceptance(counts([3], [2]))
