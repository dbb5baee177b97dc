"""The accept/reject rule and distributions, as pure functions on small tensors."""

from __future__ import annotations

import pytest
import torch

from osd.spec.sampling import (
    accept_reject,
    acceptance_probability,
    generator_on,
    greedy,
    logits_to_probs,
    sample,
)


def test_temperature_zero_is_one_hot_argmax():
    logits = torch.tensor([[0.1, 3.0, -1.0], [2.0, 0.0, 1.9]])
    torch.testing.assert_close(logits_to_probs(logits, 0.0), torch.tensor([[0.0, 1, 0], [1.0, 0, 0]]))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_greedy_is_argmax_with_its_first_index_among_ties(dtype):
    """bf16 logits tie often: greedy takes the first largest, as `argmax` (and HF generate) do, -inf rows of a
    sub-vocabulary head included."""
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randint(0, 6, (16, 3, 4096), generator=gen) * 0.5).to(dtype)  # a few values: many ties
    logits[..., ::3] = float("-inf")
    assert torch.equal(greedy(logits), logits.argmax(-1))
    assert torch.equal(greedy(logits[0, 0]), logits[0, 0].argmax())  # one row: a 0-dim index
    assert torch.equal(greedy(logits[:, :, 1::2]), logits[:, :, 1::2].argmax(-1))  # a strided view
    assert greedy(torch.tensor([[1.0, 3.0, 3.0, 2.0]], dtype=dtype)).tolist() == [1]
    nan = float("nan")
    assert greedy(torch.tensor([[1.0, nan, 3.0, nan]], dtype=dtype)).tolist() == [1]  # NaN first, as argmax
    assert greedy(logits.requires_grad_()).dtype == torch.long


def test_top_p_keeps_the_smallest_nucleus_and_renormalises():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    out = logits_to_probs(probs.log(), temperature=1.0, top_p=0.75)
    torch.testing.assert_close(out, torch.tensor([0.5, 0.3, 0.0, 0.0]) / 0.8)


def test_acceptance_probability_is_one_minus_total_variation():
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 10, generator=gen), -1)
    q = torch.softmax(torch.randn(4, 10, generator=gen), -1)
    torch.testing.assert_close(acceptance_probability(p, q), 1 - 0.5 * (p - q).abs().sum(-1))
    torch.testing.assert_close(acceptance_probability(p, p), torch.ones(4))


def test_one_hot_rule_equals_argmax_matching():
    """Greedy fast path in the decoder == the general rule on point masses."""
    gen = torch.Generator().manual_seed(1)
    for _ in range(50):
        target_logits = torch.randn(5, 7, generator=gen)
        draft_tokens = torch.randint(0, 7, (4,), generator=gen)
        draft_tokens[:2] = target_logits[:2].argmax(-1)  # make early acceptances likely
        p = logits_to_probs(target_logits, 0.0)
        q = torch.nn.functional.one_hot(draft_tokens, 7).float()
        n, token = accept_reject(draft_tokens, p, q, torch.rand(4, generator=gen), gen)
        matches = (draft_tokens == target_logits[:4].argmax(-1)).long().cumprod(0)
        assert n == int(matches.sum())
        assert int(token) == int(target_logits[n].argmax())


def test_first_emitted_token_is_distributed_as_the_target():
    """x ~ q, then accept or recover: the emitted token must follow p exactly (Leviathan Thm 1)."""
    gen = torch.Generator().manual_seed(2)
    p = torch.tensor([[0.5, 0.2, 0.2, 0.1, 0.0], [0.2, 0.2, 0.2, 0.2, 0.2]])  # [k + 1, V], k = 1
    q = torch.tensor([[0.1, 0.1, 0.3, 0.3, 0.2]])
    n_trials = 20000
    counts = torch.zeros(5)
    for _ in range(n_trials):
        x = sample(q, gen)  # [1]
        n, token = accept_reject(x, p, q, torch.rand(1, generator=gen), gen)
        counts[x[0] if n == 1 else token] += 1
    # each frequency has std <= sqrt(0.25 / 20000) = 0.0035; 0.015 is over 4 standard deviations
    torch.testing.assert_close(counts / n_trials, p[0], rtol=0, atol=0.015)
    assert (q[0] - p[0]).abs().max() > 0.1  # the draft alone would fail the check above


class _RecordingGenerator:
    """Stands in for torch.Generator on a device this machine lacks ("meta" has no generator)."""

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.device = torch.device(device)
        self.seed: int | None = None

    def manual_seed(self, seed: int) -> _RecordingGenerator:
        self.seed = seed
        return self


def test_sample_uses_a_generator_on_the_probabilities_device(monkeypatch):
    """A CPU generator with probabilities elsewhere (CUDA, a teacher spread over devices): torch would raise."""
    cpu_generator = torch.Generator().manual_seed(0)
    used: list[_RecordingGenerator | torch.Generator] = []

    def multinomial(probs, num_samples, generator=None):
        used.append(generator)
        return torch.zeros(probs.shape[0], num_samples, dtype=torch.long, device=probs.device)

    monkeypatch.setattr(torch, "Generator", _RecordingGenerator)
    monkeypatch.setattr(torch, "multinomial", multinomial)
    probs = torch.full((3, 5), 0.2, device="meta")
    assert sample(probs, cpu_generator).device == probs.device
    sample(probs, cpu_generator)
    assert [g.device for g in used] == [probs.device] * 2
    # seeded from the caller's generator: reproducible, and a fresh stream per call
    assert used[0].seed != used[1].seed
    cpu_generator.manual_seed(0)
    assert [g.seed for g in used] == [int(torch.randint(2**62, (1,), generator=cpu_generator)) for _ in used]


def test_a_generator_on_the_right_device_is_used_as_is():
    generator = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(4, 6), -1)
    expected = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(3))[:, 0]
    assert torch.equal(sample(probs, generator), expected)
    assert generator_on(torch.device("cpu"), None) is None
