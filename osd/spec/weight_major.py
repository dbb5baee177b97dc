"""Float32 linear layers on the CPU computed as W @ x^T, so that verifying a few tokens costs about one step.

`nn.Linear` computes x @ W^T. For a few rows of x, MKL's float32 GEMM then repacks the weight on every
call, and a pass over 4 tokens costs about twice a pass over one. Computed as W @ x^T (the weight as
the left operand, x contiguous), the weight streams through once: the demo target's 211 weight
matrices took 77 / 121 / 123 / 142 ms for 1 / 2 / 4 / 8 rows as x @ W^T and 70 / 70 / 78 / 116 ms as
W @ x^T, and from 12 rows on the two are even (2-core AVX2 VM, torch 2.13, one thread; LOG section 35).
The products are the same up to float rounding.

Only float32 on the CPU is changed, and only passes of at most `MAX_ROWS` rows (a prefill keeps
`nn.Linear`'s GEMM): bf16 matmuls on a CPU without bf16 instructions are bound by the conversion, so
their cost grows with the rows either way, and on a GPU the library's choice stands.

Opt-in (`use_weight_major_linears`, applied by its owner to the target it serves; `SpeculativeDecoder` never
retypes a model it is given): it speeds up the target alone too, so apply it to the target-only baseline as
well when comparing (the engine's benchmarks and demos apply it to the one target both use). Not for a draft,
whose steps are one token and whose weights a trainer may be updating (its products would round otherwise
than in training).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 8  # rows (batch x tokens) up to which a pass takes the weight-major product


class WeightMajorLinear(nn.Linear):
    """`nn.Linear` whose float32 CPU forward over at most MAX_ROWS rows is (W @ x^T)^T."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in] -> [..., out]
        if x.dtype != torch.float32 or x.device.type != "cpu":
            return super().forward(x)
        y = weight_major_product(x.reshape(-1, self.in_features), self.weight)  # [N, out]
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)


def weight_major_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [N, in] @ weight.T ([out, in]) -> [N, out]: as (W @ x^T)^T for at most MAX_ROWS rows, else
    `F.linear`'s GEMM."""
    if x.shape[0] > MAX_ROWS:
        return F.linear(x, weight)
    # x contiguous: MKL's fast path needs x^T as a transposed view of a contiguous x
    return torch.mm(weight, x.contiguous().t()).t().contiguous()


def use_weight_major_linears(model: nn.Module) -> int:
    """Make every plain `nn.Linear` of a float32 CPU `model` a `WeightMajorLinear` (in place, on the caller's
    model; weights and state dict unchanged); return how many changed. Any other model is left as it is (0)."""
    first = next(model.parameters(), None)
    if first is None or first.dtype != torch.float32 or first.device.type != "cpu":
        return 0
    return retype_plain_linears(model, WeightMajorLinear)


def retype_cpu_linears(model: nn.Module, cls: type[nn.Linear], available: Callable[[], bool]) -> int:
    """`retype_plain_linears` for a layout of CPU kernels: a model without parameters, on another device, or where
    `available()` is False (the kernels do not run here) is left as it is (0)."""
    first = next(model.parameters(), None)
    if first is None or first.device.type != "cpu" or not available():
        return 0
    return retype_plain_linears(model, cls)


def retype_plain_linears(model: nn.Module, cls: type[nn.Linear]) -> int:
    """Give every plain `nn.Linear` of `model` the subclass `cls` (in place: same weights, same state dict, a
    forward of its own); return how many changed."""
    changed = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = cls
            changed += 1
    return changed


def bf16_cpu_inference(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether a bf16 CPU layout's own product serves `x @ weight.T` (`osd.spec.bf16_rows`, `osd.spec.packed_linear`):
    no autograd, both bf16, the weight on the CPU; otherwise `nn.Linear`'s forward does."""
    return (
        not torch.is_grad_enabled()
        and weight.dtype == x.dtype == torch.bfloat16
        and weight.device.type == "cpu"
    )
