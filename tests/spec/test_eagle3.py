"""EAGLE-3 heads as the engine's drafter: exact greedy and sampled output, exact alpha, batched rows, the
training-time test against the engine's chain, save and load in the speculators format."""

from __future__ import annotations

import json
from functools import partial

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from osd.distill.losses import forward_kl
from osd.online.head_loss import (
    FeatureQuery,
    chain_steps,
    head_distillation_loss,
    target_features,
    ttt_logits,
)
from osd.paths import TINY_TEACHER_PATH
from osd.spec import SpeculativeDecoder
from osd.spec.eagle3 import Eagle3Head, eagle3_layers, load_head, save_head
from osd.spec.head_cache import HeadSequence
from tests.devices import DEVICES, on_device
from tests.spec.references import hf_greedy, left_padded, marginal_second_token
from tests.tiny_models import distilled_head, tiny_llama, tiny_model


def random_prompts(vocab: int, lengths: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    """One [1, n] prompt per length, ids from 3..vocab-1."""
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (1, n), generator=gen) for n in lengths]


@pytest.fixture(scope="module")
def teacher():
    return AutoModelForCausalLM.from_pretrained(TINY_TEACHER_PATH).eval()


@pytest.fixture(scope="module")
def teacher_head(teacher):
    return distilled_head(teacher, vocab_size=1024, steps=40)


@pytest.fixture(scope="module")
def gqa_pair():
    target = tiny_model("mistral", layers=4)  # grouped-query attention: 4 heads, 2 key-value heads
    return distilled_head(target, vocab_size=48, steps=30), target


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("which", ["teacher", "gqa"])
def test_greedy_output_equals_the_targets_and_batched_rows_the_single_rows(which, device, request):
    """Prompts of different lengths, alone and in one batch: the target's greedy decoding, and each row's acceptance
    record is that of the row alone."""
    head, target = (
        (request.getfixturevalue("teacher_head"), request.getfixturevalue("teacher"))
        if which == "teacher"
        else request.getfixturevalue("gqa_pair")
    )
    head, target = on_device(device, head, target)
    prompts = [p.to(device) for p in random_prompts(target.config.vocab_size, (3, 9, 6))]
    decoder = SpeculativeDecoder(head, target, gamma=4)
    ids, mask = (t.to(device) for t in left_padded(prompts))
    outs = decoder.generate_batch(ids, mask, max_new_tokens=30)
    for prompt, out in zip(prompts, outs, strict=True):
        expected = hf_greedy(target, prompt, 30)
        alone = decoder.generate(prompt, max_new_tokens=30)
        torch.testing.assert_close(alone.generated_ids, expected, rtol=0, atol=0)
        torch.testing.assert_close(out.generated_ids, expected, rtol=0, atol=0)
        assert out.accepted_lengths == alone.accepted_lengths
        assert out.num_proposed == alone.num_proposed and out.alpha_sum == pytest.approx(alone.alpha_sum)
    # both paths ran: accepted and rejected proposals, and rows that accepted different numbers at one step
    assert 0.0 < sum(o.alpha_sum for o in outs) < sum(o.num_proposed for o in outs)
    steps = min(len(o.accepted_lengths) for o in outs)
    assert any(len({o.accepted_lengths[s] for o in outs}) > 1 for s in range(steps))


@pytest.mark.parametrize("batched", [False, True])
def test_the_engine_keeps_the_verified_target_states_of_each_sequence(teacher, teacher_head, batched):
    """With return_target_logits and a head drafting, each sequence's target_features are the target's states at
    every committed position but the last, as one teacher-forced pass computes them (rows of different lengths,
    left-padded in a batch: a row given another's states, or one position off, differs by far more than rounding)."""
    prompts = random_prompts(3072, (3, 9, 6))
    decoder = SpeculativeDecoder(teacher_head, teacher, gamma=3)
    if batched:
        outs = decoder.generate_batch(*left_padded(prompts), max_new_tokens=12, return_target_logits=True)
    else:
        outs = [decoder.generate(p, max_new_tokens=12, return_target_logits=True) for p in prompts]
    for prompt, out in zip(prompts, outs, strict=True):
        tokens = torch.cat([prompt[0], out.generated_ids[0]])
        expected = target_features(teacher, teacher_head.target_layers, tokens)  # [T + N - 1, K H]
        torch.testing.assert_close(out.target_features, expected, rtol=1e-4, atol=1e-4)
    assert decoder.generate(prompts[0], max_new_tokens=12).target_features is None  # kept only when asked


def test_the_lean_target_gives_the_head_what_hf_forward_gives(teacher, teacher_head):
    """A head reading the lean step's states (the default) and HF's (`lean_target=False`): the same proposals,
    acceptance and kept states, alone and in a batch."""
    prompts = random_prompts(3072, (3, 9, 6), seed=1)
    runs = []
    for lean in (True, False):
        decoder = SpeculativeDecoder(teacher_head, teacher, gamma=3, lean_target=lean)
        alone = [decoder.generate(p, max_new_tokens=16, return_target_logits=True) for p in prompts]
        runs.append(
            alone
            + decoder.generate_batch(*left_padded(prompts), max_new_tokens=16, return_target_logits=True)
        )
    for lean, hf in zip(*runs, strict=True):
        assert lean.generated_ids.tolist() == hf.generated_ids.tolist()
        assert lean.accepted_lengths == hf.accepted_lengths
        torch.testing.assert_close(lean.target_features, hf.target_features, rtol=1e-4, atol=1e-4)
    assert any(0 < a < 3 for out in runs[0] for a in out.accepted_lengths)


def test_each_rejected_proposal_is_the_heads_prediction_at_its_chain_step(teacher, teacher_head):
    """Greedy: the token the target rejected at each wrong position p is the argmax of the training-time test's
    step s = `chain_steps` at entry p - 2 - s (the entry `osd.online.head_loss` charges for it), and not the
    committed token."""
    prompt = random_prompts(3072, (6,), seed=4)[0]
    out = SpeculativeDecoder(teacher_head, teacher, gamma=3).generate(prompt, max_new_tokens=30)
    tokens = torch.cat([prompt[0], out.generated_ids[0]])
    steps = chain_steps(out.accepted_lengths, out.wrong_positions)
    assert len(out.rejected_ids) == len(out.wrong_positions) and 0 < max(
        steps
    )  # later chain steps rejected too
    features = target_features(teacher, teacher_head.target_layers, tokens)
    with torch.no_grad():
        ttt = ttt_logits(teacher_head, teacher.get_input_embeddings(), tokens, features, max(steps) + 1)
    for p, s, rejected in zip(out.wrong_positions, steps, out.rejected_ids, strict=True):
        index = prompt.shape[1] + p  # into tokens
        assert teacher_head.token_ids[ttt[s][index - 2 - s].argmax()] == rejected != tokens[index]


def test_the_prefill_proposes_nothing_then_the_head_drafts():
    """Before the target's first pass there is no feature to draft from: step 1 (the prompt's prefill) emits one
    token, step 2 drafts (one token: the budget of 3 leaves room for one proposal and the target's token)."""
    target = tiny_llama(layers=4)
    out = SpeculativeDecoder(Eagle3Head.for_target(target), target, gamma=3).generate(
        random_prompts(64, (5,))[0], max_new_tokens=3
    )
    # (a draft model would have proposed 2 tokens at step 1)
    assert out.accepted_lengths[0] == 0 and out.num_proposed == 1


def test_sampling_keeps_the_target_distribution():
    """Chi-square of the second generated token, which the head drafts (the first comes from the prefill), against
    the target's exact marginal (7 degrees of freedom, critical value 24.32 at p = 0.001); the head's own law
    differs, and it never proposes the ids outside its vocabulary."""
    target = tiny_llama(vocab_size=8, layers=4, initializer_range=0.3)
    head = Eagle3Head.for_target(target, [0, 2, 3, 5], seed=1)
    with torch.no_grad():
        head.lm_head.weight.mul_(20.0)  # a confident head, far from the target
    prompt = torch.tensor([[3, 5, 7]])
    n = 2000
    outs = SpeculativeDecoder(head, target, gamma=2).generate_batch(
        prompt.repeat(n, 1), max_new_tokens=3, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    assert all(o.num_proposed == 1 for o in outs)  # the second token was drafted (one proposal: the budget)
    counts = torch.bincount(torch.tensor([o.generated_ids[0, 1] for o in outs]), minlength=8).float()
    exact = marginal_second_token(target, prompt)
    chi2 = float(((counts - n * exact) ** 2 / (n * exact)).sum())
    assert chi2 < 24.32, chi2
    assert sum(o.alpha_sum for o in outs) / n < 0.8  # the head's proposals were often rejected


def test_alpha_is_sum_of_min_p_q_with_the_heads_distribution_on_the_full_vocabulary(teacher, teacher_head):
    """One proposed position (the third token): alpha = sum_v min(p, q), q the head's softmax on V' and 0 outside,
    computed apart from the engine (the training-time test's step 0 on teacher-forced features)."""
    prompt = random_prompts(3072, (6,), seed=3)[0]
    out = SpeculativeDecoder(teacher_head, teacher, gamma=1).generate(
        prompt, max_new_tokens=3, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    assert out.num_proposed == 1
    # the prompt, the first token (the head read it at its chain's first step) and the second (p's and q's token)
    context = torch.cat([prompt[0], out.generated_ids[0]])[: prompt.shape[1] + 2]
    with torch.no_grad():
        p = torch.softmax(teacher(context[None, :-1]).logits[0, -1], -1)  # predicts the second token
        head_logits = ttt_logits(teacher_head, teacher.get_input_embeddings(), context[:-1],
                                 target_features(teacher, teacher_head.target_layers, context[:-1]), 1)[0]  # fmt: skip
    q = torch.zeros(3072)
    q[teacher_head.token_ids] = torch.softmax(head_logits[-1], -1)
    assert out.alpha_sum == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-5)
    assert 0.0 < out.alpha_sum < 1.0


def test_training_time_test_steps_equal_the_engines_draft_chain(teacher, teacher_head):
    """Entry m - 1 of the training-time test's step s, and the engine's chain after m + 1 committed tokens (the
    target's features, then the head's own states, the committed tokens fed): the same logits."""
    prompt = random_prompts(3072, (6,))[0]
    tokens = torch.cat([prompt[0], hf_greedy(teacher, prompt, 10)[0]])
    embed = teacher.get_input_embeddings()
    features = target_features(teacher, teacher_head.target_layers, tokens)
    m = 8
    with torch.no_grad():
        ttt = ttt_logits(teacher_head, embed, tokens, features, 3)
        chain = HeadSequence(teacher_head, embed)
        chain.add_features(features[None, :m])
        engine = [chain.forward(tokens[None, 1 : m + 1], 1)[0]]
        engine += [chain.forward(tokens[None, m + s : m + s + 1], 1)[0] for s in (1, 2)]
    for step, logits in enumerate(engine):
        torch.testing.assert_close(logits[teacher_head.token_ids], ttt[step][m - 1], rtol=1e-4, atol=1e-4)
        assert torch.isneginf(logits[~teacher_head.t2d]).all()


def test_save_and_load_keep_the_proposals_in_the_speculators_layout(teacher, teacher_head, tmp_path):
    path = save_head(teacher_head, tmp_path / "head", target=teacher)
    config = json.loads((path / "config.json").read_text())
    assert config["speculators_model_type"] == "eagle3"
    assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
    vocab = len(teacher_head.d2t)
    assert config["draft_vocab_size"] == vocab < 3072
    assert config["transformer_layer_config"]["num_hidden_layers"] == 1
    weights = load_file(path / "model.safetensors")
    # the names vLLM's Eagle3LlamaForCausalLM.load_weights maps; no embedding (vLLM shares the target's)
    assert {"fc.weight", "layers.0.self_attn.q_proj.weight", "layers.0.hidden_norm.weight", "norm.weight",
            "lm_head.weight", "d2t", "t2d"} <= set(weights)  # fmt: skip
    assert not any("embed" in name for name in weights)
    assert weights["layers.0.self_attn.q_proj.weight"].shape[1] == 2 * teacher.config.hidden_size
    # vLLM's draft id i is target id i + d2t[i]
    torch.testing.assert_close(torch.arange(vocab) + weights["d2t"], teacher_head.token_ids)
    loaded = load_head(path)
    prompt = random_prompts(3072, (7,), seed=5)[0]
    runs = [
        SpeculativeDecoder(head, teacher, gamma=3).generate(
            prompt, max_new_tokens=20, temperature=1.0, generator=torch.Generator().manual_seed(0)
        )
        for head in (teacher_head, loaded)
    ]
    torch.testing.assert_close(runs[1].generated_ids, runs[0].generated_ids, rtol=0, atol=0)
    assert runs[1].accepted_lengths == runs[0].accepted_lengths
    # the second run's target takes the prompt from the first's cache, computed in another forward: the last bit
    assert runs[1].alpha_sum == pytest.approx(runs[0].alpha_sum, rel=1e-6)


def test_a_full_vocabulary_head_is_saved_without_a_mapping(tmp_path):
    target = tiny_llama(layers=4)
    head = Eagle3Head.for_target(target)
    weights = load_file(save_head(head, tmp_path / "head") / "model.safetensors")
    assert "d2t" not in weights and "t2d" not in weights
    torch.testing.assert_close(load_head(tmp_path / "head").token_ids, torch.arange(64))


def test_per_query_backward_gives_the_gradient_of_the_total(teacher, teacher_head):
    head = Eagle3Head.for_target(teacher, teacher_head.token_ids)
    tokens = torch.cat([random_prompts(3072, (5,))[0][0], torch.tensor([7, 9, 11, 13])])
    with torch.no_grad():
        logits = teacher(tokens[None, :-1]).logits[0]
    positions = torch.tensor([2, 5, 8])
    features = target_features(teacher, head.target_layers, tokens)
    query = FeatureQuery(tokens, features, positions, logits[positions - 1])
    loss = partial(head_distillation_loss, embed=teacher.get_input_embeddings(), divergence=forward_kl)
    total = loss(head, [query, query])
    total.backward()
    whole = [p.grad.clone() for p in head.parameters()]
    head.zero_grad()
    assert float(loss(head, [query, query], torch.Tensor.backward)) == pytest.approx(float(total.detach()))
    for grad, p in zip(whole, head.parameters(), strict=True):
        torch.testing.assert_close(p.grad, grad)
    nothing = FeatureQuery(tokens, features, torch.tensor([], dtype=torch.long), logits[:0])
    assert loss(head, [nothing]) is None


def test_layers_are_eagle3s_low_middle_and_high():
    assert eagle3_layers(32) == (2, 16, 29)
    assert eagle3_layers(4) == (1, 2, 3)  # too shallow for (2, 2, 1)
    with pytest.raises(ValueError, match="at least 4"):
        eagle3_layers(3)


def test_a_head_refuses_another_target_and_auto_gamma():
    head = Eagle3Head.for_target(tiny_llama(layers=4))
    with pytest.raises(ValueError, match="layers"):
        SpeculativeDecoder(head, tiny_llama(layers=3), gamma=2)
    with pytest.raises(ValueError, match="hidden size"):
        SpeculativeDecoder(head, tiny_llama(layers=4, hidden=64), gamma=2)
    with pytest.raises(ValueError, match="auto"):
        SpeculativeDecoder(head, tiny_llama(layers=4), gamma="auto")
