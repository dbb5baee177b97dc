"""Adaptive speculation length (`gamma="auto"`, `--max_propose_num auto`).

Before every step the policy picks the k in 0..max_gamma that maximises Eq. 2's expected tokens
per second,

    E[tokens](a, k) / (k * t_draft + t_verify(k)),    E[tokens](a, k) = (1 - a^(k + 1)) / (1 - a),

with a the running acceptance-rate estimate (the exact alpha of the last ~`window` counted proposals:
sums decayed by 1 - 1/window per proposal, starting from `alpha` worth `prior_weight` proposals;
a per-step moving average was too noisy at alpha ~0.2 and gamma 1, where a step is one 0/1
observation), t_draft the draft's single-token step and t_verify(k) the target's
forward over k + 1 tokens, both measured once per batch size on this machine
(`osd.spec.timing.step_time`; or given with `set_costs`). The engine then reports the time of
every verification it runs (`observe_verify`): t_verify(k) becomes a running average of those
timings once k has been run at that batch size, and the k not run yet are scaled by how far the
run ones came out from their measurement, and so is the draft step (a short measurement on a busy
machine is noisy, and it misses the engine's own per-step work). k = 0 is plain target decoding, chosen
when no k pays (a useless draft). At k = 0 the estimate gets no news, so after `probe_every` steps
without a proposal one step proposes a single token. One policy may serve many `generate` calls
(online serving keeps one): its estimate carries over from query to query.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from transformers import PreTrainedModel

from osd.cost_model import expected_tokens_per_step
from osd.spec.timing import step_time


@dataclass
class StepCosts:
    """Seconds of one draft step and of target forwards over k + 1 tokens, k = 0..max_gamma: as
    measured, and as the engine's own verifications turned out (`observe`)."""

    draft_s: float
    verify_s: list[float]  # [max_gamma + 1], measured
    observed_s: list[float | None] = field(default_factory=list)  # [max_gamma + 1], None: not run yet

    def __post_init__(self) -> None:
        self.observed_s = self.observed_s or [None] * len(self.verify_s)

    def scale(self) -> float:
        """How much slower than measured the machine runs now: the median ratio observed / measured
        over the k already run (1 before any)."""
        ratios = [o / m for o, m in zip(self.observed_s, self.verify_s, strict=True) if o is not None]
        return statistics.median(ratios) if ratios else 1.0

    def verify(self, k: int) -> float:
        """t_verify(k): the running average of the engine's timings, else the measurement scaled."""
        observed = self.observed_s[k]
        return observed if observed is not None else self.verify_s[k] * self.scale()

    def observe(self, k: int, seconds: float, weight: float) -> None:
        old = self.observed_s[k]
        self.observed_s[k] = seconds if old is None else old + weight * (seconds - old)

    def tokens_per_second(self, alpha: float, k: int) -> float:
        return expected_tokens_per_step(alpha, k) / (k * self.draft_s * self.scale() + self.verify(k))


@dataclass
class GammaPolicy:
    max_gamma: int = 8
    alpha: float = 0.5  # the estimate before any step (updated in place)
    window: int = 64  # proposals the estimate remembers
    prior_weight: float = 4.0  # proposals the initial alpha counts for
    probe_every: int = 16
    context: int = 64  # context length at which costs are measured
    timing_weight: float = 0.125  # weight of the newest verification timing in its running average
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
        costs = self._costs_for(batch) or self.measure_costs(draft, target, batch)
        k = max(range(self.max_gamma + 1), key=lambda g: costs.tokens_per_second(self.alpha, g))
        if k == 0 and self._steps_without_proposal >= self.probe_every:
            return 1
        return k

    def _costs_for(self, batch: int) -> StepCosts | None:
        """The costs of `batch` rows: its own, or those of the nearest larger size (None: none known)."""
        larger = sorted(b for b in self.costs if b >= batch)
        return self.costs[larger[0]] if larger else None

    def observe_verify(self, batch: int, k: int, seconds: float) -> None:
        """Learn from a verification the engine ran: `seconds` for k proposals (k + 1 new tokens per
        row) over `batch` rows. A batch size without costs of its own starts from a copy of its stand-in's."""
        if batch not in self.costs:
            stand_in = self._costs_for(batch)
            if stand_in is None:
                return
            self.costs[batch] = StepCosts(stand_in.draft_s, list(stand_in.verify_s), list(stand_in.observed_s))
        self.costs[batch].observe(k, seconds, self.timing_weight)

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
