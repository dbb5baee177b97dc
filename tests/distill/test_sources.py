"""Sample sources: generation matches HF generate; mixes pick from the right model."""

from __future__ import annotations

import pytest
import torch

from osd.distill.data import pad
from osd.distill.sources import SamplingConfig, generate_mixed, pick_tokens, sample_responses

PROMPTS = [[1, 9, 17, 30], [1, 5], [1, 22, 23, 24, 25, 26, 7]]  # different lengths: left padding matters
EOS = 2
CONFIG = SamplingConfig(max_new_tokens=10, temperature=0.0, eos_token_id=EOS, pad_token_id=0)


def _batch():
    return pad(PROMPTS, 0, "left")


def _cut_at_eos(row: list[int]) -> list[int]:
    return row[: row.index(EOS) + 1] if EOS in row else row


def hf_greedy(model, prompt: list[int]) -> list[int]:
    """HF generate on one unpadded prompt: an independent reference for our batched loop."""
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, max_new_tokens=CONFIG.max_new_tokens, do_sample=False, eos_token_id=EOS, pad_token_id=0
    )
    new = out[0, 1:] if model.config.is_encoder_decoder else out[0, ids.shape[1] :]
    return _cut_at_eos(new.tolist())


@pytest.mark.parametrize("pair", ["llama_pair", "t5_pair"])
def test_pure_sources_equal_hf_generate(pair, request):
    student, teacher = request.getfixturevalue(pair)
    ids, mask = _batch()
    got_student = sample_responses("student", student, teacher, ids, mask, CONFIG)
    got_teacher = sample_responses("teacher", student, teacher, ids, mask, CONFIG)  # no data-set answers
    assert got_student == [hf_greedy(student, p) for p in PROMPTS]
    assert got_teacher == [hf_greedy(teacher, p) for p in PROMPTS]
    assert got_student != got_teacher  # the two models really differ, so the test can tell them apart


def test_teacher_source_uses_dataset_answers(llama_pair):
    student, teacher = llama_pair
    ids, mask = _batch()
    answers = [[40, 2], [41, 42, 2], [43, 2]]
    assert (
        sample_responses("teacher", student, teacher, ids, mask, CONFIG, dataset_responses=answers) == answers
    )


def _argmax_next(model, prompt: list[int], prefix: list[int]) -> int:
    """Next greedy token after prompt + prefix, by a full forward pass without cache."""
    if model.config.is_encoder_decoder:
        dec = torch.tensor([[model.config.decoder_start_token_id] + prefix])
        logits = model(input_ids=torch.tensor([prompt]), decoder_input_ids=dec).logits
    else:
        logits = model(input_ids=torch.tensor([prompt + prefix])).logits
    return int(logits[0, -1].argmax())


@pytest.mark.parametrize("pair", ["llama_pair", "t5_pair"])
def test_mix_token_takes_each_token_from_student_or_teacher(pair, request):
    student, teacher = request.getfixturevalue(pair)
    ids, mask = _batch()
    responses = sample_responses(
        "mix_token",
        student,
        teacher,
        ids,
        mask,
        CONFIG,
        mix_ratio=0.5,
        generator=torch.Generator().manual_seed(0),
    )
    chosen = {"student": 0, "teacher": 0}
    for prompt, response in zip(PROMPTS, responses, strict=True):
        for i, token in enumerate(response):
            s, t = _argmax_next(student, prompt, response[:i]), _argmax_next(teacher, prompt, response[:i])
            assert token in (s, t), (prompt, i, token, s, t)
            if s != t:
                chosen["student" if token == s else "teacher"] += 1
    assert chosen["student"] > 0 and chosen["teacher"] > 0, chosen


def test_mix_token_ratio_extremes_are_the_pure_sources(llama_pair):
    student, teacher = llama_pair
    ids, mask = _batch()
    assert generate_mixed(student, teacher, ids, mask, 1.0, CONFIG) == [
        hf_greedy(student, p) for p in PROMPTS
    ]
    assert generate_mixed(student, teacher, ids, mask, 0.0, CONFIG) == [
        hf_greedy(teacher, p) for p in PROMPTS
    ]


def test_mix_request_takes_whole_requests_with_the_ratio(llama_pair):
    student, teacher = llama_pair
    prompts = [PROMPTS[i % 3] for i in range(60)]
    ids, mask = pad(prompts, 0, "left")
    answers = [[50 + i % 3, EOS] for i in range(60)]  # tokens the student never generates here
    config = SamplingConfig(max_new_tokens=4, eos_token_id=EOS, pad_token_id=0)
    student_out = [hf_greedy(student, p)[:4] for p in PROMPTS]
    gen = torch.Generator().manual_seed(0)
    responses = sample_responses(
        "mix_request",
        student,
        teacher,
        ids,
        mask,
        config,
        mix_ratio=0.3,
        dataset_responses=answers,
        generator=gen,
    )
    from_student = [r == student_out[i % 3] for i, r in enumerate(responses)]
    assert all(s or r == answers[i] for i, (s, r) in enumerate(zip(from_student, responses, strict=True)))
    # 60 Bernoulli(0.3) draws: mean 18, sd 3.5; [8, 28] is a +-2.8 sd margin
    assert 8 <= sum(from_student) <= 28, sum(from_student)


def test_pick_tokens_greedy_and_sampled():
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0]])
    assert pick_tokens(logits, 0.0, None).tolist() == [1]
    n = 20000
    samples = pick_tokens(logits.expand(n, -1), 2.0, torch.Generator().manual_seed(0))
    freq = torch.bincount(samples, minlength=4).double() / n
    expected = torch.softmax(logits[0].double() / 2.0, -1)
    # binomial sd <= sqrt(0.25 / 20000) = 0.0035; 0.015 is > 4 sd
    torch.testing.assert_close(freq, expected, atol=0.015, rtol=0)


def test_unknown_source_is_rejected(llama_pair):
    ids, mask = _batch()
    with pytest.raises(ValueError, match="--sample_source"):
        sample_responses("teacher_mix", *llama_pair, ids, mask, CONFIG)
