"""The start-up choice of a serving configuration: the baseline is the fastest one-token step, the speculative
configuration maximises Eq. 2 over it with the measured passes, forced flags narrow only the latter, and the
caller's target is never changed."""

from __future__ import annotations

import pytest
import torch

from osd.cost_model import PassCosts, expected_tokens_per_step
from osd.spec import bf16_rows, serving_choice
from osd.spec.serving_choice import (
    LAYOUTS,
    SAME_LAYOUT_TOLERANCE,
    Measured,
    available_layouts,
    choose,
    measure_and_choose,
    serving_copy,
    speculative_query_s,
)
from osd.spec.weight_major import WeightMajorLinear
from tests.tiny_models import draft_from_target, tiny_model

# seconds of passes over 1..4 tokens: "plain" steps fastest but verifies dearly, "weight_major" verifies for
# about a step
A, B = "plain", "weight_major"
MEASURED = {A: Measured(A, 5.0, [1.0, 1.9, 2.6, 3.3]), B: Measured(B, 0.5, [1.2, 1.25, 1.3, 1.4])}


def test_the_baseline_is_the_fastest_query_alone_and_the_choice_the_fastest_speculative_one():
    """Queries of 20 tokens: A's prefill costs 5 steps, B's 0.5 (20 + 5 vs 24 + 0.5: B is the faster alone though
    A steps faster); at 100 tokens A is. The speculative choice minimises prefill + 20 / E[tokens] * (gamma
    draft steps + the pass, smoothed by `PassCosts`)."""
    choice = choose(MEASURED, draft_step_s=0.05, alpha=0.6, new_tokens=20)
    assert choice.baseline == B and choose(MEASURED, 0.05, 0.6, new_tokens=100).baseline == A

    def query(layout: str, gamma: int) -> float:
        verification = gamma * 0.05 + PassCosts.fit(MEASURED[layout].pass_s).at(gamma)
        return MEASURED[layout].prefill_s + 20 / expected_tokens_per_step(0.6, gamma) * verification

    best = min(((lay, g) for lay in MEASURED for g in (1, 2, 3)), key=lambda lg: query(*lg))
    assert (choice.layout, choice.gamma) == best == (B, 3)
    assert choice.predicted_speedup() == pytest.approx((0.5 + 20 * 1.2) / query(B, 3))
    summary = choice.summary()
    assert (
        summary["pass_ms"][B] == pytest.approx([1200, 1250, 1300, 1400]) and summary["prefill_ms"][A] == 5000
    )
    assert f"target alone: {B}" in choice.lines()[-1] and "float32" in choice.lines()[2]


def test_one_noisy_pass_does_not_sway_the_choice_of_gamma():
    """A start-up measurement of the main job (AVX512-BF16 VM, in steps): the pass over 3 tokens came out cheaper
    than the pass over 2. Taken as measured, gamma 2 wins at alpha 0.5; through the smoothed passes (`PassCosts`),
    gamma 3 does, as it does with the dip removed."""
    steps = [1.0, 1.04, 0.95, 1.08, 1.07, 1.07]
    noisy = {"packed": Measured("packed", 2.0, steps)}
    smooth = {"packed": Measured("packed", 2.0, [1.0, 1.04, 1.06, 1.08, 1.07, 1.07])}
    chosen = [choose(m, draft_step_s=0.044, alpha=0.5, new_tokens=32).gamma for m in (noisy, smooth)]
    assert chosen == [3, 3]

    def raw_query(gamma: int) -> float:  # as measured, not smoothed
        return 2.0 + 32 / expected_tokens_per_step(0.5, gamma) * (gamma * 0.044 + steps[gamma])

    assert min(range(1, 6), key=raw_query) == 2


def test_the_baseline_layout_serves_speculative_decoding_where_it_verifies_within_noise_of_the_fastest():
    """As `packed_rows` (the kernel's step, packed passes) beside `packed`: the baseline steps faster, its passes
    over several tokens are the same kernels' and measure a little dearer, or clearly dearer."""
    packed = Measured("packed", 1.0, [1.3, 1.00, 1.02, 1.04])
    for dearer, expected in ((1.02, "packed_rows"), (1.25, "packed")):
        rows = Measured("packed_rows", 1.0, [1.0] + [dearer * t for t in packed.pass_s[1:]])
        measured = {"packed": packed, "packed_rows": rows}
        choice = choose(measured, draft_step_s=0.05, alpha=0.6, new_tokens=32)
        assert (choice.baseline, choice.layout) == ("packed_rows", expected)
        # packed's best: what the baseline's layout is held against
        fastest = min(speculative_query_s(packed, 0.05, 0.6, g, 32) for g in (1, 2, 3))
        chosen = speculative_query_s(measured[choice.layout], 0.05, 0.6, choice.gamma, 32)
        assert chosen <= (1 + SAME_LAYOUT_TOLERANCE) * fastest
    forced = choose(measured, 0.05, 0.6, 32, layouts=["packed"])
    assert forced.layout == "packed"  # a forced layout is served even where the baseline's would do


def test_forced_layouts_and_gamma_narrow_the_speculative_choice_not_the_baseline():
    choice = choose(MEASURED, draft_step_s=0.05, alpha=0.6, new_tokens=20, layouts=[A], gammas=[2])
    assert (choice.baseline, choice.layout, choice.gamma) == (B, A, 2)
    assert choose(MEASURED, 0.05, 0.1, 20).gamma == 1  # a poor draft: the fewest proposals


def test_available_layouts_follow_the_forced_dtype_and_layout():
    assert available_layouts("float32") == ["weight_major"]
    assert available_layouts(layout="plain") == ["plain"]
    assert set(available_layouts()) <= set(LAYOUTS) and "plain" in available_layouts()
    with pytest.raises(ValueError, match="--dtype float32 --linears plain"):
        available_layouts("float32", "plain")


def test_serving_copies_leave_the_callers_model_as_it_is():
    target = tiny_model("llama")  # float32, as stored
    before = {k: v.clone() for k, v in target.state_dict().items()}
    classes = [type(m) for m in target.modules()]
    wm = serving_copy(target, "weight_major")
    plain = serving_copy(target, "plain")
    assert wm is not target and any(isinstance(m, WeightMajorLinear) for m in wm.modules())
    assert plain.dtype == torch.bfloat16 and plain is not target
    assert serving_copy(plain, "plain") is plain  # already bf16 and plain: nothing to copy
    assert [type(m) for m in target.modules()] == classes
    assert all(torch.equal(before[k], v) for k, v in target.state_dict().items())


def test_measure_times_the_draft_in_every_round_after_the_layouts(monkeypatch: pytest.MonkeyPatch):
    """A load that slows one round hits the draft's step as it hits the target's passes: each round visits the
    layouts and then the draft (behind the fastest step so far), and the best of each is kept."""
    calls = []
    slow = iter([2.0, 2.0, 2.0, 1.0, 1.0, 1.0])  # round 1 under load: A, B, the draft; round 2 quiet

    def pass_times(model: str, context: int, max_length: int, reused: int) -> list[float]:
        calls.append(model)
        step = {"a": 0.030, "b": 0.020}[model] * next(slow)
        return [0.1] + [step] * max_length

    def chain_step_time(draft: str, target: str, context: int, gamma: int, reps: int, rounds: int) -> float:
        calls.append(f"{draft} after {target}")
        return 0.001 * next(slow)

    monkeypatch.setattr(serving_choice, "pass_times", pass_times)
    monkeypatch.setattr(serving_choice, "chain_step_time", chain_step_time)
    measured, draft_s = serving_choice.measure({A: "a", B: "b"}, "draft", max_gamma=2, rounds=2)
    assert calls == ["a", "b", "draft after b"] * 2
    assert draft_s == pytest.approx(0.001) and measured[B].pass_s == pytest.approx([0.020] * 3)


def test_measure_and_choose_returns_the_models_it_chose():
    torch.manual_seed(0)
    target = tiny_model("llama", layers=2)
    draft = draft_from_target(target, 0.1).to(torch.bfloat16).eval()
    choice, models = measure_and_choose(target, draft, alpha=0.5, max_gamma=3, prompt_tokens=8, new_tokens=6)
    assert set(choice.measured) == set(available_layouts())
    assert all(len(m.pass_s) == 4 and min(m.pass_s) > 0 < m.prefill_s for m in choice.measured.values())
    assert set(models) == {choice.baseline, choice.layout} and 1 <= choice.gamma <= 3
    assert 0 < choice.draft_step_s < min(m.pass_s[0] for m in choice.measured.values()) * 10
    for name, model in models.items():
        assert model.dtype == getattr(torch, LAYOUTS[name].dtype)
    forced, _ = measure_and_choose(target, draft, 0.5, 3, 8, 6, dtype="float32", gamma=2)
    assert (forced.layout, forced.gamma) == ("weight_major", 2)


def test_the_gamma_policy_starts_from_the_choice_s_alpha_and_measured_costs():
    """Adaptive gamma for the online draft: on the chosen layout, up to the longest pass measured, its first choice
    the gamma Eq. 2 gives at the chosen-at alpha with the measured draft step and passes, without timing anything."""
    choice = choose(MEASURED, draft_step_s=0.05, alpha=0.6, new_tokens=20)
    policy = choice.gamma_policy()
    assert (policy.max_gamma, policy.alpha) == (3, 0.6)
    costs = policy.costs[1]
    assert costs.draft_s == 0.05 and costs.verify_s == MEASURED[choice.layout].pass_s

    def tokens_per_s(k: int) -> float:
        return expected_tokens_per_step(0.6, k) / (k * 0.05 + costs.verify(k))

    assert policy.choose(None, None) == max(range(4), key=tokens_per_s)  # no model is timed: costs are set
    poor = choose(MEASURED, 0.05, 0.1, 20, layouts=[A])  # a poor draft on dear passes: no proposal pays
    assert poor.gamma_policy().choose(None, None) == 0


def test_the_kernels_prefetch_race_is_recorded_and_printed(monkeypatch):
    """The bf16-rows kernel's race at its first use (`osd.spec.bf16_rows.prefetch_choice`) goes into the summary and
    the log, one line per raced row count."""
    races = {1: bf16_rows.Race(0.006, 0.004, True), 2: bf16_rows.Race(0.006, 0.0059, False)}
    monkeypatch.setattr(bf16_rows, "_prefetch_races", races)
    choice = choose(MEASURED, draft_step_s=0.05, alpha=0.6, new_tokens=20)
    assert choice.summary()["rows_kernel_prefetch"] == {
        "1": {"prefetch": True, "ms": [6.0, 4.0]},
        "2": {"prefetch": False, "ms": [6.0, 5.9]},  # within PREFETCH_MARGIN: not worth it
    }
    kernel_lines = [line for line in choice.lines() if line.startswith("bf16-rows kernel")]
    assert [line.split(":")[1].split("(")[0].strip() for line in kernel_lines] == [
        "with a prefetch",
        "without a prefetch",
    ]
