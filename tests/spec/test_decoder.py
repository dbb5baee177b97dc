"""The engine against independent references: HF greedy `generate`, fresh forwards, the rule's definition."""

from __future__ import annotations

import pytest
import torch

from osd.spec import SpeculativeDecoder
from tests.devices import DEVICES, on_device
from tests.spec.references import NOISE, hf_greedy, marginal_second_token, random_prompt
from tests.tiny_models import VOCAB, draft_from_target, tiny_model


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_output_equals_target_generate(pair, device):
    draft, target = on_device(device, *pair)
    for seed in range(2):
        prompt = random_prompt(seed=seed).to(device)
        out = SpeculativeDecoder(draft, target, gamma=4).generate(prompt, max_new_tokens=40)
        torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 40), rtol=0, atol=0)
        # both the accept and the reject path ran, or the equality above proves little
        assert 0.0 < out.alpha < 1.0, out.alpha
        assert out.wrong_positions


def test_identical_draft_accepts_everything(pair):
    _, target = pair
    out = SpeculativeDecoder(target, target, gamma=4).generate(random_prompt(), max_new_tokens=26)
    assert out.alpha == 1.0
    assert out.wrong_positions == []
    # 26 tokens = 5 full steps of 4 accepted + 1 bonus, then one step with the last token alone
    assert out.accepted_lengths == [4, 4, 4, 4, 4, 0]


def test_identical_draft_sampling_alpha_is_one():
    target = tiny_model("llama")
    gen = torch.Generator().manual_seed(0)
    out = SpeculativeDecoder(target, target, gamma=3).generate(
        random_prompt(), max_new_tokens=20, temperature=1.0, generator=gen
    )
    assert out.alpha == pytest.approx(1.0, abs=1e-5)
    assert out.wrong_positions == []


def test_wrong_positions_are_where_the_draft_disagreed():
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    prompt = random_prompt()
    out = SpeculativeDecoder(draft, target, gamma=4).generate(prompt, max_new_tokens=40)
    gen = out.generated_ids[0]
    full = torch.cat([prompt[0], gen])
    with torch.no_grad():  # the draft's greedy choice for every generated position, no cache
        draft_choice = draft(full[None]).logits[0, prompt.shape[1] - 1 : -1].argmax(-1)
    step_ends = torch.tensor([n + 1 for n in out.accepted_lengths]).cumsum(0) - 1
    for i in range(len(gen)):
        if i in out.wrong_positions:
            assert draft_choice[i] != gen[i], i
        elif i not in step_ends:  # an accepted draft token
            assert draft_choice[i] == gen[i], i


def test_target_logits_equal_a_fresh_target_forward(pair):
    draft, target = pair
    prompt = random_prompt()
    out = SpeculativeDecoder(draft, target, gamma=4).generate(
        prompt, max_new_tokens=30, return_target_logits=True
    )
    gen = out.generated_ids
    with torch.no_grad():
        if target.config.is_encoder_decoder:
            dec_in = torch.cat([torch.zeros(1, 1, dtype=torch.long), gen[:, :-1]], 1)
            fresh = target(input_ids=prompt, decoder_input_ids=dec_in).logits[0]
        else:
            fresh = target(torch.cat([prompt, gen], 1)).logits[0, prompt.shape[1] - 1 : -1]
    # the cached passes (a few rows) and the fresh one (all of them) run different GEMM kernels; float noise
    # scales with the logits, which reach ~100 in the tiny T5 (2e-5 of it seen)
    scale = float(fresh.abs().max())
    torch.testing.assert_close(out.target_logits, fresh, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("max_new_tokens", [1, 2, 5, 6, 11])
def test_max_new_tokens_boundary(max_new_tokens):
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    prompt = random_prompt()
    out = SpeculativeDecoder(draft, target, gamma=5).generate(prompt, max_new_tokens=max_new_tokens)
    torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, max_new_tokens), rtol=0, atol=0)


@pytest.mark.parametrize("draft_kind", ["identical", "noisy"])
def test_eos_stops_generation_even_inside_a_draft_block(draft_kind):
    target = tiny_model("llama", layers=3)
    draft = target if draft_kind == "identical" else draft_from_target(target, NOISE["llama"])
    prompt = random_prompt()
    reference = hf_greedy(target, prompt, 30)[0].tolist()
    eos = reference[7]  # a token the target emits mid-block (position 7 of 5-token blocks)
    expected = reference[: reference.index(eos) + 1]
    out = SpeculativeDecoder(draft, target, gamma=5).generate(
        prompt, max_new_tokens=30, eos_token_id=eos, return_target_logits=True
    )
    assert out.generated_ids[0].tolist() == expected
    assert out.target_logits.shape[0] == len(expected)
    assert all(p < len(expected) for p in out.wrong_positions)


def test_prompt_near_context_limit_stops_at_the_limit():
    target = tiny_model("llama", layers=3, max_position_embeddings=32)
    draft = draft_from_target(target, NOISE["llama"])
    prompt = random_prompt(length=28)
    out = SpeculativeDecoder(draft, target, gamma=5).generate(prompt, max_new_tokens=20)
    torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 4), rtol=0, atol=0)
    with pytest.raises(ValueError, match="context"):
        SpeculativeDecoder(draft, target).generate(random_prompt(length=32), max_new_tokens=5)


def test_vocabularies_differing_by_padding_rows_work_on_the_shared_part():
    target = tiny_model("llama", layers=3)
    draft = draft_from_target(target, NOISE["llama"])
    draft.resize_token_embeddings(VOCAB + 1)  # e.g. an added [PAD] token
    prompt = random_prompt()
    out = SpeculativeDecoder(draft, target, gamma=4).generate(prompt, max_new_tokens=20)
    torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 20), rtol=0, atol=0)


def test_different_vocabularies_are_refused():
    target = tiny_model("llama")
    draft = tiny_model("llama", vocab_size=1000)
    with pytest.raises(ValueError, match="shared tokenizer"):
        SpeculativeDecoder(draft, target)


def test_batch_larger_than_one_is_refused():
    target = tiny_model("llama")
    with pytest.raises(ValueError, match=r"\[1, T\]"):
        SpeculativeDecoder(target, target).generate(torch.ones(2, 4, dtype=torch.long))


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_reproduces_the_target_distribution(device):
    """The second generated token's marginal must be the target's, not the draft's.

    Exact marginal: P(x2) = sum_x1 p(x1) p(x2 | x1), from one batched target forward. The draft
    differs enough that its own marginal lies far outside the margin, so a broken rule fails.
    """
    target = tiny_model("llama", layers=2, vocab_size=8)
    draft, target = on_device(device, draft_from_target(target, 0.6), target)
    prompt = torch.tensor([[3, 5, 7]], device=device)  # ids < 8

    exact, draft_marginal = (marginal_second_token(m, prompt).cpu() for m in (target, draft))
    gen = torch.Generator().manual_seed(0)  # a CPU generator drives sampling on any device
    decoder = SpeculativeDecoder(draft, target, gamma=2)
    n = 1500
    counts = torch.zeros(8)
    for _ in range(n):
        out = decoder.generate(prompt, max_new_tokens=2, temperature=1.0, generator=gen)
        counts[int(out.generated_ids[0, 1])] += 1
    tv = 0.5 * (counts / n - exact).abs().sum()
    # sampling noise: E[TV] <= 0.5 * sum_v sqrt(p_v / n) <= 0.5 * sqrt(8 / n) = 0.037 for n = 1500
    assert tv < 0.06, tv
    assert 0.5 * (draft_marginal - exact).abs().sum() > 0.15  # the margin above separates the two


def test_empty_prompt_is_refused_with_what_to_do():
    target = tiny_model("llama", layers=1)
    with pytest.raises(ValueError, match=r"empty prompt \(input_ids of shape \[1, 0\]\)"):
        SpeculativeDecoder(target, target).generate(torch.empty(1, 0, dtype=torch.long), max_new_tokens=3)


@pytest.mark.parametrize("bad", [-1, VOCAB, VOCAB + 7])
def test_out_of_vocabulary_prompt_id_is_refused(bad):
    target = tiny_model("llama", layers=1)
    prompt = random_prompt()
    prompt[0, 2] = bad
    with pytest.raises(
        ValueError, match=rf"prompt token id {bad} is outside the models' vocabulary \[0, {VOCAB}\)"
    ):
        SpeculativeDecoder(target, target).generate(prompt, max_new_tokens=3)
