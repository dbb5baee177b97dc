"""Weight-major float32 linear layers: the same products as nn.Linear, the engine's output unchanged with or
without them, and the engine never retypes (or otherwise changes) a target it is given."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from osd.spec.decoder import SpeculativeDecoder
from osd.spec.weight_major import MAX_ROWS, WeightMajorLinear, use_weight_major_linears
from tests.spec.references import NOISE, assert_same_linear_gradients, hf_greedy, random_prompt, retyped_copy
from tests.tiny_models import FAMILIES, draft_from_target, tiny_model


@pytest.mark.parametrize(
    "shape", [(1, 8), (1, 1, 8), (2, 3, 8), (MAX_ROWS, 8), (MAX_ROWS + 1, 8), (3, 40, 8)]
)
@pytest.mark.parametrize("bias", [True, False])
def test_forward_equals_nn_linear(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(8, 24, bias=bias)
    x = torch.randn(shape)
    y = retyped_copy(linear, WeightMajorLinear)(x)
    assert y.shape == (*shape[:-1], 24) and y.is_contiguous()
    torch.testing.assert_close(y, linear(x), rtol=1e-5, atol=1e-6)


def test_non_contiguous_input_gives_the_same_product():
    torch.manual_seed(0)
    linear = nn.Linear(8, 5)
    # [4, 8] with transposed strides, as an elementwise op on a transposed output gives
    x = torch.randn(8, 4).t()
    torch.testing.assert_close(retyped_copy(linear, WeightMajorLinear)(x), linear(x), rtol=1e-5, atol=1e-6)


def test_gradients_equal_nn_linear():
    torch.manual_seed(0)
    linear = nn.Linear(8, 5)
    assert_same_linear_gradients(linear, retyped_copy(linear, WeightMajorLinear))


def test_only_float32_cpu_models_change():
    model = tiny_model("llama")
    plain = sum(type(m) is nn.Linear for m in model.modules())
    keys = set(model.state_dict())
    assert plain > 0
    assert use_weight_major_linears(copy.deepcopy(model).to(torch.bfloat16)) == 0
    assert use_weight_major_linears(model) == plain
    assert sum(type(m) is WeightMajorLinear for m in model.modules()) == plain
    assert set(model.state_dict()) == keys
    assert use_weight_major_linears(model) == 0  # already changed: nothing left to change


@pytest.mark.parametrize("weight_major", [False, True])
@pytest.mark.parametrize("family", FAMILIES)
def test_engine_greedy_output_equals_the_unchanged_targets_generate(family, weight_major):
    """With or without the opt-in weight-major layout, the engine's greedy output equals HF `generate` of an
    untouched copy of the target (an independent reference)."""
    target = tiny_model(family, layers=3)
    reference = copy.deepcopy(target)
    if weight_major:
        use_weight_major_linears(target)
        if any(type(m) is nn.Linear for m in reference.modules()):
            assert any(type(m) is WeightMajorLinear for m in target.modules())
    decoder = SpeculativeDecoder(draft_from_target(target, NOISE[family]), target, gamma=3)
    alphas = []
    for seed in range(3):
        prompt = random_prompt(seed=seed)
        out = decoder.generate(prompt, max_new_tokens=40)
        torch.testing.assert_close(out.generated_ids, hf_greedy(reference, prompt, 40), rtol=0, atol=0)
        alphas.append(out.alpha)
    assert max(alphas) > 0.0 and min(alphas) < 1.0, alphas  # both the accept and the reject path ran


@pytest.mark.parametrize("family", FAMILIES)
def test_the_engine_leaves_its_callers_target_as_it_was(family):
    """Constructing a decoder and generating (one sequence, a batch) changes no module class and no weight of
    the target it was given (it once made a float32 CPU target weight-major in place, so that a target-only
    baseline timed afterwards ran the retyped model: issue 45). The target is float32 on the CPU, where that
    retype applied: the check would fail on it."""
    target = tiny_model(family, layers=2)
    assert next(target.parameters()).dtype == torch.float32 and any(
        type(m) is nn.Linear for m in target.modules()
    )
    classes = [(name, type(m)) for name, m in target.named_modules()]
    weights = {k: v.clone() for k, v in target.state_dict().items()}
    decoder = SpeculativeDecoder(draft_from_target(target, NOISE[family]), target, gamma=3)
    decoder.generate(random_prompt(seed=0), max_new_tokens=12)
    decoder.generate_batch(torch.cat([random_prompt(seed=1), random_prompt(seed=2)]), max_new_tokens=12)
    assert [(name, type(m)) for name, m in target.named_modules()] == classes
    state = target.state_dict()
    assert state.keys() == weights.keys() and all(torch.equal(state[k], w) for k, w in weights.items())
