"""Each divergence against its closed form in float64, plus TRL's loss-bug catalogue."""

from __future__ import annotations

import pytest
import torch

from osd.distill.losses import forward_kl, get_divergence, jsd, reference_mix, reverse_kl, tvd

B, T, V = 2, 5, 7


def _logits(seed: int, scale: float = 3.0, shape=(B, T, V)) -> torch.Tensor:
    return scale * torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _kl64(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) per position from float64 probabilities, the textbook sum."""
    return (a * (a.log() - b.log())).sum(-1)


def closed_form(name: str, s: torch.Tensor, t: torch.Tensor, beta: float = 0.5) -> torch.Tensor:
    """Per-position divergence from probabilities, float64."""
    q, p = torch.softmax(s.double(), -1), torch.softmax(t.double(), -1)
    if name == "forward":
        return _kl64(p, q)
    if name == "reverse":
        return _kl64(q, p)
    if name == "jsd":
        m = beta * p + (1 - beta) * q
        return beta * _kl64(p, m) + (1 - beta) * _kl64(q, m)
    if name == "tvd":
        return 0.5 * (p - q).abs().sum(-1)
    if name == "reference_mix":
        return 0.9 * _kl64(p, q) + 0.1 * _kl64(q, p)
    raise AssertionError(name)


FUNCS = {"forward": forward_kl, "reverse": reverse_kl, "jsd": jsd, "tvd": tvd, "reference_mix": reference_mix}
MASK = torch.tensor([[True, True, False, True, False], [False, True, True, True, True]])


@pytest.mark.parametrize("name", FUNCS)
def test_matches_closed_form_mean_over_counted_positions(name):
    s, t = _logits(0), _logits(1)
    expected = closed_form(name, s, t)[MASK].mean()
    torch.testing.assert_close(FUNCS[name](s, t, MASK).double(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", FUNCS)
def test_flat_layout_and_reductions_agree(name):
    s, t = _logits(2), _logits(3)
    fn = FUNCS[name]
    per_position = fn(s, t, MASK, reduction="none")
    assert per_position.shape == (B, T) and (per_position[~MASK] == 0).all()
    torch.testing.assert_close(fn(s, t, MASK, reduction="sum"), per_position.sum())
    torch.testing.assert_close(fn(s.view(-1, V), t.view(-1, V), MASK.view(-1)), fn(s, t, MASK))


@pytest.mark.parametrize("name", FUNCS)
def test_zero_for_identical_distributions(name):
    s = _logits(4)
    assert FUNCS[name](s, s.clone(), MASK).abs() < 1e-6


def test_padding_never_enters_the_mean():
    """TRL #2202 ('batchmean' over padding): garbage at masked positions must not change the loss."""
    s, t = _logits(5), _logits(6)
    garbage_s, garbage_t = s.clone(), t.clone()
    garbage_s[~MASK] = 1e4 * torch.randn_like(garbage_s[~MASK])
    garbage_t[~MASK] = float("nan")
    for fn in FUNCS.values():
        torch.testing.assert_close(fn(garbage_s, garbage_t, MASK), fn(s, t, MASK))
    # and the mean divides by the 7 counted positions, not by B*T = 10 nor by B
    assert MASK.sum() == 7
    torch.testing.assert_close(
        forward_kl(s, t, MASK).double(), closed_form("forward", s, t)[MASK].sum() / 7, rtol=1e-5, atol=1e-6
    )


def test_jsd_beta_weights_the_teacher_not_swapped():
    """TRL #5731: beta belongs to the teacher, M = beta*P + (1-beta)*Q."""
    s, t = _logits(7), _logits(8)
    beta = 0.2
    expected = closed_form("jsd", s, t, beta)[MASK].mean()
    swapped = closed_form("jsd", s, t, 1 - beta)[MASK].mean()
    got = jsd(s, t, MASK, beta=beta).double()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert (got - swapped).abs() > 1e-3  # the two weightings really differ on these logits
    # exchanging the roles of the two models is the same as swapping beta
    torch.testing.assert_close(jsd(t, s, MASK, beta=1 - beta), jsd(s, t, MASK, beta=beta))


def test_log_space_mixture_is_finite_for_extreme_logits():
    """TRL #3043: the JSD mixture in probability space underflows to log(0) for large logits."""
    s, t = _logits(9, scale=80.0), _logits(10, scale=80.0)
    s.requires_grad_(True)
    for name, fn in FUNCS.items():
        loss = fn(s, t, MASK)
        assert torch.isfinite(loss), name
        (grad,) = torch.autograd.grad(loss, s)
        assert torch.isfinite(grad).all(), name
    # the naive float32 probability-space mixture does produce NaN here, so the check above has teeth
    q, p = torch.softmax(s.detach(), -1), torch.softmax(t, -1)
    m = 0.5 * p + 0.5 * q
    naive = 0.5 * (p * (p.log() - m.log())).sum(-1) + 0.5 * (q * (q.log() - m.log())).sum(-1)
    assert not torch.isfinite(naive).all()
    torch.testing.assert_close(
        jsd(s.detach(), t, MASK).double(),
        closed_form("jsd", s.detach(), t)[MASK].mean(),
        rtol=1e-4,
        atol=1e-5,
    )


def test_bf16_inputs_computed_in_float32():
    s, t = _logits(11), _logits(12)
    s16, t16 = s.bfloat16(), t.bfloat16()
    for fn in FUNCS.values():
        out = fn(s16, t16, MASK)
        assert out.dtype == torch.float32
        torch.testing.assert_close(out, fn(s16.float(), t16.float(), MASK))


def test_no_gradient_flows_into_the_teacher():
    s, t = _logits(13).requires_grad_(True), _logits(14).requires_grad_(True)
    for fn in FUNCS.values():
        (grad_s, grad_t) = torch.autograd.grad(fn(s, t, MASK), (s, t), allow_unused=True)
        assert grad_t is None and grad_s.abs().sum() > 0


def test_temperature_divides_both_logits():
    s, t = _logits(15), _logits(16)
    for fn in FUNCS.values():
        torch.testing.assert_close(fn(s, t, MASK, temperature=2.0), fn(s / 2, t / 2, MASK))


def test_tvd_is_one_minus_acceptance():
    """1 - TVD(P, Q) = sum_v min(p, q): the acceptance rate of speculative decoding."""
    s, t = _logits(17), _logits(18)
    alpha = torch.minimum(torch.softmax(s, -1), torch.softmax(t, -1)).sum(-1)
    torch.testing.assert_close(1 - tvd(s, t, reduction="none"), alpha, rtol=1e-5, atol=1e-6)


def test_forward_kl_is_soft_cross_entropy_minus_teacher_entropy():
    """The reference's forward loss was the soft cross-entropy; it differs by a constant (same gradient)."""
    s, t = _logits(19), _logits(20)
    p = torch.softmax(t, -1)
    soft_ce = -(p * torch.log_softmax(s, -1)).sum(-1)
    entropy = -(p * torch.log_softmax(t, -1)).sum(-1)
    torch.testing.assert_close(forward_kl(s, t, reduction="none"), soft_ce - entropy, rtol=1e-5, atol=1e-5)


def test_reductions_and_empty_mask():
    s, t = _logits(21), _logits(22)
    empty = torch.zeros(B, T, dtype=torch.bool)
    assert forward_kl(s, t, empty) == 0
    with pytest.raises(ValueError, match="reduction"):
        forward_kl(s, t, MASK, reduction="batchmean")
    with pytest.raises(ValueError, match="shared vocabulary"):
        forward_kl(s, t[..., :-1], MASK)


def test_get_divergence():
    s, t = _logits(23), _logits(24)
    assert get_divergence("forward") is forward_kl
    torch.testing.assert_close(get_divergence("jsd", jsd_beta=0.3)(s, t, MASK), jsd(s, t, MASK, beta=0.3))
    with pytest.raises(ValueError, match="--kl_method"):
        get_divergence("kl")
    with pytest.raises(ValueError, match="--jsd_beta"):
        jsd(s, t, MASK, beta=1.0)
