"""Token-level divergences between the student (draft) and the teacher (target), pure functions.

Symbols: B batch, T positions, N = B*T flattened positions, V vocabulary.
Every divergence takes `student_logits` and `teacher_logits` of the same shape, [B, T, V] or
[N, V], and a boolean `mask` of the leading shape ([B, T] or [N]; True = the position counts;
None = all count). The teacher is a constant: no gradient flows into `teacher_logits`.
Both logits are divided by `temperature`, then everything is computed in float32 log space
(`log_softmax`, `logsumexp`), so large logits and bf16 inputs stay finite.

`reduction`:
- "mean" (default): mean over counted positions (never over padding; 0 when none counts);
- "sum": sum over counted positions; divide it by the number of counted positions of the whole
  optimizer step to normalise correctly under gradient accumulation (TRL #2202, #4719);
- "none": the per-position divergence, shape of `mask`, zero where the mask is False.

P = softmax(teacher), Q = softmax(student):
    forward_kl = KL(P || Q)   (mean-seeking; the soft cross-entropy minus the teacher's entropy)
    reverse_kl = KL(Q || P)   (mode-seeking)
    jsd        = beta*KL(P || M) + (1-beta)*KL(Q || M),  M = beta*P + (1-beta)*Q  (generalised JSD,
                 Agarwal et al. 2024; mixed in log space, TRL #3043, with beta on the teacher, TRL #5731)
    tvd        = 0.5 * sum_v |P - Q|   (1 - tvd is the acceptance rate alpha of speculative decoding)
    reference_mix = 0.9*forward_kl + 0.1*reverse_kl   (what the reference code called "jsd")
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import torch

Divergence = Callable[..., torch.Tensor]
REDUCTIONS = ("mean", "sum", "none")


def _log_probs(
    student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 log-softmax of both logits at `temperature`; the teacher's is detached."""
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(
            f"student logits {tuple(student_logits.shape)} and teacher logits {tuple(teacher_logits.shape)} "
            "differ; distillation needs the same positions and a shared vocabulary"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    log_q = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    log_p = torch.log_softmax(teacher_logits.detach().float() / temperature, dim=-1)
    return log_q, log_p


def _kl(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    """KL(a || b) over the last dim; terms with a = 0 count 0 even where b = 0 too."""
    terms = log_a.exp() * (log_a - log_b)
    return torch.where(log_a > -math.inf, terms, torch.zeros_like(terms)).sum(-1)


def _reduce(per_position: torch.Tensor, mask: torch.Tensor | None, reduction: str) -> torch.Tensor:
    if mask is None:
        mask = torch.ones_like(per_position, dtype=torch.bool)
    if mask.shape != per_position.shape:
        raise ValueError(
            f"mask {tuple(mask.shape)} must have the logits' leading shape {tuple(per_position.shape)}"
        )
    mask = mask.to(per_position.device, torch.bool)
    # where (not multiply): a NaN or inf at a padded position must not leak into the sum
    per_position = torch.where(mask, per_position, torch.zeros_like(per_position))
    if reduction == "none":
        return per_position
    if reduction == "sum":
        return per_position.sum()
    if reduction == "mean":
        return per_position.sum() / mask.sum().clamp(min=1)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def forward_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """KL(teacher || student) at each counted position, reduced (see module docstring)."""
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    return _reduce(_kl(log_p, log_q), mask, reduction)


def reverse_kl(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """KL(student || teacher) at each counted position, reduced (see module docstring)."""
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    return _reduce(_kl(log_q, log_p), mask, reduction)


def jsd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
    beta: float = 0.5,
) -> torch.Tensor:
    """beta*KL(P || M) + (1-beta)*KL(Q || M) with M = beta*P + (1-beta)*Q, P teacher, Q student."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"jsd beta must be in (0, 1) (--jsd_beta), got {beta}")
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    # log M = logsumexp(log beta + log P, log(1-beta) + log Q): the mixture in log space
    log_m = torch.logaddexp(log_p + math.log(beta), log_q + math.log(1.0 - beta))
    per_position = beta * _kl(log_p, log_m) + (1.0 - beta) * _kl(log_q, log_m)
    return _reduce(per_position, mask, reduction)


def tvd(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Total variation distance 0.5 * sum_v |P - Q| at each counted position, reduced."""
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    per_position = 0.5 * (log_p.exp() - log_q.exp()).abs().sum(-1)
    return _reduce(per_position, mask, reduction)


def reference_mix(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """0.9*forward_kl + 0.1*reverse_kl: the reference code's `--kl_method jsd`, under an honest name."""
    log_q, log_p = _log_probs(student_logits, teacher_logits, temperature)
    per_position = 0.9 * _kl(log_p, log_q) + 0.1 * _kl(log_q, log_p)
    return _reduce(per_position, mask, reduction)


DIVERGENCES: dict[str, Divergence] = {
    "forward": forward_kl,
    "reverse": reverse_kl,
    "jsd": jsd,
    "tvd": tvd,
    "reference_mix": reference_mix,
}


def get_divergence(kl_method: str, jsd_beta: float = 0.5) -> Divergence:
    """The divergence named by `--kl_method` (jsd with its `--jsd_beta` bound)."""
    if kl_method not in DIVERGENCES:
        raise ValueError(f"--kl_method must be one of {sorted(DIVERGENCES)}, got {kl_method!r}")
    fn = DIVERGENCES[kl_method]
    return partial(jsd, beta=jsd_beta) if fn is jsd else fn


def rejected_proposal_loss(
    student_logits: torch.Tensor, rejected: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """-log(1 - Q(x)) per position, x the proposal the target rejected there: Aurora's use of rejected proposals
    as implicit negative feedback (Wang et al. 2026, arXiv 2602.06932), which lowers Q(x) alone where a
    divergence spreads the correction over V. student_logits [N, V], rejected ids [N] -> [N]; log(1 - Q(x)) is
    the logsumexp of log Q over the other ids, so it stays finite as Q(x) -> 1."""
    log_q = torch.log_softmax(student_logits.float() / temperature, dim=-1)
    others = log_q.scatter(-1, rejected[:, None].to(log_q.device), -math.inf)  # [N, V]
    return -torch.logsumexp(others, dim=-1)
