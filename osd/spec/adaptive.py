"""Adaptive speculation length (`gamma="auto"`, `--max_propose_num auto`).

Before every step the policy picks the k in 0..max_gamma that maximises Eq. 2's expected tokens
per second,

    E[tokens](a, k) / (k * t_draft + t_verify(k)),    E[tokens](a, k) = (1 - a^(k + 1)) / (1 - a),

with a the running acceptance-rate estimate (the exact alpha of the last ~`window` counted proposals:
sums decayed by 1 - 1/window per proposal, starting from `alpha` worth `prior_weight` proposals;
a per-step moving average was too noisy at alpha ~0.2 and gamma 1, where a step is one 0/1
observation), t_draft the draft's single-token step and t_verify(k) the target's
forward over k + 1 tokens, both measured once per batch size on this machine
(`osd.spec.timing.target_pass_time`, as the engine takes it at each batch size; or given with `set_costs`).

Costs are noisy on a shared machine, and a wrong one kept the policy on a losing k. So:
- the measured t_verify(k) is smoothed (`osd.cost_model.PassCosts`: non-decreasing in k, so that one
  noisy repetition cannot make k + 1 tokens look cheaper than k, but not forced onto a line: passes over
  2-4 tokens may cost alike and the fifth token a jump; k = 0, a one-token step on other kernels, keeps
  its own measurement, capped at k = 1's);
- the engine reports the time of every step it runs (`observe_step`), drafting, verification and the work
  around them (accepting, committing, the caches, the draft catching up after steps without it); for a k
  run in the last `fresh_steps` steps, the step's cost is a running average of its timings (each moves it
  `timing_weight` of the way, from the estimate it had); any other k is k * t_draft + t_verify(k) scaled by
  how far the fresh ones came out from it;
- every so often the runner-up k runs instead of the best, so that the choice rests on fresh
  timings and, at k = 0 (plain target decoding, chosen when no k pays: a useless draft, a large
  batch), the alpha estimate still gets news. The first probe comes after `probe_every` steps; the
  interval doubles after every probe that finds the best k unchanged since the previous one (up
  to `max_probe_every`) and goes back to `probe_every` when the best k changes: a probe that keeps
  losing (a large batch) is paid ever more rarely.

A batch (`generate_batch`) runs until its last row is done, and its rows' acceptance differs widely (a code
prompt beside a sql one): tokens per step averaged over the rows overstate how fast the batch finishes. So
`choose` may take each active row's state (`RowState`), and then ranks k by the seconds until the batch's
slowest row is done, max_i remaining_i / E[tokens](a_i, k_i) steps at the batch's step cost, k_i =
min(k, remaining_i - 1). a_i is a pessimistic guess of row i's alpha: its posterior mean less z_B posterior
deviations, z_B the expected largest of B standard normals (0 for one row, about 1.4 for 8, 1.8 for 16). The
posterior is normal: the prior is the running estimate with the spread of alpha between rows (learnt from
finished rows, `observe_row`: their observed variance less binomial noise; `row_spread` before any), the
data the row's own proposals. So a fresh batch of 16 expects one row far below the mean, and as rows
propose, the slowest is known by name. For one row the ranking is the one above.

One policy may serve many `generate` and `generate_batch` calls (online serving keeps one): its estimate, the
spread and the costs carry over from call to call; a row's own alpha lives as long as its call. A fresh policy
knows only `alpha` and `row_spread`, so its first batch may settle on plain decoding where a draft would pay.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from transformers import PreTrainedModel

from osd.cost_model import PassCosts, expected_tokens_per_step
from osd.spec.timing import draft_step_time, step_time, target_pass_time

MIN_ROW_PROPOSALS = 8  # a finished row with fewer proposals does not count towards the spread between rows


@dataclass
class StepCosts:
    """Seconds of a step proposing k tokens, k = 0..max_gamma: as measured (a draft step, target forwards over
    k + 1 tokens), and as the engine's own steps turned out (`observe`)."""

    draft_s: float
    verify_s: list[float]  # [max_gamma + 1], measured
    fresh_steps: int = 64  # an observed timing counts for this many steps
    observed_s: list[float | None] = field(init=False)  # [max_gamma + 1], running averages of whole steps
    seen_at: list[int] = field(init=False)  # [max_gamma + 1], step count when last run
    count: int = field(init=False, default=0)
    passes: PassCosts = field(init=False)  # the measured verify_s, smoothed
    _scale: float = field(init=False, default=1.0)
    _scale_at: int = field(init=False, default=0)  # count at which _scale was computed

    def __post_init__(self) -> None:
        # the smoothing pools verifications (k >= 1) only: a one-token step runs other kernels (at a large batch
        # far cheaper than a pass over 2 tokens)
        self.passes = PassCosts.fit(self.verify_s)
        self.observed_s, self.seen_at = [None] * len(self.verify_s), [0] * len(self.verify_s)

    def verify(self, k: int) -> float:
        """t_verify(k) as measured, smoothed."""
        return self.passes.at(k)

    def _modelled(self, k: int) -> float:
        return k * self.draft_s + self.verify(k)

    def _fresh(self, k: int) -> bool:
        return self.observed_s[k] is not None and self.count - self.seen_at[k] < self.fresh_steps

    def scale(self) -> float:
        """How much slower than measured the engine's steps run now: the median ratio observed / modelled over
        the freshly run k (1 before any); computed once per observation."""
        if self._scale_at != self.count:
            ks = range(len(self.verify_s))
            ratios = [self.observed_s[k] / self._modelled(k) for k in ks if self._fresh(k)]
            self._scale, self._scale_at = (statistics.median(ratios) if ratios else 1.0), self.count
        return self._scale

    def step_seconds(self, k: int) -> float:
        """A step proposing k tokens: the running average of the engine's fresh timings, else k draft steps and
        a verification over k + 1 tokens as measured, scaled."""
        return self.observed_s[k] if self._fresh(k) else self._modelled(k) * self.scale()

    def observe(self, k: int, seconds: float, weight: float) -> None:
        """A step proposing k tokens took `seconds`: its running average moves `weight` of the way there,
        starting from the current estimate (one timing, however odd, moves it a little)."""
        old = self.step_seconds(k)
        self.count += 1
        self.observed_s[k] = old + weight * (seconds - old)
        self.seen_at[k] = self.count

    def tokens_per_second(self, alpha: float, k: int) -> float:
        return expected_tokens_per_step(alpha, k) / self.step_seconds(k)


class RowState(NamedTuple):
    """What a batch's row has left and has shown: tokens it may still generate, and the sum of exact alpha
    over its counted proposals so far (`SequenceRecord.alpha_sum`, `num_proposed`)."""

    remaining: int
    alpha_sum: float
    proposed: int


@dataclass
class GammaPolicy:
    max_gamma: int = 8
    alpha: float = 0.5  # the estimate before any step (updated in place)
    window: int = 64  # proposals the estimate remembers
    prior_weight: float = 4.0  # proposals the initial alpha counts for
    row_spread: float = 0.15  # standard deviation of alpha between rows, before any finished row
    row_window: int = 64  # finished rows the spread remembers
    probe_every: int = 16  # steps before the runner-up k runs, at first and after the best k changes
    max_probe_every: int = 128  # the longest interval between probes
    context: int = 64  # context length at which costs are measured
    timing_weight: float = 0.125  # weight of the newest step timing in its running average
    lean_draft: bool = True  # the draft's step timed as the engine's lean path (False: HF's forward)
    lean_target: bool = True  # the target's passes likewise
    costs: dict[int, StepCosts] = field(default_factory=dict)  # by batch size
    _interval: int = field(init=False)  # steps from one probe to the next
    _since_probe: int = field(init=False, default=0)
    _best_at_probe: int | None = field(init=False, default=None)  # best k at the last probe (or first)
    _accepted: float = field(init=False)  # decayed sum of exact alpha over proposals
    _proposed: float = field(init=False)  # decayed count of proposals
    _spread_sum: float = field(init=False)  # decayed sum of rows' excess squared deviations
    _spread_rows: float = field(init=False)  # decayed count of finished rows

    def __post_init__(self) -> None:
        if self.max_gamma < 1 or self.window < 1:
            raise ValueError(
                f"GammaPolicy needs max_gamma >= 1 and window >= 1, got {self.max_gamma}, {self.window}"
            )
        if self.row_spread < 0 or self.row_window < 1:
            raise ValueError(
                f"GammaPolicy needs row_spread >= 0 and row_window >= 1, got {self.row_spread}, {self.row_window}"
            )
        if not 0.0 <= self.timing_weight <= 1.0:
            raise ValueError(f"timing_weight must lie in [0, 1], got {self.timing_weight}")
        if not 0.0 <= self.alpha <= 1.0 or self.prior_weight <= 0:
            raise ValueError(
                f"need alpha in [0, 1] and prior_weight > 0, got {self.alpha}, {self.prior_weight}"
            )
        self._accepted, self._proposed = self.alpha * self.prior_weight, self.prior_weight
        self._spread_sum, self._spread_rows = self.row_spread**2 * self.prior_weight, self.prior_weight
        self._interval = self.probe_every

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
            # a batch of B > 1 prompts is padded to a common length: its attention runs with a mask
            timed = {"context": self.context, "reps": 5, "rounds": 2, "batch": batch, "padded": batch > 1}
            verify = [
                target_pass_time(target, length=k + 1, lean=self.lean_target, **timed)
                for k in range(self.max_gamma + 1)
            ]
            # the draft's step as the engine takes it: the lean Llama step where it applies, unless told otherwise
            draft_s = (draft_step_time if self.lean_draft else step_time)(draft, **timed)
            self.set_costs(batch, draft_s, verify)
        return self.costs[batch]

    def choose(
        self, draft: PreTrainedModel, target: PreTrainedModel, batch: int = 1, rows: Sequence[RowState] = ()
    ) -> int:
        """The number of draft tokens to propose at the next step, for `batch` active rows (`rows`: their
        states, to rank k by the time the slowest of them needs; none: by tokens per second). Costs are
        measured for the first batch size seen; as rows finish, the batch shrinks one row at a time,
        and the measured size nearest above it stands in (measuring each would cost seconds) until
        `observe_step` gives the smaller size costs of its own."""
        costs = self._costs_for(batch) or self.measure_costs(draft, target, batch)
        ranked = sorted(range(self.max_gamma + 1), key=lambda k: self._seconds_to_finish(costs, rows, k))
        if self._best_at_probe is None:  # the first probe is judged against the first choice
            self._best_at_probe = ranked[0]
        self._since_probe += 1
        if self._since_probe < self._interval:
            return ranked[0]
        unchanged = ranked[0] == self._best_at_probe
        self._interval = min(2 * self._interval, self.max_probe_every) if unchanged else self.probe_every
        self._since_probe, self._best_at_probe = 0, ranked[0]
        return ranked[1]

    def _seconds_to_finish(self, costs: StepCosts, rows: Sequence[RowState], k: int) -> float:
        """Seconds until every row is done proposing k a step (no rows: the seconds of one token)."""
        if not rows:
            return 1.0 / costs.tokens_per_second(self.alpha, k)
        z = _expected_max_normal(len(rows))
        steps = max(
            row.remaining
            / expected_tokens_per_step(self.row_alpha(row, z), min(k, max(row.remaining - 1, 0)))
            for row in rows
        )
        return steps * costs.step_seconds(k)

    def row_alpha(self, row: RowState, z: float = 0.0) -> float:
        """A row's alpha: its posterior mean less z posterior deviations (normal prior: the running estimate
        and the spread between rows; data: the row's proposals, with binomial noise), within [0, 1]."""
        prior_var, noise = self.spread**2, self._noise(row.proposed)
        if row.proposed == 0 or prior_var + noise == 0.0:
            mean, var = self.alpha, prior_var
        else:
            seen = row.alpha_sum / row.proposed
            mean = self.alpha + prior_var / (prior_var + noise) * (seen - self.alpha)
            var = prior_var * noise / (prior_var + noise)
        return min(max(mean - z * math.sqrt(var), 0.0), 1.0)

    @property
    def spread(self) -> float:
        """Standard deviation of alpha between rows: finished rows' variance about the estimate, less their
        binomial noise (`row_spread` worth `prior_weight` rows before them)."""
        return math.sqrt(max(self._spread_sum / self._spread_rows, 0.0))

    def observe_row(self, alpha_sum: float, proposed: int) -> None:
        """A row (a sequence of `generate`, a row of `generate_batch`) finished with these proposals; fewer than
        `MIN_ROW_PROPOSALS` say little of its alpha and are not counted."""
        if proposed < MIN_ROW_PROPOSALS:
            return
        excess = (alpha_sum / proposed - self.alpha) ** 2 - self._noise(proposed)
        decay = 1.0 - 1.0 / self.row_window
        self._spread_sum = decay * self._spread_sum + excess
        self._spread_rows = decay * self._spread_rows + 1.0

    def _noise(self, proposed: int) -> float:
        """Binomial variance of a row's observed alpha over `proposed` proposals, at the running estimate."""
        return self.alpha * (1.0 - self.alpha) / proposed if proposed else 0.0

    def _costs_for(self, batch: int) -> StepCosts | None:
        """The costs of `batch` rows: its own, or those of the nearest larger size (None: none known)."""
        larger = sorted(b for b in self.costs if b >= batch)
        return self.costs[larger[0]] if larger else None

    def observe_step(self, batch: int, k: int, seconds: float) -> None:
        """Learn from a step the engine ran: `seconds` for k proposals per row over `batch` rows. A batch size
        without costs of its own starts from a copy of its stand-in's."""
        if batch not in self.costs:
            stand_in = self._costs_for(batch)
            if stand_in is None:
                return
            self.costs[batch] = copy.deepcopy(stand_in)
        self.costs[batch].observe(k, seconds, self.timing_weight)

    def observe(self, alpha_sum: float, counted: int) -> None:
        """Update the estimate with a step's exact acceptance (sum over its `counted` proposals)."""
        if counted == 0:
            return
        decay = (1.0 - 1.0 / self.window) ** counted
        self._accepted = decay * self._accepted + alpha_sum
        self._proposed = decay * self._proposed + counted
        self.alpha = self._accepted / self._proposed


def _expected_max_normal(n: int) -> float:
    """The expected largest of n standard normal draws (Blom's approximation; 0 for n = 1)."""
    return statistics.NormalDist().inv_cdf((n - 0.375) / (n + 0.25))
