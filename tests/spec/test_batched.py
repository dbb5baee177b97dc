"""`SpeculativeDecoder.generate_batch` against `generate` on each row alone and the target's own decoding."""

from __future__ import annotations

import pytest
import torch

from osd.distill.data import pad
from osd.spec import SpeculativeDecoder
from tests.spec.test_decoder import NOISE, _hf_greedy
from tests.tiny_models import FAMILIES, VOCAB, draft_from_target, tiny_model


def _left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [1, T_i] as input_ids [B, max T] and attention_mask, padding on the left."""
    return pad([p[0].tolist() for p in prompts], 0, "left")


def _prompts(lengths: tuple[int, ...]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(3, VOCAB, (1, n), generator=gen) for n in lengths]


@pytest.fixture(scope="module", params=FAMILIES)
def pair(request):
    target = tiny_model(request.param, layers=3)
    return draft_from_target(target, NOISE[request.param]), target


def test_greedy_rows_equal_the_target_and_the_single_row_engine(pair):
    """Prompts of different lengths in one batch: each row's tokens are the target's greedy decoding,
    and its acceptance record (alpha, accepted lengths, wrong positions, target logits) is `generate`'s."""
    draft, target = pair
    prompts = _prompts((3, 9, 6, 1))
    decoder = SpeculativeDecoder(draft, target, gamma=4)
    outs = decoder.generate_batch(*_left_padded(prompts), max_new_tokens=30, return_target_logits=True)
    assert len(outs) == len(prompts)
    for prompt, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out.generated_ids, _hf_greedy(target, prompt, 30), rtol=0, atol=0)
        alone = decoder.generate(prompt, max_new_tokens=30, return_target_logits=True)
        assert out.accepted_lengths == alone.accepted_lengths
        assert out.wrong_positions == alone.wrong_positions
        assert out.num_proposed == alone.num_proposed and out.alpha_sum == pytest.approx(alone.alpha_sum)
        scale = float(
            alone.target_logits.abs().max()
        )  # tiny T5 logits reach ~100: float noise scales with them
        torch.testing.assert_close(out.target_logits, alone.target_logits, rtol=1e-4, atol=1e-4 * scale)
    # rows accepted different numbers of tokens at the same step, or per-row acceptance went untested
    steps = min(len(o.accepted_lengths) for o in outs)
    assert any(len({o.accepted_lengths[s] for o in outs}) > 1 for s in range(steps))


def test_rows_stop_at_their_own_eos_and_length():
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    prompts = _prompts((4, 7, 5))
    decoder = SpeculativeDecoder(draft, target, gamma=3)
    free = [_hf_greedy(target, p, 20)[0].tolist() for p in prompts]
    eos = free[1][5]  # row 1 stops early at this token; other rows stop there too if they emit it
    outs = decoder.generate_batch(*_left_padded(prompts), max_new_tokens=20, eos_token_id=eos)
    for prompt, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out.generated_ids, _hf_greedy(target, prompt, 20, eos_token_id=eos))
    assert outs[1].generated_ids.shape[1] <= 6 < max(o.generated_ids.shape[1] for o in outs)


def test_identical_draft_accepts_everything_in_every_row():
    target = tiny_model("llama", layers=2)
    outs = SpeculativeDecoder(target, target, gamma=4).generate_batch(
        *_left_padded(_prompts((2, 5))), max_new_tokens=26
    )
    for out in outs:
        assert out.alpha == 1.0 and out.accepted_lengths == [4, 4, 4, 4, 4, 0]


def test_one_row_batch_equals_generate():
    target = tiny_model("gpt2", layers=2)
    draft = draft_from_target(target, NOISE["gpt2"])
    prompt = _prompts((6,))[0]
    decoder = SpeculativeDecoder(draft, target, gamma=3)
    (out,) = decoder.generate_batch(prompt, max_new_tokens=25)
    alone = decoder.generate(prompt, max_new_tokens=25)
    assert out.generated_ids.tolist() == alone.generated_ids.tolist()
    assert out.accepted_lengths == alone.accepted_lengths


def test_all_padding_row_is_refused():
    target = tiny_model("llama")
    ids, mask = _left_padded(_prompts((3, 2)))
    mask[1] = 0
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        SpeculativeDecoder(target, target).generate_batch(ids, mask)


def _marginal_second_token(model, prompt: torch.Tensor) -> torch.Tensor:
    """Exact P(x2) = sum_x1 p(x1) p(x2 | x1) for a vocabulary of 8, from two forwards: [V]."""
    firsts = torch.arange(8)[:, None]  # [V, 1]
    with torch.no_grad():
        if model.config.is_encoder_decoder:  # the prompt is the encoder input
            start = torch.zeros(1, 1, dtype=torch.long)  # decoder_start_token_id 0
            p1 = torch.softmax(model(input_ids=prompt, decoder_input_ids=start).logits[0, -1], -1)
            decoder = torch.cat([start.repeat(8, 1), firsts], 1)
            p2 = torch.softmax(
                model(input_ids=prompt.repeat(8, 1), decoder_input_ids=decoder).logits[:, -1], -1
            )
        else:
            p1 = torch.softmax(model(prompt).logits[0, -1], -1)
            p2 = torch.softmax(model(torch.cat([prompt.repeat(8, 1), firsts], 1)).logits[:, -1], -1)  # [V, V]
    return p1 @ p2


@pytest.mark.parametrize("family", FAMILIES)
def test_sampling_keeps_every_row_distributed_as_the_target(family):
    """The second generated token of each row follows the target's marginal for that row's prompt
    (see test_decoder's single-row version), with prompts of different lengths decoded together."""
    target = tiny_model(family, layers=2, vocab_size=8)
    draft = draft_from_target(target, 0.6)
    prompts = [torch.tensor([[3, 5, 7]]), torch.tensor([[6, 4]])]
    ids, mask = _left_padded(prompts)
    n = 1500
    ids, mask = ids.repeat(n // 2, 1), mask.repeat(n // 2, 1)  # 750 copies of each prompt in one batch
    outs = SpeculativeDecoder(draft, target, gamma=2).generate_batch(
        ids, mask, max_new_tokens=2, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    for r, prompt in enumerate(prompts):
        exact = _marginal_second_token(target, prompt)
        counts = torch.bincount(
            torch.tensor([o.generated_ids[0, 1] for o in outs[r::2]]), minlength=8
        ).float()
        tv = 0.5 * (counts / counts.sum() - exact).abs().sum()
        # sampling noise: E[TV] <= 0.5 * sqrt(8 / 750) = 0.052
        assert tv < 0.08, (r, tv)
        # the draft's own marginal lies outside that margin, so a broken rule would fail
        assert 0.5 * (_marginal_second_token(draft, prompt) - exact).abs().sum() > 0.1, r


@pytest.mark.parametrize("slack", [0.0, 100.0])
def test_masked_slots_and_compaction_both_decode_exactly(monkeypatch, slack):
    """Rejected slots stay in the cache, masked, until they waste SLACK of its width: with SLACK 0 the
    cache is compacted at every rejection, with a huge SLACK never; both are the target's greedy."""
    from osd.spec import batched

    compactions = []
    compact = batched._RowCache._compact
    monkeypatch.setattr(batched, "SLACK", slack)
    monkeypatch.setattr(batched._RowCache, "_compact", lambda self: (compactions.append(1), compact(self)))
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    prompts = _prompts((3, 9, 6, 1))
    outs = SpeculativeDecoder(draft, target, gamma=3).generate_batch(
        *_left_padded(prompts), max_new_tokens=24
    )
    for prompt, out in zip(prompts, outs, strict=True):
        torch.testing.assert_close(out.generated_ids, _hf_greedy(target, prompt, 24), rtol=0, atol=0)
    assert (len(compactions) > 0) == (slack == 0.0)


def test_gamma_zero_is_plain_target_decoding():
    target = tiny_model("opt", layers=2)
    draft = draft_from_target(target, NOISE["opt"])
    prompts = _prompts((4, 7))
    decoder = SpeculativeDecoder(draft, target, gamma=0)
    outs = decoder.generate_batch(*_left_padded(prompts), max_new_tokens=12)
    for prompt, out in zip(prompts, outs, strict=True):
        alone = decoder.generate(prompt, max_new_tokens=12)
        for o in (out, alone):
            torch.testing.assert_close(o.generated_ids, _hf_greedy(target, prompt, 12), rtol=0, atol=0)
            assert o.num_proposed == 0 and o.accepted_lengths == [0] * 12
