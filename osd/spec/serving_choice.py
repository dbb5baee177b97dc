"""Choose how to serve a target on this machine by measuring it: its dtype, its linear layers' layout, gamma.

Which configuration decodes fastest depends on the CPU: with bf16 instructions (AVX512-BF16, AMX) a bf16
target with oneDNN-packed weights (`osd.spec.packed_linear`) verifies a few tokens for about one step (where
the bf16-rows kernel steps one token faster still, as on an AMD EPYC without AMX, both:
`osd.spec.packed_rows`); without them torch's bf16 GEMM converts the weights once per row, and either the
bf16-rows kernel (`osd.spec.bf16_rows`) or a float32 target with weight-major products
(`osd.spec.weight_major`, twice the bytes per step) does better. `measure` times every candidate's prefill of
a prompt, its one-token step and its passes over 2 to gamma + 1 tokens, and the draft's step between target
passes (where its weights have been evicted from the CPU's caches, as in the engine), on the models
themselves. A query of N new tokens then costs, by Eq. 2's reasoning with every pass charged its measured
time,

    target alone:              prefill + N * step
    speculative, gamma g:      prefill + N / E[tokens](alpha, g) * (g * draft step + pass over g + 1 tokens)

and `choose` takes the **baseline**, the candidate whose query alone is fastest (the fastest target-alone
decoding on offer, which every speedup is measured against), and the **speculative configuration**, the
(candidate, gamma) whose query is fastest at an expected alpha (`Choice.gamma_policy`: adaptive gamma on that
candidate, starting from these measurements, for a draft whose alpha moves). Where the baseline's own layout
speculates within `SAME_LAYOUT_TOLERANCE` of the fastest, speculative decoding serves it too: layouts whose
passes run the same kernels (`packed` and `packed_rows`) differ by measurement noise alone, and one model then
serves both, with its costs in the baseline's own steps.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from transformers import PreTrainedModel

from osd.cost_model import PassCosts, query_time
from osd.spec.adaptive import GammaPolicy
from osd.spec.bf16_rows import CALIBRATION_SHAPE, prefetch_choice, use_bf16_rows_linears
from osd.spec.lean_llama import PRODUCTS
from osd.spec.packed_linear import use_packed_linears
from osd.spec.packed_rows import use_packed_rows_linears
from osd.spec.timing import chain_step_time, pass_times
from osd.spec.weight_major import use_weight_major_linears


class Layout(NamedTuple):
    dtype: str  # the target's dtype
    retype: Callable[[torch.nn.Module], int] | None  # makes a model's linear layers this layout's (in place)
    available: Callable[[], bool]  # on this machine and torch build


RETYPES = {
    "packed": use_packed_linears,
    "bf16_rows": use_bf16_rows_linears,
    "packed_rows": use_packed_rows_linears,
    "weight_major": use_weight_major_linears,
}
"""How a model's linear layers are retyped into each layout other than plain bf16. A layout is named as the lean
step's product of its layers (`osd.spec.lean_llama.PRODUCTS`), whose dtype and availability it shares."""
LAYOUTS = {
    "plain": Layout("bfloat16", None, lambda: True),
    **{
        name: Layout(str(PRODUCTS[name].dtype).removeprefix("torch."), retype, PRODUCTS[name].available)
        for name, retype in RETYPES.items()
    },
}
DTYPES = ("bfloat16", "float32")
AUTO = "auto"
SAME_LAYOUT_TOLERANCE = 0.05  # the baseline's layout serves speculative decoding if its query is this close


def available_layouts(dtype: str = AUTO, layout: str = AUTO, device: str = "cpu") -> list[str]:
    """The layouts this machine offers on `device`, narrowed to a forced target `dtype` and/or `layout` (AUTO:
    any); on a GPU "plain" only (the others are CPU kernels)."""
    names = [
        name
        for name, spec in LAYOUTS.items()
        if spec.available() and (device == "cpu" or spec.retype is None)
        and dtype in (AUTO, spec.dtype) and layout in (AUTO, name)
    ]  # fmt: skip
    if not names:
        raise ValueError(f"no serving layout for --dtype {dtype} --linears {layout} on {device} here")
    return names


def serving_copy(target: PreTrainedModel, layout: str) -> PreTrainedModel:
    """`target` (a CPU model, best in the dtype it is stored in) served in `layout`: a copy in the layout's
    dtype with its layers retyped; the caller's model is left as it is, and returned when it already is
    what "plain" asks for."""
    spec = LAYOUTS[layout]
    dtype = getattr(torch, spec.dtype)
    if spec.retype is None and target.dtype == dtype:
        return target
    model = copy.deepcopy(target).to(dtype).eval()
    if spec.retype is not None:
        spec.retype(model)
    return model


def retype_draft(draft: torch.nn.Module, layout: str) -> None:
    """A bf16 draft served beside a target in `layout`: its linears retyped alike (in place) where the layout is a
    bf16 one with a retype; beside a float32 or plain target it stays as it is."""
    spec = LAYOUTS[layout]
    if spec.dtype == "bfloat16" and spec.retype is not None:
        spec.retype(draft)


@dataclass
class Measured:
    """Seconds of a target's prefill and of its forwards over 1..len(pass_s) new tokens after it (pass_s[0]:
    the one-token step)."""

    layout: str
    prefill_s: float
    pass_s: list[float] = field(default_factory=list)

    def query_s(self, new_tokens: int) -> float:
        """A query of `new_tokens` tokens decoded by this target alone."""
        return self.prefill_s + new_tokens * self.pass_s[0]

    def verify_cost(self, gamma: int) -> float:
        """A pass over gamma + 1 tokens in one-token steps of this layout, the passes smoothed (`PassCosts`: one
        noisy pass cannot make more tokens look cheaper, and so sway the choice of gamma)."""
        return PassCosts.fit(self.pass_s).at(gamma) / self.pass_s[0]


def measure(
    models: dict[str, PreTrainedModel],
    draft: PreTrainedModel,
    max_gamma: int,
    context: int = 64,
    rounds: int = 2,
    reused: int = 0,
) -> tuple[dict[str, Measured], float]:
    """Time each layout's prefill of `context` tokens (the first `reused` held already, `pass_times`) and its
    passes over 1..max_gamma + 1 tokens after it, and `draft`'s step in chains of max_gamma between passes of the
    layout stepping fastest so far (`chain_step_time`), taking the best of `rounds` rounds that visit every layout
    and then the draft in turn (load that comes and goes then hits all alike; the first round pays each model's
    set-up). Returns the layouts' figures and the draft's step in seconds."""
    best = {name: [float("inf")] * (max_gamma + 2) for name in models}
    draft_s = float("inf")
    for _ in range(rounds):
        for name, model in models.items():
            times = pass_times(model, context, max_gamma + 1, reused=reused)
            best[name] = [min(a, b) for a, b in zip(best[name], times, strict=True)]
        fastest = min(best, key=lambda name: best[name][1])  # the draft's chain follows its passes
        draft_s = min(draft_s, chain_step_time(draft, models[fastest], context, max_gamma, reps=5, rounds=1))
    return {name: Measured(name, times[0], times[1:]) for name, times in best.items()}, draft_s


@dataclass
class Choice:
    """The baseline and the speculative configuration `choose` picked, with the figures it picked them by."""

    baseline: str  # the layout of the fastest target-alone decoding
    layout: str  # the layout speculative decoding serves the target in
    gamma: int
    alpha: float  # the expected alpha it was chosen at
    new_tokens: int  # per query, as it was chosen for
    draft_step_s: float
    measured: dict[str, Measured]

    def predicted_speedup(self) -> float:
        """The chosen configuration's query time over the baseline's, predicted at the chosen-at alpha."""
        return self.measured[self.baseline].query_s(self.new_tokens) / speculative_query_s(
            self.measured[self.layout], self.draft_step_s, self.alpha, self.gamma, self.new_tokens
        )

    @property
    def max_gamma(self) -> int:
        """The most proposals the chosen layout's measured passes cover (its longest pass less one token)."""
        return len(self.measured[self.layout].pass_s) - 1

    def gamma_policy(self) -> GammaPolicy:
        """Adaptive gamma (`osd.spec.adaptive`) for one sequence at a time on the chosen layout, up to `max_gamma`:
        its estimate starts at the chosen-at alpha, its costs at the draft step and passes measured here (over
        1..max_gamma + 1 tokens: k = 0..max_gamma proposals; its own step timings refine them as it serves)."""
        policy = GammaPolicy(max_gamma=self.max_gamma, alpha=self.alpha)
        policy.set_costs(1, self.draft_step_s, self.measured[self.layout].pass_s)
        return policy

    def summary(self) -> dict[str, object]:
        """The choice and its measurements, for a result file (milliseconds)."""
        return {
            "baseline": self.baseline, "layout": self.layout, "gamma": self.gamma, "alpha": self.alpha,
            "new_tokens": self.new_tokens, "draft_step_ms": self.draft_step_s * 1e3,
            "predicted_speedup": self.predicted_speedup(),
            "prefill_ms": {m.layout: m.prefill_s * 1e3 for m in self.measured.values()},
            "pass_ms": {m.layout: [t * 1e3 for t in m.pass_s] for m in self.measured.values()},
            "rows_kernel_prefetch": prefetch_choice(),
        }  # fmt: skip

    def lines(self) -> list[str]:
        """What was chosen and why, for a log."""
        longest = len(next(iter(self.measured.values())).pass_s)
        out = [f"{'layout':<13} {'dtype':<9} {'prefill ms':>10} {'step ms':>8}  passes over 2..{longest} tokens, in steps (smoothed)"]  # fmt: skip
        for m in self.measured.values():
            costs = " ".join(f"{m.verify_cost(g):.2f}" for g in range(1, len(m.pass_s)))
            out.append(
                f"{m.layout:<13} {LAYOUTS[m.layout].dtype:<9} {m.prefill_s * 1e3:10.1f} {m.pass_s[0] * 1e3:8.1f}  {costs}"
            )
        for rows, race in prefetch_choice().items():
            plain_ms, prefetching_ms = race["ms"]
            out.append(  # the kernel for a one-token step or a two-token pass, raced at its first use
                f"bf16-rows kernel over {rows} row(s): {'with' if race['prefetch'] else 'without'} a prefetch "
                f"({prefetching_ms:.2f} ms with, {plain_ms:.2f} without, over a {CALIBRATION_SHAPE[0]}x"
                f"{CALIBRATION_SHAPE[1]} weight)"
            )
        out.append(
            f"draft step {self.draft_step_s * 1e3:.2f} ms; target alone: {self.baseline} (the fastest query of "
            f"{self.new_tokens} tokens); speculative decoding: {self.layout}, gamma {self.gamma} (predicted at "
            f"alpha {self.alpha:.2f}: {self.predicted_speedup():.2f}x over the target alone)"
        )
        return out


def speculative_query_s(
    measured: Measured, draft_step_s: float, alpha: float, gamma: int, new_tokens: int
) -> float:
    """A query of `new_tokens` tokens by speculative decoding on `measured`'s target (`osd.cost_model.query_time`
    with the measured prefill, draft step and pass over gamma + 1 tokens), in seconds."""
    step = measured.pass_s[0]
    return step * query_time(
        alpha, gamma, draft_step_s / step, measured.verify_cost(gamma), new_tokens, measured.prefill_s / step
    )


def choose(
    measured: dict[str, Measured],
    draft_step_s: float,
    alpha: float,
    new_tokens: int,
    layouts: list[str] | None = None,
    gammas: list[int] | None = None,
) -> Choice:
    """The layout of all measured whose query of `new_tokens` tokens alone is fastest, and the (layout in
    `layouts`, gamma in `gammas`) whose speculative query is fastest at `alpha`, the baseline's layout where
    it is within `SAME_LAYOUT_TOLERANCE` of that (defaults: every measured layout, gamma 1..measured)."""
    baseline = min(measured, key=lambda name: measured[name].query_s(new_tokens))
    layouts = layouts or list(measured)
    gammas = gammas or list(range(1, len(measured[baseline].pass_s)))
    query_s = {
        (name, g): speculative_query_s(measured[name], draft_step_s, alpha, g, new_tokens)
        for name in layouts
        for g in gammas
    }
    layout, gamma = min(query_s, key=query_s.__getitem__)
    if baseline in layouts:
        own = min(((baseline, g) for g in gammas), key=query_s.__getitem__)
        if query_s[own] <= (1 + SAME_LAYOUT_TOLERANCE) * query_s[layout, gamma]:
            layout, gamma = own
    return Choice(baseline, layout, gamma, alpha, new_tokens, draft_step_s, measured)


def measure_and_choose(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    alpha: float,
    max_gamma: int,
    prompt_tokens: int,
    new_tokens: int,
    dtype: str = AUTO,
    layout: str = AUTO,
    gamma: int | None = None,
    device: str = "cpu",
    reused_tokens: int = 0,
) -> tuple[Choice, dict[str, PreTrainedModel]]:
    """Build every layout on offer on `device` from `target` (CPU, in its stored dtype), time them (prompts of
    `prompt_tokens`, the first `reused_tokens` held from the prompt before) and `draft` (as it will serve, on
    `device`), and choose for queries of `new_tokens`; a forced `dtype`, `layout` or `gamma` narrows the speculative
    choice only (the baseline is always the fastest of all). Returns the choice and the models it needs (its
    baseline and its layout)."""
    models = {name: serving_copy(target, name).to(device) for name in available_layouts(device=device)}
    measured, draft_s = measure(
        models, draft, max_gamma if gamma is None else gamma, prompt_tokens, reused=reused_tokens
    )
    choice = choose(
        measured, draft_s, alpha, new_tokens,
        available_layouts(dtype, layout, device), None if gamma is None else [gamma],
    )  # fmt: skip
    return choice, {name: models[name] for name in (choice.baseline, choice.layout)}
