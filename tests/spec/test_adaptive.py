"""gamma="auto": the policy's choice against Eq. 2's closed form, and its fallback to plain decoding."""

from __future__ import annotations

import pytest
import torch

from osd.cost_model import speedup_measured_verify
from osd.spec import GammaPolicy, SpeculativeDecoder
from osd.spec.adaptive import RowState, StepCosts
from tests.spec.references import hf_greedy, left_padded, random_prompts
from tests.tiny_models import tiny_model

VERIFY = [1.0, 1.04, 1.09, 1.14, 1.19, 1.24]  # seconds of a target pass over 1..6 tokens (linear from 2 on)


def _policy(draft_s: float = 0.1, **kwargs) -> GammaPolicy:
    """A policy that keeps these costs: the engine's timings of tiny models (overhead, scheduling
    noise) would otherwise replace them (timing_weight 0)."""
    policy = GammaPolicy(max_gamma=len(VERIFY) - 1, **({"timing_weight": 0.0} | kwargs))
    for batch in (1, 2, 3):
        policy.set_costs(batch, draft_s, VERIFY)
    return policy


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("draft_s", [0.02, 0.1, 0.4])
def test_choice_maximises_eq2_with_the_measured_verify_cost(alpha, draft_s):
    policy = _policy(draft_s, alpha=alpha)
    target = tiny_model("llama")
    c = draft_s / VERIFY[0]
    best = max(range(len(VERIFY)), key=lambda k: speedup_measured_verify(alpha, k, c, VERIFY[k] / VERIFY[0]))
    assert policy.choose(target, target) == best


@pytest.mark.parametrize("alpha", [0.3, 0.5, 0.65, 0.8])
def test_passes_flat_then_jumping_are_taken_as_measured(alpha):
    """A kernel that multiplies the weights with up to 4 rows at once: passes over 2-4 tokens cost about one step,
    the fifth token a jump. Rising passes are kept as measured, not put on a line, so the choice is Eq. 2's on
    them (gamma 3 at alpha 0.65, where a line through them would make 3 tokens look dearer)."""
    passes = [1.0, 1.045, 1.067, 1.13, 1.35, 1.5]
    policy = GammaPolicy(max_gamma=len(passes) - 1, alpha=alpha, timing_weight=0.0)
    policy.set_costs(1, 0.065, passes)
    target = tiny_model("llama")
    best = max(range(len(passes)), key=lambda k: speedup_measured_verify(alpha, k, 0.065, passes[k]))
    assert policy.choose(target, target) == best
    assert alpha != 0.65 or best == 3


def test_extremes_plain_decoding_and_the_longest_block():
    target = tiny_model("llama")
    assert _policy(alpha=0.0).choose(target, target) == 0
    assert _policy(alpha=1.0).choose(target, target) == len(VERIFY) - 1


def test_useless_draft_falls_back_to_plain_decoding_with_rare_probes():
    target = tiny_model("llama", layers=3)
    draft = tiny_model("llama", layers=1, seed=7)  # random weights: agrees with the target by chance only
    policy = _policy()
    prompt = random_prompts((6,))[0]
    out = SpeculativeDecoder(draft, target, gamma="auto", policy=policy).generate(prompt, max_new_tokens=60)
    torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 60), rtol=0, atol=0)
    assert policy.alpha < 0.2 and policy.choose(draft, target) in (0, 1)
    # after the first proposals fail, most steps propose nothing (one probe per probe_every steps)
    assert out.num_proposed < 0.4 * len(out.accepted_lengths), (out.num_proposed, len(out.accepted_lengths))


def test_identical_draft_drafts_the_longest_block():
    target = tiny_model("llama", layers=2)
    policy = _policy(alpha=0.9)
    out = SpeculativeDecoder(target, target, gamma="auto", policy=policy).generate(
        random_prompts((5,))[0], 25
    )
    assert out.alpha == 1.0 and policy.alpha > 0.9
    assert out.accepted_lengths[:4] == [policy.max_gamma] * 4


def test_batched_rows_stay_exact_with_auto_gamma():
    target = tiny_model("llama", layers=3)
    draft = tiny_model("llama", layers=1, seed=7)
    prompts = random_prompts((4, 8, 2))
    decoder = SpeculativeDecoder(draft, target, gamma="auto", policy=_policy())
    for prompt, out in zip(
        prompts, decoder.generate_batch(*left_padded(prompts), max_new_tokens=30), strict=True
    ):
        torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 30), rtol=0, atol=0)
    assert decoder.policy.alpha < 0.5  # it learned from the batch


def test_a_batch_waits_for_its_slowest_row():
    """Two rows that averaged alpha 0.45: Eq. 2 at the pooled alpha says a draft token pays, but the row that
    accepts nothing sets when the batch is done, and for it none does."""
    target = tiny_model("llama")
    rows = [
        RowState(remaining=40, alpha_sum=0.0, proposed=40),
        RowState(remaining=40, alpha_sum=36.0, proposed=40),
    ]
    assert _policy(alpha=0.45).choose(target, target, 2) >= 1
    assert _policy(alpha=0.45).choose(target, target, 2, rows) == 0
    # the good row alone would take the longest block
    assert _policy(alpha=0.45).choose(target, target, 1, rows[1:]) == len(VERIFY) - 1


def test_a_fresh_batch_expects_a_slow_row_as_rows_spread():
    """Before any proposal every row is the running estimate, and the batch is judged by its expected slowest
    row: the more rows and the wider the spread between rows, the lower; with no spread, the estimate."""
    target = tiny_model("llama")
    fresh = [RowState(remaining=40, alpha_sum=0.0, proposed=0)] * 16
    assert _policy(alpha=0.3, row_spread=0.0).choose(target, target, 3, fresh) >= 1
    assert _policy(alpha=0.3, row_spread=0.15).choose(target, target, 3, fresh[:1]) >= 1
    assert (
        _policy(alpha=0.3, row_spread=0.15).choose(target, target, 3, fresh) == 0
    )  # 0.3 - 1.77 * 0.15 < 0.05


def test_the_spread_between_rows_is_learnt_less_binomial_noise():
    """Rows with alphas 0.1 and 0.7 in turn (the estimate 0.4): a spread of 0.3; rows of one alpha: about none."""
    policy = GammaPolicy(alpha=0.4, window=10**9)
    for alpha in [0.1, 0.7] * 200:
        policy.observe_row(alpha * 50, 50)
    assert policy.spread == pytest.approx(0.3, abs=0.02)
    even = GammaPolicy(alpha=0.4, window=10**9)
    gen = torch.Generator().manual_seed(0)
    for _ in range(400):  # each row's 50 proposals accepted with probability 0.4
        even.observe_row(float(torch.bernoulli(torch.full((50,), 0.4), generator=gen).sum()), 50)
    assert even.spread < 0.05
    even.observe_row(0.0, 3)  # too few proposals to count
    assert even._spread_rows == pytest.approx(policy._spread_rows)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.5, 0.8, 1.0])
def test_one_row_is_ranked_by_its_posterior_alpha(alpha):
    """A row's posterior alpha (normal prior at the estimate with the spread between rows, its proposals with
    binomial noise) ranks k as Eq. 2 does at that alpha; a row with one token left gains nothing from proposals."""
    target = tiny_model("llama")
    policy = _policy(alpha=0.5, row_spread=0.2)
    row = RowState(remaining=100, alpha_sum=alpha * 25, proposed=25)
    prior, noise = 0.2**2, 0.25 / 25
    assert policy.row_alpha(row) == pytest.approx(0.5 + prior / (prior + noise) * (alpha - 0.5))
    expected = _policy(alpha=policy.row_alpha(row)).choose(target, target)
    assert policy.choose(target, target, 1, [row]) == expected
    assert policy.choose(target, target, 1, [row._replace(remaining=1)]) == 0


def test_measured_costs_cover_every_gamma(monkeypatch):
    """Every k is timed: the target's passes as the engine takes them (`target_pass_time`: the lean step unless the
    decoder says otherwise; several rows with a padding mask, as the batched engine runs), the draft step likewise
    (`draft_step_time`: the lean Llama step), with the same mask."""
    from osd.spec import adaptive

    calls, lean_calls, target_calls = [], [], []
    timer, lean_timer, pass_timer = adaptive.step_time, adaptive.draft_step_time, adaptive.target_pass_time
    monkeypatch.setattr(adaptive, "step_time", lambda *a, **kw: (calls.append(kw), timer(*a, **kw))[1])
    monkeypatch.setattr(
        adaptive,
        "draft_step_time",
        lambda m, *a, **kw: (lean_calls.append((m, kw)), lean_timer(m, *a, **kw))[1],
    )

    def timed_pass(m, **kw):
        target_calls.append((m, kw["length"], kw["lean"], kw["batch"], kw["padded"]))
        return pass_timer(m, **kw)

    monkeypatch.setattr(adaptive, "target_pass_time", timed_pass)
    target, draft = tiny_model("llama", layers=2), tiny_model("llama", layers=1)
    policy = GammaPolicy(max_gamma=3, context=8)
    costs = policy.measure_costs(draft, target, batch=2)
    assert len(costs.verify_s) == 4 and costs.draft_s > 0 and min(costs.verify_s) > 0
    policy.measure_costs(draft, target, batch=1)
    assert calls == []  # nothing through HF's forward
    assert target_calls == [(target, k + 1, True, 2, True) for k in range(4)] + [
        (target, k + 1, True, 1, False) for k in range(4)
    ]
    assert [(m, kw["batch"], kw["padded"]) for m, kw in lean_calls] == [(draft, 2, True), (draft, 1, False)]
    assert policy.costs[1].draft_s > 0
    # a decoder that steps its models through HF's forward times them so
    hf_policy = SpeculativeDecoder(draft, target, gamma="auto", lean_draft=False, lean_target=False).policy
    assert hf_policy.lean_draft is False and hf_policy.lean_target is False
    target_calls.clear()
    hf_policy.measure_costs(draft, target, batch=1)
    assert len(lean_calls) == 2 and len(calls) == 1  # the draft's step, through HF's forward
    assert target_calls == [(target, k + 1, False, 1, False) for k in range(hf_policy.max_gamma + 1)]


def test_a_padded_step_is_timed_with_its_mask(monkeypatch):
    """step_time(padded=True) hides the first slot of every other row, positions counting real tokens."""
    from osd.spec.timing import step_time

    model = tiny_model("llama", layers=1)
    seen = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **kw: (seen.append(kw), forward(*a, **kw))[1])
    step_time(model, context=4, length=2, reps=1, rounds=1, batch=3, padded=True)
    mask, positions = seen[-1]["attention_mask"], seen[-1]["position_ids"]
    assert mask[:, 0].tolist() == [0, 1, 0] and int(mask.sum()) == 3 * 6 - 2
    assert positions.tolist() == [[3, 4], [4, 5], [3, 4]]


def test_bad_gamma_values_are_refused():
    target = tiny_model("llama")
    with pytest.raises(ValueError, match="'auto'"):
        SpeculativeDecoder(target, target, gamma="fast")
    with pytest.raises(ValueError, match="needs gamma='auto'"):
        SpeculativeDecoder(target, target, gamma=3, policy=GammaPolicy())


def test_shrinking_batch_reuses_the_measured_costs():
    """Rows finish at different steps; the policy must not stop to measure every smaller batch."""
    target, draft = tiny_model("llama", layers=2), tiny_model("llama", layers=1)
    policy = GammaPolicy(max_gamma=2, context=8)
    policy.measure_costs(draft, target, batch=4)
    for batch in (4, 3, 2, 1):
        policy.choose(draft, target, batch)
    assert list(policy.costs) == [4]
    policy.choose(draft, target, 6)  # a larger batch than any measured is measured
    assert sorted(policy.costs) == [4, 6]


def test_observed_steps_override_a_wrong_measurement():
    """A measurement that made one draft token look cheap is corrected by the engine's own timings."""
    target = tiny_model("llama")
    policy = GammaPolicy(max_gamma=2, alpha=0.2)
    policy.set_costs(1, 0.1, [1.0, 1.0, 1.1])  # measured: a 2-token pass as cheap as a 1-token one
    assert policy.choose(target, target) == 1
    for _ in range(40):
        policy.observe_step(1, 1, 1.3)  # but the engine's steps proposing one token take 1.3 s
        policy.observe_step(1, 0, 1.0)
    assert policy.costs[1].step_seconds(1) == pytest.approx(1.3, rel=1e-2)
    assert policy.choose(target, target) == 0  # 1.2 tokens / 1.3 s < 1 token / 1 s


def test_unobserved_gammas_scale_with_the_observed_ones():
    policy = GammaPolicy(max_gamma=3)
    policy.set_costs(1, 0.1, [1.0, 1.1, 1.2, 1.3])
    costs = policy.costs[1]
    policy.observe_step(1, 0, 2.0)  # one timing moves the estimate timing_weight of the way
    assert costs.step_seconds(0) == pytest.approx(1.0 + policy.timing_weight * 1.0)
    for _ in range(100):
        policy.observe_step(1, 0, 2.0)  # the machine is twice as slow as measured
    # k draft steps and a verification over k + 1 tokens, doubled
    assert [costs.step_seconds(k) for k in range(4)] == pytest.approx([2.0, 2.4, 2.8, 3.2])
    assert costs.tokens_per_second(0.5, 1) == pytest.approx(1.5 / 2.4)


def test_the_engine_reports_its_steps_per_batch_size():
    target = tiny_model("llama", layers=3)
    draft = tiny_model("llama", layers=1, seed=7)
    policy = _policy(alpha=0.9, timing_weight=0.5)  # batch sizes 1..3 measured
    decoder = SpeculativeDecoder(draft, target, gamma="auto", policy=policy)
    decoder.generate(random_prompts((5,))[0], max_new_tokens=12)
    assert any(o is not None for o in policy.costs[1].observed_s)
    assert policy.costs[3].observed_s == [None] * len(VERIFY)
    decoder.generate_batch(*left_padded(random_prompts((4, 8, 2))), max_new_tokens=12)
    observed = [k for k, o in enumerate(policy.costs[3].observed_s) if o is not None]
    assert observed and all(policy.costs[3].observed_s[k] < 60 for k in observed)  # seconds, not the fakes


def test_one_slow_repetition_does_not_bend_the_verify_costs():
    measured = [1.0 + 0.1 * k for k in range(9)]
    measured[2], measured[6] = 0.5, 5.0  # one repetition too fast, one too slow
    costs = StepCosts(0.1, measured)
    # each k at most one token's increment (0.1 s) from its true cost
    assert [costs.verify(k) for k in range(9)] == pytest.approx([1.0 + 0.1 * k for k in range(9)], abs=0.101)


def test_a_one_token_step_keeps_its_own_cost_capped_by_two_tokens():
    """k = 0 runs other kernels than a verification: its measurement is not pulled onto the line
    through k >= 1 (a cheap one-token step at B = 16 here), but never costs more than k = 1."""
    cheap = StepCosts(0.1, [0.7, 1.0, 1.1, 1.2])
    assert [cheap.verify(k) for k in range(4)] == pytest.approx([0.7, 1.0, 1.1, 1.2])
    slow = StepCosts(0.1, [1.5, 1.0, 1.1, 1.2])
    assert slow.verify(0) == pytest.approx(1.0)


def test_stale_timings_give_way_to_the_scaled_measurement():
    costs = StepCosts(0.1, [1.0, 1.1, 1.2], fresh_steps=8)
    for _ in range(50):
        costs.observe(1, 5.0, 0.125)  # timings taken while the machine was busy
    assert costs.step_seconds(1) == pytest.approx(5.0, rel=1e-2)
    for _ in range(50):
        costs.observe(2, 2.8, 0.125)  # since then only k = 2 ran, at twice the measured cost (0.2 + 1.2 s)
    assert costs.step_seconds(1) == pytest.approx(2.4, rel=1e-2)
    assert costs.step_seconds(0) == pytest.approx(2.0, rel=1e-2)


def test_probes_of_the_runner_up_back_off_while_the_best_holds():
    """The runner-up runs after probe_every steps, then ever more rarely while the best k stays the
    first choice (intervals 4, 8, 16, 16 with max_probe_every 16); a new best brings the interval
    back to 4 (then 8)."""
    target = tiny_model("llama")
    policy = _policy(alpha=0.2, probe_every=4, max_probe_every=16)
    costs = policy.costs[1]
    ranked = sorted(range(len(VERIFY)), key=lambda k: -costs.tokens_per_second(0.2, k))
    choices = [policy.choose(target, target) for _ in range(48)]
    assert [i + 1 for i, k in enumerate(choices) if k != ranked[0]] == [4, 12, 28, 44]
    assert {choices[i - 1] for i in (4, 12, 28, 44)} == {ranked[1]}
    policy.alpha = 0.9  # the best k changes: the next probe (step 60 = 12 here) resets the interval
    best = max(range(len(VERIFY)), key=lambda k: costs.tokens_per_second(0.9, k))
    choices = [policy.choose(target, target) for _ in range(28)]
    assert best != ranked[0] and [i + 1 for i, k in enumerate(choices) if k != best] == [12, 16, 24]


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"max_gamma": 0}, "max_gamma"),
        ({"row_spread": -0.1}, "row_spread"),
        ({"row_window": 0}, "row_window"),
        ({"timing_weight": 1.5}, "timing_weight"),
        ({"alpha": 1.2}, "alpha"),
    ],
)
def test_bad_settings_name_themselves(kwargs, named):
    with pytest.raises(ValueError, match=named):
        GammaPolicy(**kwargs)
