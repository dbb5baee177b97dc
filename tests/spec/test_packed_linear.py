"""oneDNN-packed bf16 linear layers: the products of nn.Linear, repacked when the weight changes, and the
engine's greedy output unchanged."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from osd.spec.lean_llama import target_cache
from osd.spec.packed_linear import PackedLinear, packing_available, use_packed_linears
from tests.spec.references import (
    assert_layout_keeps_greedy_output,
    assert_same_linear_gradients,
    retyped_copy,
)
from tests.tiny_models import FAMILIES, tiny_model

pytestmark = pytest.mark.skipif(not packing_available(), reason="this torch build has no oneDNN packing ops")


@pytest.mark.parametrize("shape", [(1, 16), (1, 1, 16), (2, 3, 16), (4, 40, 16)])
@pytest.mark.parametrize("bias", [True, False])
@torch.no_grad()
def test_bf16_forward_equals_nn_linear(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(16, 48, bias=bias).to(torch.bfloat16)
    x = torch.randn(shape, dtype=torch.bfloat16)
    packed = retyped_copy(linear, PackedLinear)
    y = packed(x)
    assert packed._packed is not None  # the packed path ran
    assert y.shape == (*shape[:-1], 48) and y.dtype == torch.bfloat16
    torch.testing.assert_close(y, linear(x))


@torch.no_grad()
def test_an_in_place_weight_change_is_repacked():
    torch.manual_seed(0)
    linear = nn.Linear(16, 8).to(torch.bfloat16)
    packed = retyped_copy(linear, PackedLinear)
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    before = packed(x)
    new = nn.Linear(16, 8).to(torch.bfloat16)
    packed.load_state_dict(new.state_dict())  # as the online trainer refreshes its serving copy
    after = packed(x)
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, new(x))


@torch.no_grad()
def test_a_used_layer_deep_copies_and_its_copy_packs_its_own_weight():
    torch.manual_seed(0)
    packed = retyped_copy(nn.Linear(16, 8).to(torch.bfloat16), PackedLinear)
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    y = packed(x)
    other = copy.deepcopy(packed)  # as the online trainer copies a draft to serve it
    assert other._packed is None and torch.equal(other(x), y)
    other.weight.mul_(2)
    torch.testing.assert_close(other(x), nn.functional.linear(x, other.weight, other.bias))
    assert torch.equal(packed(x), y)  # the original keeps its own


def test_training_takes_nn_linears_path():
    """With gradients (and in float32) the layer is nn.Linear: same gradients, nothing packed."""
    torch.manual_seed(0)
    linear = nn.Linear(8, 5)
    assert_same_linear_gradients(linear, retyped_copy(linear, PackedLinear), rtol=0, atol=0)
    bf16 = retyped_copy(linear.to(torch.bfloat16), PackedLinear)
    bf16(torch.randn(2, 8, dtype=torch.bfloat16, requires_grad=True)).sum().backward()
    assert bf16._packed is None and bf16.weight.grad is not None


def test_every_plain_linear_of_a_cpu_model_changes_once():
    model = tiny_model("llama")
    plain = sum(type(m) is nn.Linear for m in model.modules())
    keys = set(model.state_dict())
    assert plain > 0
    assert use_packed_linears(model) == plain
    assert sum(type(m) is PackedLinear for m in model.modules()) == plain
    assert set(model.state_dict()) == keys
    assert use_packed_linears(model) == 0  # already changed: nothing left to change
    served = copy.deepcopy(model).to(torch.bfloat16)  # a serving copy keeps the class
    assert sum(type(m) is PackedLinear for m in served.modules()) == plain


@pytest.mark.parametrize("family", FAMILIES)
def test_engine_greedy_output_is_unchanged(family):
    """The packed products are the plain ones: for llama the output is HF `generate`'s of the untouched target."""
    target = assert_layout_keeps_greedy_output(family, use_packed_linears, hf_within_bf16_tie=False)
    if (
        family == "llama"
    ):  # the engine's lean step multiplies by packed copies of its own, as the layers would
        assert target_cache(target).lean.w.product == "packed"
    else:
        assert any(m._packed is not None for m in target.modules() if isinstance(m, PackedLinear))
