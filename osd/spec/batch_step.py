"""One step of batched speculative decoding (`SpeculativeDecoder.generate_batch`): every active row
proposes, the target verifies all rows in one forward pass, each row accepts its own prefix.

Symbols: B active rows, k proposed tokens (the longest row's), V shared vocabulary. Layout and
guarantees: `osd.spec.batched`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from osd.spec.adaptive import GammaPolicy
from osd.spec.batched import RowCache
from osd.spec.records import SequenceRecord, StepTimes
from osd.spec.sampling import (
    accept_reject_rows,
    acceptance_probability,
    greedy,
    logits_to_probs,
    sample,
)


@dataclass
class BatchRow(SequenceRecord):
    """A row of `generate_batch`: its record and the tokens it may generate."""

    budget: int = 0


def batch_step(
    rows: list[BatchRow],
    draft: RowCache,
    target: RowCache,
    times: StepTimes,
    eos: set[int],
    gamma: int,
    vocab_size: int,
    policy: GammaPolicy | None,
    temperature: float,
    top_p: float,
    gen: torch.Generator | None,
) -> list[bool]:
    """`SpeculativeDecoder._step` over the active rows of `generate_batch` (`osd.spec.batched`), proposing
    up to `gamma` tokens a row; returns which rows finished."""
    V = vocab_size
    t0 = time.perf_counter()
    committed = torch.tensor([len(r.tokens) for r in rows])  # [B]
    limits = torch.tensor([min(gamma, r.budget - r.num_generated - 1) for r in rows])  # [B] k_i
    k = int(limits.max())
    draft_tokens = torch.empty(len(rows), 0, dtype=torch.long)  # [B, k]
    q = None  # [B, k, V] when sampling
    if k > 0:
        draft_tokens, q = propose_batch(draft, [r.tokens for r in rows], k, V, temperature, top_p, gen)
    draft_lists = draft_tokens.tolist()  # also waits for the device, so the timings are honest
    # proposals after a drafted EOS cannot be emitted: do not count them
    limits = torch.tensor(
        [
            next((j + 1 for j, t in enumerate(d[:lim]) if t in eos), lim)
            for d, lim in zip(draft_lists, limits.tolist(), strict=True)
        ]
    )
    t1 = time.perf_counter()
    feed, feed_mask = target.feed_unseen([r.tokens for r in rows])
    verify_in = torch.cat([feed, draft_tokens], 1)  # [B, u + k]
    verify_mask = torch.cat([feed_mask, torch.ones_like(draft_tokens)], 1)
    logits = target.forward(verify_in, verify_mask, num_logits=k + 1)[..., :V]  # [B, k + 1, V]
    t2 = time.perf_counter()
    draft_tokens, limits = draft_tokens.to(logits.device), limits.to(logits.device)
    proposed = torch.arange(k, device=logits.device)[None, :] < limits[:, None]  # [B, k]
    if temperature == 0.0:
        argmax = greedy(logits)  # [B, k + 1]
        matches = draft_tokens == argmax[:, :k]  # [B, k]
        n = (matches & proposed).long().cumprod(1).sum(1)  # [B]
        next_tokens = argmax.gather(1, n[:, None])[:, 0]  # [B]
        alphas = matches.float()  # sum_v min(p, q) of two point masses
    else:
        p = logits_to_probs(logits, temperature, top_p)  # [B, k + 1, V]
        q = q.to(p.device) if q is not None else p.new_zeros(len(rows), 0, V)
        uniforms = torch.rand(len(rows), k, generator=gen, device=gen.device if gen is not None else p.device)
        n, next_tokens = accept_reject_rows(draft_tokens, p, q, uniforms.to(p.device), limits, gen)
        alphas = acceptance_probability(p[:, :k], q)  # [B, k]
    # count positions whose prefix is the committed one: accepted ones and the first rejected
    counted = torch.minimum(n + 1, limits)  # [B]
    alpha_sums = (alphas * (torch.arange(k, device=alphas.device)[None, :] < counted[:, None])).sum(1)
    if policy is not None:
        policy.observe(float(alpha_sums.sum()), int(counted.sum()))
    t3 = time.perf_counter()
    finished = []
    for i, row in enumerate(rows):
        n_i = int(n[i])
        emitted = row.commit(draft_lists[i], n_i, int(limits[i]), int(next_tokens[i]), float(alpha_sums[i]),
                             int(counted[i]), logits[i])  # fmt: skip
        finished.append(bool(eos.intersection(emitted)) or row.num_generated >= row.budget)
    # the target's states at the tokens each row committed: a head's next chain reads them
    if target.hidden_layers:
        accepted = torch.arange(k, device=n.device)[None, :] < n[:, None]  # [B, k]
        verified = torch.cat([feed_mask.to(n.device).bool(), accepted], 1)  # [B, u + k] of committed tokens
        draft.add_features(target.features, verified)
        verified = verified.to(target.features.device)
        for row, features, kept in zip(rows, target.features, verified, strict=True):
            row.keep_features(features[kept])
    stay = torch.tensor([i for i, done in enumerate(finished) if not done], dtype=torch.long)
    if len(stay):
        n = n.cpu()
        draft.keep(torch.minimum(committed + n, draft.lengths), stay)
        target.keep(committed + n, stay)  # the newest committed token is fed at the next verification
    t4 = time.perf_counter()
    times.add(t0, t1, t2, t3, t4)
    if policy is not None and feed.shape[1] == 1:  # not a prefill
        policy.observe_step(len(rows), k, t4 - t0)
    return finished


def propose_batch(
    draft: RowCache,
    tokens: list[list[int]],
    k: int,
    vocab_size: int,
    temperature: float,
    top_p: float,
    gen: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """k draft tokens per row after its committed tokens: [B, k], and the draft's q [B, k, V] when sampling."""
    feed, mask = draft.feed_unseen(tokens)
    proposed, probs = [], []
    for _ in range(k):
        logits = draft.forward(feed, mask, num_logits=1)[:, 0, :vocab_size]  # [B, V]
        if temperature == 0.0:
            token = greedy(logits)  # [B]
        else:
            q_j = logits_to_probs(logits, temperature, top_p)  # [B, V]
            token = sample(q_j, gen)
            probs.append(q_j)
        proposed.append(token.cpu())
        feed, mask = token[:, None], torch.ones(len(tokens), 1, dtype=torch.long)
    return torch.stack(proposed, 1), torch.stack(probs, 1) if probs else None
