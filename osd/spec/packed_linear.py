"""bf16 linear layers on the CPU with oneDNN-packed weights: the same products, a decode step about 1.6x faster.

`nn.Linear` in bf16 on the CPU hands oneDNN a plain weight, which it reorders into its blocked layout on
every call. Packed once (`torch.ops.mkldnn._reorder_linear_weight`, what inductor's CPU freezing does), the
weight is read as it lies: the demo target's single-token step took 29.7 ms plain and 17.7-18.3 ms packed
(AVX512-BF16 VM, torch 2.13, one thread; LOG section 40), its 4-token verification 37.2 and 19.2-19.3 ms,
with bit-identical logits. `PackedLinear` keeps its `weight` Parameter (state dict, training and in-place
updates unchanged) and packs a copy on first use, again whenever the weight changes (its version counter, as
an in-place refresh of a serving copy bumps it). Training (grad enabled), other dtypes and devices take
`nn.Linear`'s path.

Opt-in (`use_packed_linears`, `--packed_linears` in the engine's benchmarks and the main job): it speeds up
the target alone as much as speculative decoding, so apply it to the target-only baseline too when comparing.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

from osd.spec.weight_major import bf16_cpu_inference, retype_cpu_linears


def packing_available() -> bool:
    """Whether this torch build has oneDNN's linear-packing ops and this CPU oneDNN's bf16 kernels (AVX512-BF16,
    AMX), the kernels a plain bf16 `nn.Linear` uses too (elsewhere it takes another GEMM, which packing would
    not speed up alike)."""
    ops = torch.ops.mkldnn
    return (
        torch.backends.mkldnn.is_available()
        and all(
            hasattr(ops, op)
            for op in ("_reorder_linear_weight", "_linear_pointwise", "_is_mkldnn_bf16_supported")
        )
        and ops._is_mkldnn_bf16_supported()
    )


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """A bf16 CPU weight [out, in] in oneDNN's blocked layout (an opaque tensor, read by `packed_product`)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 1)


def packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [N, in] @ weight.T (+ bias) -> [N, out], the weight packed by `pack_weight`."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedLinear(nn.Linear):
    """`nn.Linear` whose bf16 CPU forward without gradients reads a oneDNN-packed copy of its weight."""

    _packed: tuple[int, int, torch.Tensor] | None = None  # (data_ptr, version, packed weight)

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packed weight out (oneDNN's opaque tensors have no storage to copy)."""
        return {k: v for k, v in super().__getstate__().items() if k != "_packed"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in] -> [..., out]
        w = self.weight
        if (
            not bf16_cpu_inference(x, w) or w.is_inference()
        ):  # inference tensors: no version counter to repack by
            return super().forward(x)
        key = (w.data_ptr(), w._version)
        if self._packed is None or self._packed[:2] != key:
            with torch.no_grad():
                self._packed = (*key, pack_weight(w))
        flat = x.reshape(-1, self.in_features)  # [N, in]
        y = packed_product(flat, self._packed[2], self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)


def use_packed_linears(model: nn.Module) -> int:
    """Make every plain `nn.Linear` of a CPU `model` a `PackedLinear` (in place; weights and state dict
    unchanged); return how many changed. Each forward decides: a float32 draft that trains keeps `nn.Linear`'s
    path, its bf16 serving copies (deep copies keep the class) read packed weights. A model on another device,
    or where `packing_available()` is False, is left as it is (0). Not for a float32 target: its layers would
    no longer be plain, and `use_weight_major_linears` would leave them as they are."""
    return retype_cpu_linears(model, PackedLinear, packing_available)


def check_packed_dtype(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A script's `--packed_linears` with a target `--dtype` other than bf16 is a usage error: a float32 target
    keeps its weight-major products instead."""
    if args.packed_linears and args.dtype != "bfloat16":
        parser.error(
            f"--packed_linears packs bf16 weights: it needs --dtype bfloat16, got --dtype {args.dtype}"
        )
