"""The bf16-rows kernel: bf16 products with float32 accumulation, as torch's, in one pass over the weights;
the engine's greedy output unchanged with it; training and other dtypes take nn.Linear's path."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from torch import nn

from osd.spec import bf16_rows
from osd.spec.bf16_rows import (
    BF16RowsLinear,
    bf16_rows_product,
    kernel_available,
    pack_tiles,
    use_bf16_rows_linears,
)
from tests.spec.references import (
    assert_layout_keeps_greedy_output,
    assert_same_linear_gradients,
    retyped_copy,
)
from tests.tiny_models import FAMILIES, tiny_model

pytestmark = pytest.mark.skipif(not kernel_available(), reason="llvmlite is not installed")


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 8, 9, 40])
@pytest.mark.parametrize(
    "out_in", [(70, 96), (32, 30)]
)  # padded outputs (not a multiple of 16); padded inputs
def test_product_is_the_float32_sum_rounded_once_to_bf16(rows, out_in):
    """Against float64 arithmetic on the same bf16 values: the kernel's float32 sum differs from the exact
    one by float32 rounding, so rounded to bf16 it is within one bf16 step of the exact sum's rounding. Every
    kernel (1..8 rows), longer inputs in blocks, shapes the tiles pad."""
    torch.manual_seed(rows)
    out_features, in_features = out_in
    x = torch.randn(rows, in_features, dtype=torch.bfloat16)
    w = torch.randn(out_features, in_features, dtype=torch.bfloat16)
    y = bf16_rows_product(x, w)
    assert torch.equal(bf16_rows_product(x, pack_tiles(w)), y)  # packed once or for the call: the same
    exact = x.double() @ w.double().T  # [rows, out]
    assert y.dtype == torch.bfloat16 and y.shape == (rows, out_features)
    torch.testing.assert_close(y.double(), exact, rtol=2**-7, atol=1e-6)
    same = (y == exact.to(torch.bfloat16)).float().mean().item()
    assert same > 0.95, same  # rounding the float32 sum rarely lands on another bf16 than the exact sum's


@pytest.mark.parametrize("rows", [1, 3, 8, 9])
@pytest.mark.parametrize("out_in", [(70, 96), (32, 30), (64, 64)])  # padded outputs, padded inputs, neither
def test_a_float32_input_gives_the_float32_sum_unrounded(rows, out_in):
    """A float32 input (a draft's states, `osd.spec.lean_llama.LeanLlama.state_dtype`) is multiplied as it is, by the
    bf16 weights widened, and the float32 sum comes back unrounded: within float32 rounding of float64
    arithmetic; the input is left as it was."""
    torch.manual_seed(rows)
    out_features, in_features = out_in
    x = torch.randn(rows, in_features)
    before = x.clone()
    w = torch.randn(out_features, in_features, dtype=torch.bfloat16)
    y = bf16_rows_product(x, pack_tiles(w))
    assert y.dtype == torch.float32 and y.shape == (rows, out_features)
    torch.testing.assert_close(y.double(), x.double() @ w.double().T, rtol=1e-5, atol=1e-5)
    assert not torch.equal(y, y.to(torch.bfloat16).float())  # not rounded to bf16 on the way
    assert torch.equal(x, before)


@pytest.mark.parametrize("shape", [(1, 16), (2, 3, 16), (7, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_forward_matches_torchs_bf16_linear(shape, bias):
    torch.manual_seed(0)
    linear = nn.Linear(16, 24, bias=bias).to(torch.bfloat16)
    x = torch.randn(shape, dtype=torch.bfloat16)
    with torch.no_grad():
        y, expected = retyped_copy(linear, BF16RowsLinear)(x), linear(x)
    assert y.shape == expected.shape and y.dtype == torch.bfloat16
    torch.testing.assert_close(y, expected, rtol=2**-7, atol=1e-2)


def test_training_and_float32_take_nn_linears_path():
    torch.manual_seed(0)
    linear = nn.Linear(8, 5)
    assert_same_linear_gradients(linear, retyped_copy(linear, BF16RowsLinear), rtol=0, atol=0)
    x = torch.randn(3, 8)
    with torch.no_grad():
        assert torch.equal(retyped_copy(linear, BF16RowsLinear)(x), linear(x))  # float32: nn.Linear itself


def test_every_plain_linear_changes_once_and_serving_copies_keep_the_class():
    model = tiny_model("llama")
    plain = sum(type(m) is nn.Linear for m in model.modules())
    keys = set(model.state_dict())
    assert plain > 0 and use_bf16_rows_linears(model) == plain
    assert set(model.state_dict()) == keys and use_bf16_rows_linears(model) == 0
    served = copy.deepcopy(model).to(torch.bfloat16)
    assert sum(type(m) is BF16RowsLinear for m in served.modules()) == plain


@torch.no_grad()
def test_the_packed_weight_follows_an_update_in_place_and_copies_pack_their_own():
    """A serving copy's weights change in place at every online update: the layer packs them again."""
    torch.manual_seed(0)
    layer = retyped_copy(nn.Linear(32, 48, bias=False).to(torch.bfloat16), BF16RowsLinear)
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    before = layer(x)
    layer.weight.mul_(2)  # exact in bf16: the products double
    assert torch.equal(layer(x), 2 * before)
    copied = copy.deepcopy(layer)
    assert "_tiles" not in copied.__dict__ and torch.equal(copied(x), 2 * before)


def test_threads_that_ask_for_the_kernels_at_once_compile_them_once(monkeypatch):
    """The online updater's worker and the server may take their first product at the same time."""
    monkeypatch.setattr(bf16_rows, "_compiled", {})
    monkeypatch.setattr(bf16_rows, "_keep_alive", [])
    start = threading.Barrier(4)

    def first_use() -> dict:
        start.wait()
        return bf16_rows._kernels()

    with ThreadPoolExecutor(4) as pool:
        kernels = list(pool.map(lambda _: first_use(), range(4)))
    assert len(bf16_rows._keep_alive) == 1 and all(k is kernels[0] for k in kernels)
    assert sorted(kernels[0]) == list(range(1, bf16_rows.MAX_ROWS + 1))


@pytest.mark.parametrize("lanes", [8, 16])
def test_kernels_of_fewer_rows_than_always_prefetch_are_compiled_both_ways(lanes):
    ir = bf16_rows.kernels_ir(lanes)
    threshold = bf16_rows.PREFETCH_MIN_ROWS[lanes]
    for rows in range(1, bf16_rows.MAX_ROWS + 1):
        prefetches = "@llvm.prefetch" in bf16_rows._kernel_ir(rows, lanes)
        assert prefetches == (rows >= threshold)
        assert (f"@bf16_rows_{rows}_prefetch(" in ir) == (rows < threshold)
    assert all("@llvm.prefetch" in bf16_rows._kernel_ir(rows, lanes, True) for rows in range(1, threshold))


@pytest.mark.parametrize("margin", [0.0, float("inf")])  # the prefetching kernels never or always serve
def test_the_kernel_the_race_picks_multiplies_alike(margin, monkeypatch):
    """Whichever of the two kernels serves a small group, the products are the same (the same sums in the same
    order); `prefetch_choice` reports each raced row count, its pick and both timings."""
    torch.manual_seed(0)
    x, w = torch.randn(2, 96), pack_tiles(torch.randn(70, 96, dtype=torch.bfloat16))
    expected = [bf16_rows_product(x[:rows], w) for rows in (1, 2)]
    monkeypatch.setattr(bf16_rows, "_compiled", {})
    monkeypatch.setattr(bf16_rows, "_prefetch_races", {})
    monkeypatch.setattr(bf16_rows, "CALIBRATION_SHAPE", (256, 64))
    monkeypatch.setattr(bf16_rows, "PREFETCH_MARGIN", margin)
    assert all(torch.equal(bf16_rows_product(x[:rows], w), expected[rows - 1]) for rows in (1, 2))
    choice = bf16_rows.prefetch_choice()
    raced = range(1, bf16_rows.PREFETCH_MIN_ROWS[bf16_rows.vector_floats()])
    assert sorted(choice) == [str(rows) for rows in raced]
    assert all(c["prefetch"] == (margin > 0) and min(c["ms"]) > 0 for c in choice.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_engine_greedy_output_is_unchanged(family):
    """Against HF `generate` of the same kernel target up to a bf16 tie: attention in bf16 rounds a pass over several
    tokens apart from one-token steps on CPUs without bf16 instructions."""
    assert_layout_keeps_greedy_output(family, use_bf16_rows_linears, hf_within_bf16_tie=True)


def test_held_to_avx2_the_kernel_is_compiled_without_avx512_and_the_limits_are_recorded():
    """`bash_scripts/hold_to_avx2.sh` holds the kernel's compiler to AVX2 as well: its code uses no 512-bit
    registers (LLVM given only a CPU name compiles for that CPU's own features), and `machine` records every
    limit."""
    code = (
        "import json\n"
        "from osd.spec.bf16_rows import assembly\n"
        "from osd.spec.timing import machine\n"
        "asm = assembly()\n"
        "print(json.dumps({'zmm': 'zmm' in asm, 'ymm': 'ymm' in asm, 'limits': machine()['isa_limits']}))\n"
    )
    script = Path(__file__).resolve().parents[2] / "bash_scripts" / "hold_to_avx2.sh"
    done = subprocess.run(
        ["bash", str(script), sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert not result["zmm"] and result["ymm"]  # AVX2's 256-bit registers, none of AVX-512's
    assert result["limits"] == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "NUMBA_CPU_NAME": "haswell",
        "NUMBA_CPU_FEATURES": "",
    }
