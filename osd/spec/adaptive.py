"""Adaptive speculation length (`gamma="auto"`, `--max_propose_num auto`).

Before every step the policy picks the k in 0..max_gamma that maximises Eq. 2's expected tokens
per second,

    E[tokens](a, k) / (k * t_draft + t_verify(k)),    E[tokens](a, k) = (1 - a^(k + 1)) / (1 - a),

with a the running acceptance-rate estimate (the exact alpha of the last ~`window` counted proposals:
sums decayed by 1 - 1/window per proposal, starting from `alpha` worth `prior_weight` proposals;
a per-step moving average was too noisy at alpha ~0.2 and gamma 1, where a step is one 0/1
observation), t_draft the draft's single-token step and t_verify(k) the target's
forward over k + 1 tokens, both measured once per batch size on this machine
(`osd.spec.timing.step_time`; or given with `set_costs`). k = 0 is plain target decoding, chosen
when no k pays (a useless draft). At k = 0 the estimate gets no news, so after `probe_every` steps
without a proposal one step proposes a single token. One policy may serve many `generate` calls
(online serving keeps one): its estimate carries over from query to query.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from transformers import PreTrainedModel

from osd.cost_model import expected_tokens_per_step
from osd.spec.timing import step_time


@dataclass
class StepCosts:
    """Seconds of one draft step and of target forwards over k + 1 tokens, k = 0..max_gamma."""

    draft_s: float
    verify_s: list[float]  # [max_gamma + 1]

    def tokens_per_second(self, alpha: float, k: int) -> float:
        return expected_tokens_per_step(alpha, k) / (k * self.draft_s + self.verify_s[k])


@dataclass
class GammaPolicy:
    max_gamma: int = 8
    alpha: float = 0.5  # the estimate before any step (updated in place)
    window: int = 64  # proposals the estimate remembers
    prior_weight: float = 4.0  # proposals the initial alpha counts for
    probe_every: int = 16
    context: int = 64  # context length at which costs are measured
    costs: dict[int, StepCosts] = field(default_factory=dict)  # by batch size
    _steps_without_proposal: int = 0
    _accepted: float = field(init=False)  # decayed sum of exact alpha over proposals
    _proposed: float = field(init=False)  # decayed count of proposals

    def __post_init__(self) -> None:
        if self.max_gamma < 1 or self.window < 1:
            raise ValueError(
                f"GammaPolicy needs max_gamma >= 1 and window >= 1, got {self.max_gamma}, {self.window}"
            )
        if not 0.0 <= self.alpha <= 1.0 or self.prior_weight <= 0:
            raise ValueError(
                f"need alpha in [0, 1] and prior_weight > 0, got {self.alpha}, {self.prior_weight}"
            )
        self._accepted, self._proposed = self.alpha * self.prior_weight, self.prior_weight

    def set_costs(self, batch: int, draft_s: float, verify_s: list[float]) -> None:
        if len(verify_s) != self.max_gamma + 1:
            raise ValueError(
                f"verify_s needs max_gamma + 1 = {self.max_gamma + 1} entries, got {len(verify_s)}"
            )
        self.costs[batch] = StepCosts(draft_s, list(verify_s))

    def measure_costs(self, draft: PreTrainedModel, target: PreTrainedModel, batch: int = 1) -> StepCosts:
        """Time the draft step and the target's forwards over 1..max_gamma + 1 tokens (a few seconds)."""
        if batch not in self.costs:
            if draft.config.is_encoder_decoder:
                raise ValueError(
                    "gamma='auto' measures decoder-only models; for encoder-decoder models give the costs "
                    "with GammaPolicy.set_costs"
                )
            timed = {"context": self.context, "reps": 5, "rounds": 2, "batch": batch}
            verify = [step_time(target, length=k + 1, **timed) for k in range(self.max_gamma + 1)]
            self.set_costs(batch, step_time(draft, **timed), verify)
        return self.costs[batch]

    def choose(self, draft: PreTrainedModel, target: PreTrainedModel, batch: int = 1) -> int:
        """The number of draft tokens to propose at the next step, for `batch` active rows. Costs are
        measured for the first batch size seen; as rows finish, the batch shrinks one row at a time,
        and the measured size nearest above it stands in (measuring each would cost seconds)."""
        larger = sorted(b for b in self.costs if b >= batch)
        costs = self.costs[larger[0]] if larger else self.measure_costs(draft, target, batch)
        k = max(range(self.max_gamma + 1), key=lambda g: costs.tokens_per_second(self.alpha, g))
        if k == 0 and self._steps_without_proposal >= self.probe_every:
            return 1
        return k

    def observe(self, alpha_sum: float, counted: int) -> None:
        """Update the estimate with a step's exact acceptance (sum over its `counted` proposals)."""
        if counted == 0:
            self._steps_without_proposal += 1
            return
        self._steps_without_proposal = 0
        decay = (1.0 - 1.0 / self.window) ** counted
        self._accepted = decay * self._accepted + alpha_sum
        self._proposed = decay * self._proposed + counted
        self.alpha = self._accepted / self._proposed
