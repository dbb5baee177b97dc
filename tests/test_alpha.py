"""osd.alpha: pooled alpha in closed form, None (JSON null, printed "-") when nothing was proposed, and every
pooled alpha of the engine, the evaluation and the replay is that one function's."""

from __future__ import annotations

import json

import pytest
import torch

from osd.alpha import format_alpha, pooled_alpha
from osd.analysis.simulate import Iteration, PromptSimulation, simulated_alpha
from osd.spec.evaluate import AcceptanceStats
from osd.spec.records import SpecOutput


def spec_output(
    alpha_sum: float, num_proposed: int, accepted_lengths: list[int], generated: int
) -> SpecOutput:
    return SpecOutput(
        generated_ids=torch.zeros(1, generated, dtype=torch.long), alpha_sum=alpha_sum, num_proposed=num_proposed,
        accepted_lengths=accepted_lengths, wrong_positions=[], target_logits=None,
        num_target_calls=len(accepted_lengths), draft_time_s=0.0, target_time_s=0.0, accept_time_s=0.0,
        cache_time_s=0.0, wall_time_s=1.0,
    )  # fmt: skip


def test_pooled_alpha_is_the_sum_over_the_count_and_none_without_proposals():
    assert pooled_alpha(3.0, 4) == 0.75
    assert pooled_alpha(0.0, 5) == 0.0
    assert pooled_alpha(0.0, 0) is None
    assert json.dumps({"alpha": pooled_alpha(0.0, 0)}) == '{"alpha": null}'  # valid JSON, unlike NaN


def test_format_alpha_prints_a_dash_for_none():
    assert format_alpha(None) == "-"
    assert format_alpha(0.75) == "0.750"
    assert format_alpha(0.12345, ".4f") == "0.1235"


def test_an_engine_output_without_proposals_has_no_alpha():
    # gamma 0 (or gamma auto choosing 0): every step commits one target token, none proposed
    plain = spec_output(0.0, 0, [0, 0, 0], 3)
    assert plain.alpha is None and plain.mean_accepted_length == 0.0
    # no step at all (nothing generated): no accepted length either
    assert spec_output(0.0, 0, [], 0).mean_accepted_length is None
    assert spec_output(1.5, 2, [1, 0], 3).alpha == 0.75


def test_acceptance_stats_pool_token_weighted_and_report_none_without_proposals():
    outputs = [spec_output(1.0, 4, [1, 0, 2], 6), spec_output(2.0, 2, [2], 3), spec_output(0.0, 0, [0], 1)]
    stats = AcceptanceStats.from_outputs(outputs)
    assert stats.alpha == pooled_alpha(3.0, 6) == 0.5  # not the mean of per-prompt alphas (0.625)
    assert stats.per_prompt_alpha == [0.25, 1.0, None]
    assert stats.mean_accepted_length == 5 / 5 and stats.tokens_per_step == 10 / 5
    none = AcceptanceStats.from_outputs([spec_output(0.0, 0, [0, 0], 2)])
    assert none.alpha is None and none.per_prompt_alpha == [None]
    empty = AcceptanceStats.from_outputs([spec_output(0.0, 0, [], 0)])
    assert empty.alpha is None and empty.mean_accepted_length is None and empty.tokens_per_step is None


def test_simulated_alpha_pools_the_counted_positions_of_every_prompt():
    def prompt(*iterations: tuple[int, float]) -> PromptSimulation:
        its = [
            Iteration(proposed=c, accepted=0, counted=c, alpha_sum=a, matched_so_far=0) for c, a in iterations
        ]
        return PromptSimulation(id="p", iterations=its, generated_ids=[])

    results = [prompt((2, 1.0), (3, 3.0)), prompt((1, 0.0)), prompt()]
    assert simulated_alpha(results) == pytest.approx(4.0 / 6)
    assert results[0].alpha == pytest.approx(4.0 / 5) and results[2].alpha is None
    assert simulated_alpha([]) is None
