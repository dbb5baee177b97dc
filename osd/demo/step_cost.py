"""c = draft step time / target step time, measured on this machine.

A step is one cached forward of one new token after a context of `context` tokens (what the
draft does gamma times per speculative step, and what target-only decoding does per token).
Times are the median over repetitions, taking the best of several rounds, because on a shared
machine other processes only ever add time.

Usage:
    python -m osd.demo.step_cost                          # the demo pair
    python -m osd.demo.step_cost --draft PATH --target PATH --context 80
"""

from __future__ import annotations

import argparse
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
    model: PreTrainedModel, context: int = 64, length: int = 1, reps: int = 30, rounds: int = 5
) -> float:
    """Seconds for one cached forward of `length` new tokens after `context` tokens
    (length 1: a decode step; length gamma + 1: a verification pass)."""
    device = model.device
    ids = torch.randint(4, model.config.vocab_size, (1, context + length), device=device)  # [1, T + L]
    cache = model(ids[:, :context], use_cache=True).past_key_values
    new = ids[:, context:]  # [1, L]
    best = float("inf")
    for _ in range(rounds):
        times = []
        for _ in range(reps):
            synchronize(device)
            start = time.perf_counter()
            model(new, past_key_values=cache, use_cache=True)
            synchronize(device)
            times.append(time.perf_counter() - start)
            cache.crop(-length)  # transformers 5: drop the tokens just appended, keep the context fixed
        best = min(best, statistics.median(times))
    return best


def cost_ratio(
    draft: PreTrainedModel, target: PreTrainedModel, context: int = 64
) -> tuple[float, float, float]:
    """(c, draft step seconds, target step seconds)."""
    t_draft, t_target = step_time(draft, context), step_time(target, context)
    return t_draft / t_target, t_draft, t_target


def main() -> None:
    from osd.demo import DRAFT_PATH, TARGET_PATH, load_demo_pair

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--draft", default=str(DRAFT_PATH))
    parser.add_argument("--target", default=str(TARGET_PATH))
    parser.add_argument("--dtype", default="bfloat16", help="the target's dtype")
    parser.add_argument("--draft_dtype", default="bfloat16", help="the draft's dtype")
    parser.add_argument("--context", type=int, default=64, help="tokens already in the KV cache")
    parser.add_argument("--num_threads", type=int, default=1, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    draft, target, _ = load_demo_pair(
        args.draft, args.target, getattr(torch, args.dtype), getattr(torch, args.draft_dtype)
    )
    c, t_d, t_t = cost_ratio(draft, target, args.context)
    print(
        f"draft step {t_d * 1e3:.2f} ms, target step {t_t * 1e3:.2f} ms, c = {c:.3f} (torch threads: {torch.get_num_threads()})"
    )


if __name__ == "__main__":
    main()
