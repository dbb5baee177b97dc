"""Adaptive speculation length (`gamma="auto"`, `--max_propose_num auto`).

Before every step the policy picks the k in 0..max_gamma that maximises Eq. 2's expected tokens
per second,

    E[tokens](a, k) / (k * t_draft + t_verify(k)),    E[tokens](a, k) = (1 - a^(k + 1)) / (1 - a),

with a the running acceptance-rate estimate (an exponential moving average of the exact alpha of
each step's counted proposals), t_draft the draft's single-token step and t_verify(k) the target's
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
    smoothing: float = 0.1  # weight of the newest step in the moving average
    probe_every: int = 16
    context: int = 64  # context length at which costs are measured
    costs: dict[int, StepCosts] = field(default_factory=dict)  # by batch size
    _steps_without_proposal: int = 0

    def __post_init__(self) -> None:
        if self.max_gamma < 1:
            raise ValueError(f"GammaPolicy.max_gamma must be >= 1, got {self.max_gamma}")
        if not 0.0 <= self.alpha <= 1.0 or not 0.0 < self.smoothing <= 1.0:
            raise ValueError(
                f"need alpha in [0, 1] and smoothing in (0, 1], got {self.alpha}, {self.smoothing}"
            )

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
        """The number of draft tokens to propose at the next step."""
        costs = self.measure_costs(draft, target, batch)
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
        self.alpha += self.smoothing * (alpha_sum / counted - self.alpha)
