"""bf16 linear layers on CPUs without bf16 instructions: a pass over a few tokens for about the cost of one.

On such a CPU (AVX2 without AVX512-BF16 or AMX) torch computes a bf16 `nn.Linear` with its own reduced-
precision GEMM, which converts every weight to float32 once per row of input: a target pass over 4 tokens
then costs 2.2-2.8 one-token steps, so verification eats what speculation saves. `BF16RowsLinear` runs a
small compiled kernel (numba; LLVM vectorises it for the CPU it runs on) that converts each weight row once,
in cache, and multiplies it with every input row: the weights stream through memory once per pass.

The products are those of a bf16 GEMM with float32 accumulation (bf16 inputs widened exactly, the float32
result rounded to bf16 once, as torch's kernels do), up to the order of the additions. Used only without
gradients, for bf16 CPU tensors (a prefill too: torch's GEMM is slower still for many rows); everything else
takes `nn.Linear`'s path.
Opt-in (`use_bf16_rows_linears`): it speeds up a one-token step as well, so apply it to the target-only
baseline too when comparing. `osd.spec.serving_choice` measures when it pays.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import torch
from torch import nn

from osd.spec.weight_major import bf16_cpu_inference, retype_cpu_linears

ROW_BLOCK = (
    4  # input rows multiplied per pair of widened weight rows (8 sums in registers, AVX2's 16 suffice)
)


def _rows_kernel(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """y[n, o] = sum_k bf16(w[o, k]) * x[n, k]: w uint16 [out, in] (bf16 bit patterns), x float32 [N, in],
    y float32 [N, out]. Weight rows are widened two at a time (into `pair`) and each input row is loaded once
    for both."""
    out_features, in_features = w.shape
    rows = x.shape[0]
    bits = np.zeros((2, in_features), np.uint32)
    pair = bits.view(np.float32)  # [2, in]
    for o in range(0, out_features, 2):
        two = o + 1 < out_features  # else pair[1] holds a stale row, whose sums are dropped
        for j in range(2 if two else 1):
            for k in range(in_features):
                bits[j, k] = (
                    np.uint32(w[o + j, k]) << 16
                )  # bf16 -> float32 is exact: the top half of its bits
        n = 0
        while n + ROW_BLOCK <= rows:
            a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = np.float32(0.0)
            for k in range(in_features):
                r, s = pair[0, k], pair[1, k]
                x0, x1, x2, x3 = x[n, k], x[n + 1, k], x[n + 2, k], x[n + 3, k]
                a0 += r * x0
                a1 += r * x1
                a2 += r * x2
                a3 += r * x3
                b0 += s * x0
                b1 += s * x1
                b2 += s * x2
                b3 += s * x3
            y[n, o], y[n + 1, o], y[n + 2, o], y[n + 3, o] = a0, a1, a2, a3
            if two:
                y[n, o + 1], y[n + 1, o + 1], y[n + 2, o + 1], y[n + 3, o + 1] = b0, b1, b2, b3
            n += ROW_BLOCK
        while n < rows:
            a0 = b0 = np.float32(0.0)
            for k in range(in_features):
                a0 += pair[0, k] * x[n, k]
                b0 += pair[1, k] * x[n, k]
            y[n, o] = a0
            if two:
                y[n, o + 1] = b0
            n += 1


@cache
def _kernel():
    """The jitted kernel; None without numba (an optional speed-up: the layers keep nn.Linear's path). Imported
    on first use, not with this module: a process that forks vLLM's workers must not hold llvmlite's modules, whose
    attributes break vLLM's start-up scan of sys.modules (its Triton kernel overrides)."""
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(fastmath=True, nogil=True, cache=True)(_rows_kernel)


def kernel_available() -> bool:
    """Whether numba imports here (the kernel compiles on first use, about a second, cached on disk after)."""
    return _kernel() is not None


def bf16_rows_product(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [N, in] bf16 @ weight.T ([out, in] bf16, contiguous) -> [N, out] bf16, by the kernel."""
    x32 = x.to(torch.float32).contiguous()  # [N, in], exact
    y = torch.empty(x.shape[0], weight.shape[0], dtype=torch.float32)  # [N, out]
    _kernel()(weight.detach().view(torch.int16).numpy().view(np.uint16), x32.numpy(), y.numpy())
    return y.to(torch.bfloat16)


def bf16_rows_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., in] bf16 @ weight.T (+ bias) -> [..., out] bf16, by the kernel."""
    y = bf16_rows_product(x.reshape(-1, weight.shape[1]), weight)  # [N, out]
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


class BF16RowsLinear(nn.Linear):
    """`nn.Linear` whose bf16 CPU forward without gradients runs the kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in] -> [..., out]
        w = self.weight
        if not bf16_cpu_inference(x, w) or not w.is_contiguous():
            return super().forward(x)
        return bf16_rows_linear(x, w, self.bias)


def use_bf16_rows_linears(model: nn.Module) -> int:
    """Make every plain `nn.Linear` of a CPU `model` a `BF16RowsLinear` (in place; weights and state dict
    unchanged); return how many changed. Each forward decides: a float32 draft that trains keeps `nn.Linear`'s
    path, its bf16 serving copies (deep copies keep the class) run the kernel. A model on another device, or
    no numba, is left as it is (0)."""
    return retype_cpu_linears(model, BF16RowsLinear, kernel_available)
