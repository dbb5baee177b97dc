"""Packed weights for passes, the rows kernel for one-token steps: each row count takes exactly one of the two
products, the layer and the lean step alike, and the engine's greedy output is unchanged."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from osd.spec.bf16_rows import MAX_ROWS, bf16_rows_product
from osd.spec.lean_llama import target_cache
from osd.spec.packed_linear import pack_weight, packed_product
from osd.spec.packed_rows import (
    PackedRowsLinear,
    packed_rows_available,
    packed_rows_product,
    prepare_packed_rows,
    use_packed_rows_linears,
)
from osd.spec.serving_choice import available_layouts, serving_copy
from tests.spec.references import assert_layout_keeps_greedy_output, retyped_copy
from tests.tiny_models import FAMILIES, tiny_model

pytestmark = pytest.mark.skipif(
    not packed_rows_available(), reason="needs oneDNN's bf16 packing and llvmlite (the rows kernel)"
)


@pytest.mark.parametrize("rows", [1, 2, MAX_ROWS, MAX_ROWS + 1])
@torch.no_grad()
def test_up_to_max_rows_take_the_kernel_and_more_rows_the_packed_weight(rows):
    torch.manual_seed(rows)
    x = torch.randn(rows, 96, dtype=torch.bfloat16)
    w = torch.randn(70, 96, dtype=torch.bfloat16)
    y = packed_rows_product(x, prepare_packed_rows(w))
    expected = bf16_rows_product(x, w) if rows <= MAX_ROWS else packed_product(x, pack_weight(w))
    assert torch.equal(y, expected)


@pytest.mark.parametrize("shape", [(1, 16), (1, 1, 16), (2, 3, 16), (4, 16), (3, 4, 16)])
@pytest.mark.parametrize("bias", [True, False])
@torch.no_grad()
def test_forward_is_the_kernels_up_to_max_rows_and_the_packed_layers_for_more(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(16, 48, bias=bias).to(torch.bfloat16)
    x = torch.randn(shape, dtype=torch.bfloat16)
    layer = retyped_copy(linear, PackedRowsLinear)
    y = layer(x)
    few_rows = x.numel() <= MAX_ROWS * 16
    assert (layer._packed is None) == few_rows  # the packed copy is made by the first pass over more rows
    flat = x.reshape(-1, 16)
    if few_rows:  # the kernel's product, then the bias
        expected = bf16_rows_product(flat, linear.weight) + (linear.bias if bias else 0)
    else:  # oneDNN adds the bias within the product
        expected = packed_product(flat, pack_weight(linear.weight), linear.bias)
    assert y.shape == (*shape[:-1], 48) and torch.equal(y, expected.reshape(y.shape))
    torch.testing.assert_close(y, linear(x), rtol=2**-7, atol=1e-2)


def test_a_single_row_with_gradients_takes_nn_linears_path():
    torch.manual_seed(0)
    layer = retyped_copy(nn.Linear(8, 5).to(torch.bfloat16), PackedRowsLinear)
    x = torch.randn(1, 8, dtype=torch.bfloat16, requires_grad=True)
    layer(x).sum().backward()
    assert layer._packed is None and layer.weight.grad is not None and x.grad is not None


def test_every_plain_linear_changes_once_and_the_choice_offers_the_layout():
    model = tiny_model("llama")
    plain = sum(type(m) is nn.Linear for m in model.modules())
    keys = set(model.state_dict())
    served = serving_copy(model, "packed_rows")
    assert "packed_rows" in available_layouts()
    assert sum(type(m) is PackedRowsLinear for m in served.modules()) == plain > 0
    assert set(served.state_dict()) == keys and use_packed_rows_linears(served) == 0
    assert all(type(m) is not PackedRowsLinear for m in model.modules())  # the caller's model is untouched


@pytest.mark.parametrize("family", FAMILIES)
def test_engine_greedy_output_is_unchanged(family):
    """For llama the lean step holds both forms of each weight, and the output is HF `generate`'s of the same target
    up to a bf16 tie (its one-token steps take the kernel)."""
    target = assert_layout_keeps_greedy_output(family, use_packed_rows_linears, hf_within_bf16_tie=True)
    if family == "llama":
        assert target_cache(target).lean.w.product == "packed_rows"
