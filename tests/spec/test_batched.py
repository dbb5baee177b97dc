"""`SpeculativeDecoder.generate_batch` against `generate` on each row alone and the target's own decoding."""

from __future__ import annotations

import pytest
import torch

from osd.spec import SpeculativeDecoder
from tests.devices import DEVICES, on_device
from tests.spec.references import NOISE, hf_greedy, left_padded, marginal_second_token, random_prompts
from tests.tiny_models import FAMILIES, draft_from_target, tiny_model


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_rows_equal_the_target_and_the_single_row_engine(pair, device):
    """Prompts of different lengths in one batch: each row's tokens are the target's greedy decoding,
    and its acceptance record (alpha, accepted lengths, wrong positions, target logits) is `generate`'s."""
    draft, target = on_device(device, *pair)
    prompts = [p.to(device) for p in random_prompts((3, 9, 6, 1))]
    decoder = SpeculativeDecoder(draft, target, gamma=4)
    ids, mask = (t.to(device) for t in left_padded(prompts))
    outs = decoder.generate_batch(ids, mask, max_new_tokens=30, return_target_logits=True)
    assert len(outs) == len(prompts)
    for prompt, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 30), rtol=0, atol=0)
        alone = decoder.generate(prompt, max_new_tokens=30, return_target_logits=True)
        assert out.accepted_lengths == alone.accepted_lengths
        assert out.wrong_positions == alone.wrong_positions
        assert out.num_proposed == alone.num_proposed and out.alpha_sum == pytest.approx(alone.alpha_sum)
        # tiny T5 logits reach ~100: float noise scales with them. A batch and a single row run different
        # GEMM kernels, on CUDA (an H200 gave T5 differences up to 2.4e-4 of the scale, tokens equal) and on
        # the CPU (1.8e-4 seen with a weight-major target, osd.spec.weight_major)
        scale = float(alone.target_logits.abs().max()) * 1e-3
        torch.testing.assert_close(out.target_logits, alone.target_logits, rtol=1e-4, atol=scale)
    # rows accepted different numbers of tokens at the same step, or per-row acceptance went untested
    steps = min(len(o.accepted_lengths) for o in outs)
    assert any(len({o.accepted_lengths[s] for o in outs}) > 1 for s in range(steps))


def test_rows_stop_at_their_own_eos_and_length():
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    prompts = random_prompts((4, 7, 5))
    decoder = SpeculativeDecoder(draft, target, gamma=3)
    free = [hf_greedy(target, p, 20)[0].tolist() for p in prompts]
    eos = free[1][5]  # row 1 stops early at this token; other rows stop there too if they emit it
    outs = decoder.generate_batch(*left_padded(prompts), max_new_tokens=20, eos_token_id=eos)
    for prompt, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 20, eos_token_id=eos))
    assert outs[1].generated_ids.shape[1] <= 6 < max(o.generated_ids.shape[1] for o in outs)


def test_identical_draft_accepts_everything_in_every_row():
    target = tiny_model("llama", layers=2)
    outs = SpeculativeDecoder(target, target, gamma=4).generate_batch(
        *left_padded(random_prompts((2, 5))), max_new_tokens=26
    )
    for out in outs:
        assert out.alpha == 1.0 and out.accepted_lengths == [4, 4, 4, 4, 4, 0]


def test_one_row_batch_equals_generate():
    target = tiny_model("gpt2", layers=2)
    draft = draft_from_target(target, NOISE["gpt2"])
    prompt = random_prompts((6,))[0]
    decoder = SpeculativeDecoder(draft, target, gamma=3)
    (out,) = decoder.generate_batch(prompt, max_new_tokens=25)
    alone = decoder.generate(prompt, max_new_tokens=25)
    assert out.generated_ids.tolist() == alone.generated_ids.tolist()
    assert out.accepted_lengths == alone.accepted_lengths


def test_all_padding_row_is_refused():
    target = tiny_model("llama")
    ids, mask = left_padded(random_prompts((3, 2)))
    mask[1] = 0
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        SpeculativeDecoder(target, target).generate_batch(ids, mask)


@pytest.mark.parametrize("family", FAMILIES)
def test_sampling_keeps_every_row_distributed_as_the_target(family):
    """The second generated token of each row follows the target's marginal for that row's prompt
    (see test_decoder's single-row version), with prompts of different lengths decoded together."""
    target = tiny_model(family, layers=2, vocab_size=8)
    draft = draft_from_target(target, 0.6)
    prompts = [torch.tensor([[3, 5, 7]]), torch.tensor([[6, 4]])]
    ids, mask = left_padded(prompts)
    n = 1500
    ids, mask = ids.repeat(n // 2, 1), mask.repeat(n // 2, 1)  # 750 copies of each prompt in one batch
    outs = SpeculativeDecoder(draft, target, gamma=2).generate_batch(
        ids, mask, max_new_tokens=2, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    for r, prompt in enumerate(prompts):
        exact = marginal_second_token(target, prompt)
        counts = torch.bincount(
            torch.tensor([o.generated_ids[0, 1] for o in outs[r::2]]), minlength=8
        ).float()
        tv = 0.5 * (counts / counts.sum() - exact).abs().sum()
        # sampling noise: E[TV] <= 0.5 * sqrt(8 / 750) = 0.052
        assert tv < 0.08, (r, tv)
        # the draft's own marginal lies outside that margin, so a broken rule would fail
        assert 0.5 * (marginal_second_token(draft, prompt) - exact).abs().sum() > 0.1, r


@pytest.mark.parametrize("slack", [0.0, 100.0])
def test_masked_slots_and_compaction_both_decode_exactly(monkeypatch, slack):
    """Rejected slots stay in the cache, masked, until they waste SLACK of its width: with SLACK 0 the
    cache is compacted at every rejection, with a huge SLACK never; both are the target's greedy."""
    from osd.spec import batched

    compactions = []
    compact = batched.RowCache._compact
    monkeypatch.setattr(batched, "SLACK", slack)
    monkeypatch.setattr(batched.RowCache, "_compact", lambda self: (compactions.append(1), compact(self)))
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    prompts = random_prompts((3, 9, 6, 1))
    outs = SpeculativeDecoder(draft, target, gamma=3).generate_batch(*left_padded(prompts), max_new_tokens=24)
    for prompt, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 24), rtol=0, atol=0)
    assert (len(compactions) > 0) == (slack == 0.0)


def test_gamma_zero_is_plain_target_decoding():
    target = tiny_model("opt", layers=2)
    draft = draft_from_target(target, NOISE["opt"])
    prompts = random_prompts((4, 7))
    decoder = SpeculativeDecoder(draft, target, gamma=0)
    outs = decoder.generate_batch(*left_padded(prompts), max_new_tokens=12)
    for prompt, out in zip(prompts, outs, strict=True):
        alone = decoder.generate(prompt, max_new_tokens=12)
        for o in (out, alone):
            torch.testing.assert_close(o.generated_ids, hf_greedy(target, prompt, 12), rtol=0, atol=0)
            assert o.num_proposed == 0 and o.accepted_lengths == [0] * 12
