"""An EAGLE-3 head's distillation loss (training-time test), in the online updater's `LossFn` shape.

    loss = partial(head_distillation_loss, embed=target.get_input_embeddings(), divergence=forward_kl)
    DraftUpdater({"shared": head}, loss, adamw_step(head.parameters(), 1e-3), config, state)

Symbols: S committed tokens of a query, n = S - 1 head entries, K H the width of the target's concatenated states,
V' the head's draft vocabulary, W positions whose target logits are kept, s a step of the training-time test.

What a query keeps (`FeatureQuery`): its tokens, the target's states at positions 0..S-2 (those the verification
passes computed: `osd.spec.head_cache`), and the target's logits at W positions.

Training-time test (EAGLE-3): step 0 runs the head on every entry at once (entry i reads token i + 1 and the target's
feature at i, position id i) and predicts token i + 2; step s gives entry i its own step s - 1 output state and token
i + 1 + s (the committed one: teacher forcing, as the speculators trainer does) at position id i + s, and predicts
token i + 2 + s. At step s entry i attends to the step-0 entries 0..i and to its own entries of steps 1..s: what the
engine's draft chain sees after i + 1 committed tokens. Each step's divergence against the target's logits at the
token it predicts is taken on V' (`osd.spec.draft_vocab.restrict_divergence`), averaged over the buffer's counted
positions of that step, and weighted by decay ** s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from osd.distill.losses import Divergence
from osd.spec.cached_model import layer_inputs
from osd.spec.draft_vocab import restrict_divergence
from osd.spec.eagle3 import Eagle3Head


@dataclass
class FeatureQuery:
    """One served query as a head's update needs it (tensors on the CPU)."""

    tokens: torch.Tensor  # [S] committed tokens: prompt, then generated
    features: torch.Tensor  # [S - 1, K H] the target's states at positions 0..S-2
    positions: torch.Tensor  # [W] indices into tokens (each >= 2) whose target logits are kept
    target_logits: torch.Tensor  # [W, V] the target's logits that produced tokens[positions]
    replayed: bool = False  # kept from an earlier update (--online_replay_queries)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in asdict(self).values() if isinstance(t, torch.Tensor))


@torch.no_grad()
def target_features(target: PreTrainedModel, layers: Sequence[int], tokens: torch.Tensor) -> torch.Tensor:
    """The target's states that a head reads, teacher-forced on tokens [S]: [S - 1, K H] at positions 0..S-2
    (what verification keeps while serving, up to float rounding)."""
    out = target(input_ids=tokens[None, :-1].to(target.device), output_hidden_states=True, use_cache=False)
    return layer_inputs(out.hidden_states, tuple(layers))[0]


def ttt_mask(n: int, step: int, device: torch.device) -> torch.Tensor:
    """Where step `step`'s n entries attend [1, 1, n, (step + 1) n]: step 0's entries 0..i, then entry i of each
    later step (its own chain)."""
    slots = torch.arange(n, device=device)
    causal = slots[None, :] <= slots[:, None]  # [n, n]
    own = slots[None, :] == slots[:, None]
    return torch.cat([causal] + [own] * step, dim=1)[None, None]


def ttt_logits(
    head: Eagle3Head, embed: nn.Module, tokens: torch.Tensor, features: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """The head's logits [n, V'] at each of `steps` steps of the training-time test (module docstring) on tokens
    [S] and the target's features [S - 1, K H]; entry i of step s predicts tokens[i + 2 + s]."""
    device, n = head.device, tokens.shape[0] - 1
    # ids past the end feed entries whose predictions no loss reads
    tokens = torch.cat([tokens.to(device), tokens.new_zeros(steps).to(device)])
    positions = torch.arange(n, device=device)[None]  # [1, n]
    keys, values = [], []

    def store(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys.append(k), values.append(v)
        return torch.cat(keys, dim=2), torch.cat(values, dim=2)  # [1, kv heads, (s + 1) n, D]

    hidden = head.fuse(features[None].to(device))  # [1, n, H]
    logits = []
    for step in range(steps):
        with torch.no_grad():  # the target's embedding is frozen
            ids = tokens[None, 1 + step : 1 + step + n].to(embed.weight.device)  # [1, n]
            embeds = embed(ids).to(device)  # [1, n, H]
        hidden = head(embeds, hidden, positions + step, ttt_mask(n, step, device), store)
        logits.append(head.logits(hidden[0]))
    return logits


def head_distillation_loss(
    head: Eagle3Head,
    buffer: Sequence[FeatureQuery],
    backward: Callable[[torch.Tensor], None] | None = None,
    *,
    embed: nn.Module,
    divergence: Divergence,
    temperature: float = 1.0,
    steps: int = 3,
    decay: float = 1.0,
) -> torch.Tensor | None:
    """Sum over the training-time test's steps of decay ** s times the step's mean divergence over the buffer's
    positions (module docstring). With `backward`, each query's share is back-propagated as soon as it is computed;
    returns the detached total. None when no position counts. embed: the target's input embedding."""
    counted = [sum(int((q.positions >= 2 + s).sum()) for q in buffer) for s in range(steps)]  # per step
    if not any(counted):
        return None
    on_subvocab = restrict_divergence(divergence, head.token_ids)
    total = torch.zeros((), device=head.device)
    for query in buffer:
        share = torch.zeros((), device=head.device)
        logits = ttt_logits(head, embed, query.tokens, query.features, steps)
        for step, step_logits in enumerate(logits):
            keep = query.positions >= 2 + step  # [W]
            if not keep.any():
                continue
            rows = (query.positions[keep] - 2 - step).to(head.device)  # entries that predict those tokens
            teacher = query.target_logits[keep].to(head.device)
            d = on_subvocab(step_logits[rows], teacher, None, temperature=temperature, reduction="sum")
            share = share + decay**step * d / counted[step]
        if backward is not None:
            backward(share)
            share = share.detach()
        total = total + share
    return total
