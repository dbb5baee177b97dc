"""Token distributions and the speculative accept/reject rule (pure tensor functions).

Terms, used the same way everywhere in `osd.spec`:
- p: the *target* distribution, q: the *draft* distribution, both over the shared vocabulary V.
- k: the number of draft tokens proposed in one verification step (k <= gamma).
- accepted: a proposed draft token kept by the rule below; n = number accepted (0..k).
- recovered token: the token the target emits at the first rejected position, sampled from
  normalize(max(p - q, 0)); bonus token: the token sampled from p after all k were accepted.
  Either way each step emits n accepted tokens plus exactly one target token.

Guarantee (Leviathan et al. 2023, Thm 1; Chen et al. 2023): with the rule in `accept_reject`,
every emitted token is distributed exactly as the target's p given the emitted prefix. At
temperature 0 both distributions are the argmax point masses, so the rule reduces to "accept
while the draft's token equals the target's argmax", and the output equals greedy target decoding.

Shapes: k proposed tokens, V vocabulary. `p` is [k + 1, V] (one extra row for the bonus token),
`q` is [k, V].
"""

from __future__ import annotations

import numpy as np
import torch


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """argmax over the last dimension: [..., V] -> [...] int64, the first index of the largest value (NaN counts
    as the largest), as `argmax`. On the CPU by numpy's argmax (bf16 and float16 widened exactly first): torch's
    `argmax`, and its `max` with indices, take several times longer over a vocabulary there; elsewhere by `max`."""
    if logits.device.type != "cpu":
        return logits.max(-1).indices
    values = logits.detach()
    if values.dtype not in (torch.float32, torch.float64):
        values = values.float()
    return torch.from_numpy(np.asarray(values.numpy().argmax(-1), dtype=np.int64))


def logits_to_probs(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> torch.Tensor:
    """Softmax of logits / temperature, restricted to the top-p nucleus; one-hot argmax at temperature 0.

    logits: [..., V] -> probs [..., V] (float32).
    """
    logits = logits.float()
    if temperature == 0.0:
        return torch.nn.functional.one_hot(greedy(logits), logits.shape[-1]).float()
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # keep the smallest prefix whose mass reaches top_p (the first token is always kept)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= top_p
        sorted_probs = sorted_probs.masked_fill(drop, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def generator_on(device: torch.device, generator: torch.Generator | None) -> torch.Generator | None:
    """A generator on `device`: `generator` itself when it is there, else a new one seeded by a draw from it.

    torch samples only with a generator on the tensor's device; this lets one seeded generator drive
    sampling on every device (a CPU generator with CUDA probabilities, a target spread over GPUs)
    and stay reproducible.
    """
    if generator is None or generator.device == torch.device(device):
        return generator
    seed = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
    return torch.Generator(device=device).manual_seed(seed)


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row: [..., V] -> [...], drawn on the probabilities' device. Deterministic argmax for one-hot rows."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=generator_on(flat.device, generator)).reshape(
        probs.shape[:-1]
    )


def acceptance_probability(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Exact per-position acceptance rate alpha = sum_v min(p_v, q_v): [k, V], [k, V] -> [k]."""
    return torch.minimum(p, q).sum(-1)


def accept_reject(
    draft_tokens: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    uniforms: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, torch.Tensor]:
    """Verify k draft tokens at once; return (n accepted, the one target token emitted after them).

    draft_tokens: [k] long; p: [k + 1, V] target; q: [k, V] draft; uniforms: [k] in [0, 1).
    Token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)) (u_i * q < p, which also
    covers q = 0); the first rejection ends the step. Returns the emitted token as a 0-d tensor.
    """
    limit = torch.tensor([draft_tokens.shape[0]], device=p.device)
    n, token = accept_reject_rows(draft_tokens[None], p[None], q[None], uniforms[None], limit, generator)
    return int(n[0]), token[0]


def accept_reject_rows(
    draft_tokens: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    uniforms: torch.Tensor,
    limits: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`accept_reject` for B rows at once, row b counting only its first limits[b] proposals.

    draft_tokens: [B, k]; p: [B, k + 1, V]; q: [B, k, V]; uniforms: [B, k]; limits: [B] (<= k).
    Returns n [B] accepted per row and the token [B] each row emits after them: sampled from
    normalize(max(p - q, 0)) at the first rejection, or the bonus from p[limit] when all were accepted.
    """
    B, k = draft_tokens.shape
    rows = torch.arange(B, device=p.device)
    p_x = p[:, :k].gather(2, draft_tokens[..., None])[..., 0]  # [B, k]
    q_x = q.gather(2, draft_tokens[..., None])[..., 0]  # [B, k]
    proposed = torch.arange(k, device=p.device)[None, :] < limits[:, None]  # [B, k]
    # greedy: p_x is 1 at the target argmax, else 0
    accepted = (uniforms * q_x < p_x) & proposed
    n = accepted.long().cumprod(1).sum(1)  # [B]
    p_n = p[rows, n]  # [B, V]
    rejected = (n < limits)[:, None]  # [B, 1]; else the bonus: q counts as 0
    q_n = q[rows, n.clamp(max=k - 1)] * rejected if k > 0 else torch.zeros_like(p_n)
    residual = torch.clamp(p_n - q_n, min=0.0)  # [B, V]
    total = residual.sum(-1, keepdim=True)
    # p == q at this position cannot reject (u*q < p always), so total > 0 there up to rounding
    residual = torch.where(total > 0, residual / total.clamp(min=1e-30), p_n)
    return n, sample(residual, generator)
