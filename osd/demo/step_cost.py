"""c = draft step time / target step time, measured on this machine.

A step is one cached forward of one new token after a context of `context` tokens (what the
draft does gamma times per speculative step, and what target-only decoding does per token), each
model's as the engine takes it (`osd.spec.timing`).

Usage:
    python -m osd.demo.step_cost                          # the demo pair
    python -m osd.demo.step_cost --draft PATH --target PATH --context 80
"""

from __future__ import annotations

import argparse

import torch
from transformers import PreTrainedModel

from osd.spec.draft_vocab import apply_draft_vocab
from osd.spec.timing import chain_step_time, draft_step_time, target_pass_time
from osd.spec.weight_major import use_weight_major_linears
from osd.user_errors import run_main


def cost_ratio(
    draft: PreTrainedModel,
    target: PreTrainedModel,
    context: int = 64,
    gamma: int | None = None,
    **timing: int,
) -> tuple[float, float, float]:
    """(c, draft step seconds, target step seconds); the draft as the engine serves it (its sub-vocabulary head
    when its config names one, `osd.spec.draft_vocab`; the lean Llama step where it applies). gamma: the draft's
    step within chains of gamma proposals between target passes, as the engine takes them
    (`osd.spec.timing.chain_step_time`); None: in a loop of draft steps alone (`draft_step_time`). timing:
    `target_pass_time`'s reps and rounds."""
    draft = apply_draft_vocab(draft)
    t_draft = (
        draft_step_time(draft, context, **timing)
        if gamma is None
        else chain_step_time(draft, target, context, gamma, **timing)
    )
    t_target = target_pass_time(target, context, **timing)
    return t_draft / t_target, t_draft, t_target


def main() -> None:
    from osd.models import load_demo_pair
    from osd.paths import DRAFT_PATH, TARGET_PATH

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
    use_weight_major_linears(target)  # a float32 target's faster layout, as the demos serve it (opt-in)
    c, t_d, t_t = cost_ratio(draft, target, args.context)
    print(
        f"draft step {t_d * 1e3:.2f} ms, target step {t_t * 1e3:.2f} ms, c = {c:.3f} (torch threads: {torch.get_num_threads()})"
    )


if __name__ == "__main__":
    raise SystemExit(run_main(main, "osd.demo.step_cost"))
