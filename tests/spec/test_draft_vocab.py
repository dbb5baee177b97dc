"""Sub-vocabulary draft heads: exactness of SD, alpha with q = 0 outside V', save/load, losses."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from osd.distill.losses import forward_kl, reverse_kl
from osd.spec import SpeculativeDecoder
from osd.spec.draft_vocab import (
    SubVocabHead,
    apply_draft_vocab,
    compact_logits,
    draft_vocab_ids,
    outside_mass,
    restrict_divergence,
    select_token_ids,
    set_draft_vocab,
)
from tests.devices import DEVICES, on_device
from tests.spec.references import hf_greedy, left_padded, marginal_second_token, random_prompt
from tests.tiny_models import VOCAB, draft_from_target, tiny_model

HALF = list(range(0, VOCAB, 2))  # every other id: the head covers half the vocabulary


@pytest.mark.parametrize("family", ["llama", "gpt2", "t5"])  # tied, tied (GPT-2 style), untied head
@pytest.mark.parametrize("device", DEVICES)
def test_greedy_output_still_equals_the_target(family, device):
    target = tiny_model(family, layers=3)
    draft, target = on_device(device, set_draft_vocab(draft_from_target(target, 0.1), HALF), target)
    decoder = SpeculativeDecoder(draft, target, gamma=4)
    prompts = [random_prompt(seed=s).to(device) for s in range(2)]
    for prompt in prompts:
        out = decoder.generate(prompt, max_new_tokens=30)
        torch.testing.assert_close(out.generated_ids, hf_greedy(target, prompt, 30), rtol=0, atol=0)
        assert 0.0 < out.alpha < 1.0, out.alpha  # both paths ran
    ids, mask = (t.to(device) for t in left_padded([prompts[0], prompts[1][:, :4]]))
    for row, out in zip(
        [prompts[0], prompts[1][:, :4]], decoder.generate_batch(ids, mask, max_new_tokens=20), strict=True
    ):
        torch.testing.assert_close(out.generated_ids, hf_greedy(target, row, 20), rtol=0, atol=0)


def test_draft_proposes_only_its_tokens_and_logits_match_the_full_head_inside():
    draft = tiny_model("llama", layers=2)
    prompt = random_prompt(length=9)
    with torch.no_grad():
        full = draft(prompt).logits  # [1, T, V]
        set_draft_vocab(draft, HALF)
        sub = draft(prompt).logits
        with compact_logits(draft):
            compact = draft(prompt).logits  # [1, T, V']
    inside = torch.tensor(HALF)
    torch.testing.assert_close(sub[..., inside], full[..., inside])
    torch.testing.assert_close(compact, full[..., inside])
    outside = torch.tensor([i for i in range(VOCAB) if i not in HALF])
    assert torch.isneginf(sub[..., outside]).all()


def test_served_rows_follow_weight_updates():
    """The head caches weight[V'] for serving; an optimizer step (in place) must invalidate it."""
    draft = set_draft_vocab(tiny_model("llama", layers=1), HALF)
    prompt = random_prompt()
    with torch.inference_mode():
        before = draft(prompt).logits
    with torch.no_grad():
        draft.get_output_embeddings().weight.mul_(2.0)
    with torch.inference_mode():
        after = draft(prompt).logits
    inside = torch.tensor(HALF)
    assert not torch.allclose(before[..., inside], after[..., inside])


def test_alpha_counts_q_zero_outside_the_token_set():
    """One proposed position (gamma 1, 2 tokens): alpha = sum_v min(p, q) with q renormalised on V'
    and 0 outside, whatever was sampled."""
    target = tiny_model("llama", layers=2)
    draft = set_draft_vocab(draft_from_target(target, 0.3), HALF)
    prompt = random_prompt()
    with torch.no_grad():
        p = torch.softmax(target(prompt).logits[0, -1].float(), -1)  # [V]
        full_head = draft_from_target(target, 0.3)(prompt).logits[0, -1].float()  # the same draft, full head
        q_inside = torch.softmax(full_head[HALF], -1)
    q = torch.zeros(VOCAB)
    q[HALF] = q_inside
    expected = torch.minimum(p, q).sum()
    out = SpeculativeDecoder(draft, target, gamma=1).generate(
        prompt, max_new_tokens=2, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    assert out.num_proposed == 1
    assert out.alpha_sum == pytest.approx(float(expected), abs=1e-5)


def test_sampling_keeps_the_target_distribution_with_half_the_vocabulary():
    """Chi-square of the second generated token against the target's exact marginal (7 degrees of
    freedom, critical value 24.32 at p = 0.001); the draft alone would fail it."""
    target = tiny_model("llama", layers=2, vocab_size=8)
    draft = set_draft_vocab(draft_from_target(target, 0.6), [0, 2, 3, 5])
    prompt = torch.tensor([[3, 5, 7]])
    n = 2000
    outs = SpeculativeDecoder(draft, target, gamma=2).generate_batch(
        prompt.repeat(n, 1), max_new_tokens=2, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    counts = torch.bincount(torch.tensor([o.generated_ids[0, 1] for o in outs]), minlength=8).float()
    exact = marginal_second_token(target, prompt)
    chi2 = float(((counts - n * exact) ** 2 / (n * exact)).sum())
    assert chi2 < 24.32, chi2
    with torch.no_grad():
        drafted = torch.softmax(draft(prompt).logits[0, -1].float(), -1)
    assert float(drafted[[1, 4, 6, 7]].sum()) == 0.0  # the draft never proposes those tokens
    assert float(((n * drafted - n * exact) ** 2 / (n * exact)).sum()) > 100  # and its own law differs


def test_save_and_load_keep_the_token_set_and_tied_weights(tmp_path):
    draft = set_draft_vocab(tiny_model("llama", layers=1, tie_word_embeddings=True), HALF)
    assert draft.get_output_embeddings().weight is draft.get_input_embeddings().weight
    prompt = random_prompt()
    with torch.no_grad():
        before = draft(prompt).logits
    draft.save_pretrained(tmp_path)
    plain = AutoModelForCausalLM.from_pretrained(tmp_path).eval()  # any tool: a full-vocabulary model
    assert plain.config.draft_vocab == HALF
    assert not isinstance(plain.get_output_embeddings(), SubVocabHead)
    loaded = apply_draft_vocab(plain)
    assert isinstance(loaded.get_output_embeddings(), SubVocabHead)
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight
    assert draft_vocab_ids(loaded).tolist() == HALF
    with torch.no_grad():
        torch.testing.assert_close(loaded(prompt).logits, before)
    set_draft_vocab(loaded, None)
    assert loaded.config.draft_vocab is None and draft_vocab_ids(loaded) is None


def test_the_engine_installs_a_saved_head(tmp_path):
    target = tiny_model("llama", layers=2)
    set_draft_vocab(draft_from_target(target, 0.1), HALF).save_pretrained(tmp_path)
    draft = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    SpeculativeDecoder(draft, target)
    assert isinstance(draft.get_output_embeddings(), SubVocabHead)


def test_losses_compare_distributions_renormalised_on_the_token_set():
    gen = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(2, 5, VOCAB, generator=gen), torch.randn(2, 5, VOCAB, generator=gen)
    ids = torch.tensor(HALF)
    p = torch.softmax(teacher[..., ids], -1)  # renormalised on V'
    q = torch.softmax(student[..., ids], -1)
    closed_form = (p * (p.log() - q.log())).sum(-1).mean()
    loss = restrict_divergence(forward_kl, ids)
    torch.testing.assert_close(loss(student, teacher), closed_form)
    torch.testing.assert_close(loss(student[..., ids], teacher), closed_form)  # compact student logits
    torch.testing.assert_close(loss(student, teacher[..., ids]), closed_form)  # and compact teacher logits
    reverse = (q * (q.log() - p.log())).sum(-1).mean()
    torch.testing.assert_close(restrict_divergence(reverse_kl, ids)(student, teacher), reverse)
    assert restrict_divergence(forward_kl, None) is forward_kl
    mass = torch.softmax(teacher, -1)[..., [i for i in range(VOCAB) if i not in HALF]].sum(-1)
    torch.testing.assert_close(outside_mass(teacher, ids), mass)


def test_token_set_is_the_most_frequent_plus_special_tokens():
    counts = {5: 10, 7: 10, 9: 3, 11: 50, 13: 1}
    assert select_token_ids(counts, 3) == [5, 7, 11]  # ties broken by the lower id
    assert select_token_ids(counts, 3, always=[2]) == [2, 5, 11]
    assert select_token_ids(counts, 10, always=[2]) == [2, 5, 7, 9, 11, 13]
    with pytest.raises(ValueError, match="--draft_vocab_size"):
        select_token_ids(counts, 0)


def test_bad_token_ids_are_refused():
    model = tiny_model("llama", layers=1)
    with pytest.raises(ValueError, match=rf"within \[0, {VOCAB}\)"):
        set_draft_vocab(model, [0, VOCAB])
    with pytest.raises(ValueError, match="non-empty"):
        set_draft_vocab(model, [])
    assert draft_vocab_ids(model) is None  # left as it was


def test_hf_assisted_generation_with_a_sub_vocabulary_draft_is_the_targets_greedy_output():
    target = tiny_model("llama", layers=3)
    draft = set_draft_vocab(draft_from_target(target, 0.1), HALF)
    prompt = random_prompt()
    assisted = target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=draft,
                               max_new_tokens=20, do_sample=False, pad_token_id=0, eos_token_id=None)  # fmt: skip
    torch.testing.assert_close(assisted[:, prompt.shape[1] :], hf_greedy(target, prompt, 20), rtol=0, atol=0)
