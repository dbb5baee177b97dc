"""bf16 linear layers that run steps and short passes by the rows kernel and prompts on oneDNN-packed weights.

On some CPUs with bf16 instructions (an AMD EPYC with AVX512-BF16 and no AMX) the bf16-rows kernel
(`osd.spec.bf16_rows`) steps one token, and verifies a few, faster than oneDNN's packed GEMM, which is faster
over a prompt. A target is then fastest with both: its prompt on the packed weights, its steps and
verifications (up to `MAX_ROWS` tokens) by the kernel. `PackedRowsLinear` is a `PackedLinear` (the same weight,
its packed copy made on first use) whose bf16 forward over up to `MAX_ROWS` rows runs the kernel; the lean step
holds both forms of each product (`PackedRows`). Opt-in (`use_packed_rows_linears`); `osd.spec.serving_choice`
measures when it pays.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from osd.spec.bf16_rows import (
    MAX_ROWS,
    Tiles,
    bf16_rows_linear,
    bf16_rows_product,
    cached_tiles,
    kernel_available,
    pack_tiles,
)
from osd.spec.packed_linear import PackedLinear, pack_weight, packed_product, packing_available
from osd.spec.weight_major import bf16_cpu_inference, retype_cpu_linears


def packed_rows_available() -> bool:
    """Whether both halves run here: oneDNN's bf16 packing and the kernel (llvmlite)."""
    return packing_available() and kernel_available()


class PackedRows(NamedTuple):
    """A weight prepared for the lean step: in the kernel's tiles, and packed for oneDNN."""

    rows: Tiles  # for the kernel (`osd.spec.bf16_rows.pack_tiles`)
    packed: torch.Tensor  # the same, in oneDNN's blocked layout


def prepare_packed_rows(weight: torch.Tensor) -> PackedRows:
    """A bf16 CPU weight [out, in] in both forms."""
    return PackedRows(pack_tiles(weight), pack_weight(weight))


def packed_rows_product(x: torch.Tensor, weight: PackedRows) -> torch.Tensor:
    """x [N, in] @ weight.T -> [N, out]: by the kernel for up to MAX_ROWS rows, on the packed weight for more."""
    if x.shape[0] <= MAX_ROWS:
        return bf16_rows_product(x, weight.rows)
    return packed_product(x, weight.packed)


class PackedRowsLinear(PackedLinear):
    """`PackedLinear` whose bf16 CPU forward without gradients over up to MAX_ROWS rows runs the rows kernel."""

    def __getstate__(self) -> dict:
        """Copies and pickles leave both packed forms out."""
        return {k: v for k, v in super().__getstate__().items() if k != "_tiles"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in] -> [..., out]
        few_rows = x.numel() <= MAX_ROWS * self.in_features and bf16_cpu_inference(x, self.weight)
        tiles = cached_tiles(self) if few_rows else None
        if tiles is None:
            return super().forward(x)
        return bf16_rows_linear(x, tiles, self.bias)


def use_packed_rows_linears(model: nn.Module) -> int:
    """Make every plain `nn.Linear` of a CPU `model` a `PackedRowsLinear` (in place; weights and state dict
    unchanged); return how many changed. A model on another device, or where `packed_rows_available()` is False,
    is left as it is (0)."""
    return retype_cpu_linears(model, PackedRowsLinear, packed_rows_available)
