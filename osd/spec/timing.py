"""Wall-clock cost of model forwards on this machine (for c, verify costs and the adaptive gamma).

Times are the median over repetitions, taking the best of several rounds, because on a shared
machine other processes only ever add time.
"""

from __future__ import annotations

import statistics
import time

import torch
from transformers import PreTrainedModel


def synchronize(device: torch.device) -> None:
    """Wait for queued CUDA work, so that wall-clock timings are honest (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def step_time(
    model: PreTrainedModel,
    context: int = 64,
    length: int = 1,
    reps: int = 30,
    rounds: int = 5,
    batch: int = 1,
    padded: bool = False,
) -> float:
    """Seconds for one cached forward of `length` new tokens after `context` tokens, for `batch` rows
    (length 1: a decode step; length gamma + 1: a verification pass).

    padded: pass an attention mask that hides the first slot of every other row, as in a batch of
    left-padded prompts of unequal lengths (the batched engine's case). It changes the attention
    kernel: here a one-token step of the 135M demo target at B = 16 took 41 ms with such a mask and
    67 ms without one (or with an all-ones mask, which transformers drops)."""
    device = model.device
    if model.config.is_encoder_decoder:
        raise ValueError("step_time measures decoder-only models")
    ids = torch.randint(4, model.config.vocab_size, (batch, context + length), device=device)  # [B, T + L]
    cache = model(ids[:, :context], use_cache=True).past_key_values
    new = ids[:, context:]  # [B, L]
    kwargs = {}
    if padded:
        mask = torch.ones_like(ids)  # [B, T + L]
        mask[::2, 0] = 0
        kwargs = {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1)[:, context:]}
    # untimed: the first call of a new shape pays one-off setup
    model(new, past_key_values=cache, use_cache=True, **kwargs)
    cache.crop(-length)
    best = float("inf")
    for _ in range(rounds):
        times = []
        for _ in range(reps):
            synchronize(device)
            start = time.perf_counter()
            model(new, past_key_values=cache, use_cache=True, **kwargs)
            synchronize(device)
            times.append(time.perf_counter() - start)
            cache.crop(-length)  # transformers 5: drop the tokens just appended, keep the context fixed
        best = min(best, statistics.median(times))
    return best
