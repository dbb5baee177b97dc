"""An EAGLE-3 head's distillation loss (training-time test), in the online updater's `LossFn` shape.

    loss = partial(head_distillation_loss, embed=target.get_input_embeddings(), divergence=forward_kl)
    DraftUpdater({"shared": head}, loss, adamw_step(head.parameters(), 1e-3), config, state)

Symbols: S committed tokens of a query, n = S - 1 head entries, K H the width of the target's concatenated states,
V' the head's draft vocabulary, W positions whose target logits are kept, s a step of the training-time test.

What a query keeps (`FeatureQuery`): its tokens, the target's states at positions 0..S-2 (those the verification
passes computed: `osd.spec.head_cache`), the target's logits at W positions, and the proposals the target rejected.

Training-time test (EAGLE-3): step 0 runs the head on every entry at once (entry i reads token i + 1 and the target's
feature at i, position id i) and predicts token i + 2; step s gives entry i its own step s - 1 output state and token
i + 1 + s (the committed one: teacher forcing, as the speculators trainer does) at position id i + s, and predicts
token i + 2 + s. At step s entry i attends to the step-0 entries 0..i and to its own entries of steps 1..s: what the
engine's draft chain sees after i + 1 committed tokens. Each step's divergence against the target's logits at the
token it predicts is taken on V' (`osd.spec.draft_vocab.restrict_divergence`), averaged over the buffer's counted
positions of that step, and weighted by decay ** s.

Rejected proposals (`rejected_weight` > 0, Aurora's recipe: `osd.distill.losses.rejected_proposal_loss`). A proposal
rejected at chain step s was the head's prediction of entry p - 2 - s at step s, p its index in tokens (the
chain's earlier steps were accepted, so teacher forcing feeds what the chain fed): that entry's -log(1 - q(x)) joins
step s's sum, weighted by rejected_weight. With 0, the loss is plain distillation on the target's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch
from torch import nn
from transformers import PreTrainedModel

from osd.distill.losses import Divergence, rejected_proposal_loss
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
    # [R, 3] per rejected proposal: its index p into tokens (the target's token replaced it), the chain step s that
    # proposed it, and its token id
    rejected: torch.Tensor = field(default_factory=lambda: torch.zeros(0, 3, dtype=torch.long))
    replayed: bool = False  # kept from an earlier update (--online_replay_queries)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in asdict(self).values() if isinstance(t, torch.Tensor))


def chain_steps(accepted_lengths: list[int], wrong_positions: list[int]) -> list[int]:
    """The chain step that proposed each wrong position's rejected token: the proposals its verification step
    accepted before it (a step commits n accepted tokens and the target's, from where the last step ended)."""
    step_of, start = {}, 0  # a step's wrong position (where it committed the target's token) -> its n
    for n in accepted_lengths:
        step_of[start + n] = n
        start += n + 1
    return [step_of[p] for p in wrong_positions]


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


def step_sum(
    head: Eagle3Head,
    query: FeatureQuery,
    step: int,
    logits: torch.Tensor,
    divergence: Divergence,
    temperature: float,
    rejected_weight: float,
) -> torch.Tensor:
    """Step `step`'s summed loss on one query, from its logits [n, V'] (`ttt_logits`): the divergence at the
    positions it predicts (`divergence` on V'), plus rejected_weight times the rejected proposals' term."""
    keep = query.positions >= 2 + step  # [W]
    rows = (query.positions[keep] - 2 - step).to(head.device)  # entries that predict those tokens
    teacher = query.target_logits[keep].to(head.device)
    loss = divergence(logits[rows], teacher, None, temperature=temperature, reduction="sum")
    rejected = query.rejected[query.rejected[:, 1] == step]  # [R_s, 3]
    if rejected_weight and len(rejected):
        entries = (rejected[:, 0] - 2 - step).to(head.device)
        ids = rejected[:, 2].contiguous().to(head.device)
        draft_ids = torch.searchsorted(head.token_ids, ids)  # the head proposes in V' only
        loss = loss + rejected_weight * rejected_proposal_loss(logits[entries], draft_ids, temperature).sum()
    return loss


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
    rejected_weight: float = 0.0,
) -> torch.Tensor | None:
    """Sum over the training-time test's steps of decay ** s times the step's mean loss over the buffer's positions
    (module docstring; rejected_weight: the rejected proposals' term). With `backward`, each query's share is
    back-propagated as soon as it is computed; returns the detached total. None when no position counts. embed: the
    target's input embedding."""
    counted = [sum(int((q.positions >= 2 + s).sum()) for q in buffer) for s in range(steps)]  # per step
    if not any(counted):
        return None
    on_subvocab = restrict_divergence(divergence, head.token_ids)
    total = torch.zeros((), device=head.device)
    for query in buffer:
        share = torch.zeros((), device=head.device)
        logits = ttt_logits(head, embed, query.tokens, query.features, steps)
        for step, step_logits in enumerate(logits):
            if counted[step]:
                loss = step_sum(head, query, step, step_logits, on_subvocab, temperature, rejected_weight)
                share = share + decay**step * loss / counted[step]
        if backward is not None:
            backward(share)
            share = share.detach()
        total = total + share
    return total
