"""Inputs and independent references the engine tests share: random prompts, HF's own greedy
decoding, exact second-token marginals, bf16 resolution, a layout's check against untouched models."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from osd.distill.data import pad
from osd.spec.decoder import SpeculativeDecoder
from tests.tiny_models import VOCAB, draft_from_target, tiny_model

# noise levels that make each family's draft agree with its target sometimes, not always
NOISE = {"llama": 0.1, "mistral": 0.1, "gpt2": 0.3, "opt": 0.3, "gpt_bigcode": 0.3, "t5": 0.05}


def random_prompt(length: int = 6, seed: int = 0) -> torch.Tensor:
    """[1, length] ids drawn from 3..VOCAB-1 (no special ids)."""
    return torch.randint(3, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def hf_greedy(
    model, prompt: torch.Tensor, max_new_tokens: int, eos_token_id: int | None = None
) -> torch.Tensor:
    """The target's own greedy decoding: new tokens only, [1, N]."""
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=max_new_tokens,
        do_sample=False,
        eos_token_id=eos_token_id,
        pad_token_id=0,
    )
    return out[:, 1:] if model.config.is_encoder_decoder else out[:, prompt.shape[1] :]


def left_padded(prompts: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [1, T_i] as input_ids [B, max T] and attention_mask, padding on the left."""
    return pad([p[0].tolist() for p in prompts], 0, "left")


def random_prompts(lengths: tuple[int, ...]) -> list[torch.Tensor]:
    """One [1, n] prompt per length, ids from 3..VOCAB-1, from one seeded generator."""
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(3, VOCAB, (1, n), generator=gen) for n in lengths]


def marginal_second_token(model, prompt: torch.Tensor) -> torch.Tensor:
    """Exact P(x2) = sum_x1 p(x1) p(x2 | x1) for a vocabulary of 8, from two forwards: [V]."""
    firsts = torch.arange(8, device=prompt.device)[:, None]  # [V, 1]
    with torch.no_grad():
        if model.config.is_encoder_decoder:  # the prompt is the encoder input
            start = torch.zeros(1, 1, dtype=torch.long, device=prompt.device)  # decoder_start_token_id 0
            p1 = torch.softmax(model(input_ids=prompt, decoder_input_ids=start).logits[0, -1], -1)
            decoder = torch.cat([start.repeat(8, 1), firsts], 1)
            p2 = torch.softmax(
                model(input_ids=prompt.repeat(8, 1), decoder_input_ids=decoder).logits[:, -1], -1
            )
        else:
            p1 = torch.softmax(model(prompt).logits[0, -1], -1)
            p2 = torch.softmax(model(torch.cat([prompt.repeat(8, 1), firsts], 1)).logits[:, -1], -1)  # [V, V]
    return p1 @ p2


BF16_EPS = 2.0**-7  # relative spacing of bf16 numbers


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first index where `a` and `b` differ (None if one is a prefix of the other)."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)


def assert_diverges_only_at_bf16_tie(out, reference: list[int], context: tuple) -> bool:
    """`out` (a SpecOutput kept with its target logits) decodes `reference`, or parts from it only where the target's
    logits tie at bf16 resolution; whether it decoded `reference` whole."""
    ours = out.generated_ids[0].tolist()
    i = first_divergence(ours, reference)
    if i is None:
        assert len(ours) == len(reference), context
        return True
    logits = out.target_logits[i].float()
    gap = (logits[ours[i]] - logits[reference[i]]).abs()
    assert gap <= 2 * BF16_EPS * logits.abs().max(), (*context, i, float(gap))
    return False


def retyped_copy(linear: torch.nn.Linear, cls: type[torch.nn.Linear]) -> torch.nn.Linear:
    """A copy of `linear` whose class is `cls` (a layout's subclass of nn.Linear); `linear` is left as it is."""
    other = copy.deepcopy(linear)
    other.__class__ = cls
    return other


def assert_same_linear_gradients(linear: torch.nn.Linear, other: torch.nn.Linear, **tolerance) -> None:
    """`other` (a subclass of nn.Linear over a copy of `linear`'s weights) back-propagates as `linear` does."""
    x = torch.randn(3, linear.in_features, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    (linear(x) ** 2).sum().backward()
    (other(x2) ** 2).sum().backward()
    torch.testing.assert_close(x2.grad, x.grad, **tolerance)
    torch.testing.assert_close(other.weight.grad, linear.weight.grad, **tolerance)
    torch.testing.assert_close(other.bias.grad, linear.bias.grad, **tolerance)


def assert_layout_keeps_greedy_output(
    family: str, retype: Callable[[torch.nn.Module], int], hf_within_bf16_tie: bool
) -> torch.nn.Module:
    """A bf16 tiny target and draft of `family`, their linear layers retyped in place by `retype` (a layout's
    `use_*_linears`): the engine's greedy output on three prompts equals its output with untouched copies, token for
    token (a layout adds in another order than torch's GEMM, which can break a near-tie on tiny random models; none
    does on these prompts), with both the accept and the reject path run. For llama, the demo's family, it is HF
    `generate`'s too: of the retyped target up to a bf16 tie where `hf_within_bf16_tie`, else of the untouched one
    exactly. Skips a family without plain nn.Linear layers; returns the retyped target."""
    target = tiny_model(family, layers=3).to(torch.bfloat16)
    draft = draft_from_target(target, NOISE[family]).to(torch.bfloat16)
    plain = SpeculativeDecoder(copy.deepcopy(draft), copy.deepcopy(target), gamma=3)
    if not (retype(target) and retype(draft)):
        pytest.skip(f"{family} has no plain nn.Linear")
    decoder = SpeculativeDecoder(draft, target, gamma=3)
    alphas = []
    for seed in range(3):
        prompt = random_prompt(seed=seed)
        out = decoder.generate(prompt, max_new_tokens=40, return_target_logits=True)
        torch.testing.assert_close(
            out.generated_ids, plain.generate(prompt, max_new_tokens=40).generated_ids, rtol=0, atol=0
        )
        if family == "llama" and hf_within_bf16_tie:
            assert_diverges_only_at_bf16_tie(out, hf_greedy(target, prompt, 40)[0].tolist(), (seed,))
        elif family == "llama":
            torch.testing.assert_close(out.generated_ids, hf_greedy(plain.target, prompt, 40), rtol=0, atol=0)
        alphas.append(out.alpha)
    assert max(alphas) > 0.0 and min(alphas) < 1.0, alphas
    return target


def _sdpa_as_the_lean_step(module, query, key, value, attention_mask, **kwargs):
    """HF's SDPA attention, on a CPU in float32 over bf16 or float16 inputs widened exactly, the output rounded
    back to their dtype."""
    reduced = query.device.type == "cpu" and query.dtype in (torch.bfloat16, torch.float16)
    if not reduced:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    out, weights = sdpa_attention_forward(
        module, query.float(), key.float(), value.float(), attention_mask, **kwargs
    )
    return out.to(query.dtype), weights


AttentionInterface.register("sdpa_as_the_lean_step", _sdpa_as_the_lean_step)
AttentionMaskInterface.register("sdpa_as_the_lean_step", sdpa_mask)


def hf_attention_as_the_lean_step(model: PreTrainedModel) -> PreTrainedModel:
    """`model` (in place) with HF's forward attending as the lean step does (`LeanLlama.attention_dtype`): in float32
    on a CPU for a reduced-precision model, else by SDPA in its dtype; HF's masks, RoPE and cache unchanged."""
    model.set_attn_implementation("sdpa_as_the_lean_step")
    return model
