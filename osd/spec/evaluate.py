"""Acceptance of a draft against a target over a set of prompts (used by evaluation and demos)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel

from osd.alpha import pooled_alpha
from osd.spec.decoder import SpeculativeDecoder
from osd.spec.gamma import DEFAULT, Gamma
from osd.spec.lean_llama import target_cache
from osd.spec.records import SpecOutput
from osd.spec.sampling import greedy


@dataclass
class AcceptanceStats:
    """Speculative decoding over many prompts, aggregated token-weighted. A rate with nothing to count (no
    proposal, no step) is None."""

    alpha: float | None  # sum of alpha over all counted proposed positions / their number (`pooled_alpha`)
    mean_accepted_length: float | None  # accepted draft tokens per verification step
    tokens_per_step: float | None  # generated tokens per verification step (accepted + the target's own)
    num_generated: int
    num_steps: int
    wall_time_s: float
    draft_time_s: float
    target_time_s: float
    accept_time_s: float
    cache_time_s: float
    per_prompt_alpha: list[float | None]

    @property
    def tokens_per_s(self) -> float:
        return self.num_generated / self.wall_time_s if self.wall_time_s else float("nan")

    @classmethod
    def from_outputs(cls, outputs: Sequence[SpecOutput]) -> AcceptanceStats:
        steps = sum(o.num_target_calls for o in outputs)
        generated = sum(o.generated_ids.shape[1] for o in outputs)
        return cls(
            alpha=pooled_alpha(sum(o.alpha_sum for o in outputs), sum(o.num_proposed for o in outputs)),
            mean_accepted_length=sum(sum(o.accepted_lengths) for o in outputs) / steps if steps else None,
            tokens_per_step=generated / steps if steps else None,
            num_generated=generated,
            num_steps=steps,
            wall_time_s=sum(o.wall_time_s for o in outputs),
            draft_time_s=sum(o.draft_time_s for o in outputs),
            target_time_s=sum(o.target_time_s for o in outputs),
            accept_time_s=sum(o.accept_time_s for o in outputs),
            cache_time_s=sum(o.cache_time_s for o in outputs),
            per_prompt_alpha=[o.alpha for o in outputs],
        )


@torch.inference_mode()
def target_only_greedy(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    eos_id: int | None,
    reuse_prompt: bool = True,
) -> list[int]:
    """Plain cached greedy decoding of a decoder-only target alone, through the target's cache as
    `SpeculativeDecoder` verifies with it (`target_cache`: the lean step where it applies): the baseline
    speculative decoding must beat. input_ids [1, T]; eos_id None: exactly max_new_tokens; reuse_prompt: as
    `SpeculativeDecoder`'s."""
    cache = target_cache(model, reuse_prompt=reuse_prompt)
    logits = cache.forward(input_ids, 1)  # [1, V]
    generated: list[int] = []
    while True:
        token = int(greedy(logits[0]))
        generated.append(token)
        if token == eos_id or len(generated) == max_new_tokens:
            return generated
        logits = cache.forward(torch.tensor([[token]]), 1)


def measure_acceptance(
    draft: PreTrainedModel,
    target: PreTrainedModel,
    prompts: Sequence[torch.Tensor | list[int]],
    gamma: Gamma = DEFAULT,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    eos_token_id: int | list[int] | None = None,
    generator: torch.Generator | None = None,
    progress: bool = False,
) -> AcceptanceStats:
    """Run speculative decoding on each prompt ([1, T] tensor or list of ids) and aggregate."""
    decoder = SpeculativeDecoder(draft, target, gamma=gamma)
    outputs = []
    for prompt in tqdm(prompts, desc="speculative decoding", disable=not progress):
        ids = prompt if isinstance(prompt, torch.Tensor) else torch.tensor([list(prompt)])
        outputs.append(
            decoder.generate(
                ids.view(1, -1),
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                eos_token_id=eos_token_id,
                generator=generator,
            )
        )
    return AcceptanceStats.from_outputs(outputs)
