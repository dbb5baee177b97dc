"""The baselines a speculative engine is timed against, timed the way `osd.spec.timing` times forwards: Hugging
Face `generate`, greedy, target-only or assisted (HF assisted generation with a draft), and the target alone
through the engine's own cache (`timed_target_alone`)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from osd.spec.evaluate import target_only_greedy
from osd.spec.timing import synchronize


@torch.inference_mode()
def timed_generate(
    model: PreTrainedModel,
    prompts: Sequence[torch.Tensor],
    max_new_tokens: int,
    eos: int | None,
    pad: int | None,
    assistants: Sequence[PreTrainedModel] | None = None,
) -> tuple[int, float]:
    """(generated tokens, seconds) of HF greedy generate over the prompts (each [1, T]), assisted by
    assistants[i] if given; without an `eos`, every prompt generates exactly max_new_tokens."""
    tokens, seconds = 0, 0.0
    for i, ids in enumerate(prompts):
        kwargs = {} if assistants is None else {"assistant_model": assistants[i]}
        synchronize(model.device)
        t = time.perf_counter()
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=pad,
            # without an EOS, force the full length (generation_config's own EOS would still stop it)
            min_new_tokens=max_new_tokens if eos is None else 0,
            **kwargs,
        )
        synchronize(model.device)
        seconds += time.perf_counter() - t
        tokens += out.shape[1] - ids.shape[1]
    return tokens, seconds


def timed_target_alone(
    model: PreTrainedModel, prompts: Sequence[torch.Tensor], max_new_tokens: int, eos: int | None
) -> tuple[int, float]:
    """(generated tokens, seconds) of greedy decoding with the target alone over the prompts (each [1, T]), through
    the cache the engine verifies with (`osd.spec.evaluate.target_only_greedy`)."""
    tokens, seconds = 0, 0.0
    for ids in prompts:
        synchronize(model.device)
        t = time.perf_counter()
        tokens += len(target_only_greedy(model, ids, max_new_tokens, eos))
        synchronize(model.device)
        seconds += time.perf_counter() - t
    return tokens, seconds
