"""bf16 linear layers on CPUs without bf16 instructions: a pass over a few tokens for little more than one step.

On such a CPU (AVX2 without AVX512-BF16 or AMX) torch computes a bf16 `nn.Linear` with its own reduced-
precision GEMM, which converts every weight to float32 once per row of input: a target pass over 4 tokens
then costs 2.2-2.8 one-token steps, so verification eats what speculation saves. This module's kernel, written
in LLVM IR and compiled here for this CPU by llvmlite, reads each bf16 weight once per pass and multiplies it
with every input row while it is in registers:

- the weight is packed once (`pack_tiles`) into tiles of 16 outputs (32 where AVX-512 compiles: `tile_outputs`),
  each stored k-major ([in, tile]), so that a tile streams through memory in order;
- a vector load of a tile's bf16 weights at one k (32-bit words, two weights each) gives two float32 vectors
  without a conversion: a word shifted left by 16 bits is its even output's weight, the word with its low half
  cleared is its odd output's;
- each vector is multiplied with every input row's element, broadcast, into one accumulator per row and half
  (outer products: no horizontal sums), up to 4 rows at a time, the tile then serving the next 4 rows from cache;
- a group of 2-4 rows (3-4 with AVX-512) prefetches the weights 16 KiB ahead into L2 (not L1, which the lines in
  use need): its multiplications then run while the weights stream in, instead of after. Whether a smaller group
  (a one-token step, a pass over two) gains by prefetching too depends on the CPU: on an AMD EPYC it costs more
  than it hides, on an Intel Xeon it hides much of the memory's latency. Both kernels are compiled for those rows,
  and the one that streams a large weight faster here serves (`prefetch_choice`).

The products are those of a bf16 GEMM with float32 accumulation (bf16 inputs widened exactly, the float32 result
rounded to bf16 once, as torch's kernels do), up to the order of the additions; a float32 input (a draft's
states in `osd.spec.lean_llama`) is read as it is and its sums come back unrounded. Used only without gradients,
for bf16 CPU weights (a prefill too); everything else takes `nn.Linear`'s path. The code is compiled for the CPU
that `NUMBA_CPU_NAME` and `NUMBA_CPU_FEATURES` name where set (numba's variables, which
`bash_scripts/hold_to_avx2.sh` sets), else for this CPU. Opt-in (`use_bf16_rows_linears`): it speeds up a
one-token step as well, so apply it to the target-only baseline too when comparing. `osd.spec.serving_choice`
measures when it pays.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import NamedTuple

import torch
from torch import nn

from osd.spec.weight_major import bf16_cpu_inference, retype_cpu_linears

MAX_ROWS = 8  # input rows a kernel call multiplies (in groups of up to GROUP_ROWS); longer inputs take blocks
GROUP_ROWS = 4  # rows a tile's weights are multiplied with at once: 8 accumulators of AVX2's 16 registers
# steps along `in` a loop iteration takes, by group rows: 8-12 accumulators, each its own chain of FMAs, so that
# two FMA ports with a 4-cycle latency always have 8 to issue (3 rows at 1 step: 6 chains, the loop latency-bound)
UNROLL = {1: 4, 2: 2, 3: 2, 4: 1}
K_MULTIPLE = 4  # `in` is padded to this (the largest unroll)
PREFETCH_WORDS = 4096  # how far ahead a group prefetches the weights into L2 (32-bit words: 16 KiB)
# the fewest rows of a group that always prefetches, by vector lanes: on an AMD EPYC a one-row group is bound by
# its loads, and with AVX-512 a two-row group too: a prefetch there costs more than it hides (not on an Intel Xeon).
# Kernels of fewer rows are compiled both ways and raced on a weight of CALIBRATION_SHAPE (`_race`).
PREFETCH_MIN_ROWS = {8: 2, 16: 3}
CALIBRATION_SHAPE = (32768, 1024)  # [out, in] bf16, 64 MiB: streamed from memory, as a target's weights are
CALIBRATION_ROUNDS = 5  # calls of each kernel, alternated; the fastest of each counts
PREFETCH_MARGIN = 0.97  # the prefetching kernel serves where its fastest call takes at most this share


class Tiles(NamedTuple):
    """A bf16 weight [out, in] packed for the kernel (`pack_tiles`)."""

    data: torch.Tensor  # [out_p / tile, in_p, tile] bf16, contiguous; zero-padded (`tile_outputs`)
    out_features: int
    in_features: int


def pack_tiles(weight: torch.Tensor) -> Tiles:
    """A bf16 CPU weight [out, in] as the kernel reads it: `out` padded to a multiple of the tile's outputs, `in`
    to one of K_MULTIPLE, with zeros (they add nothing to a sum)."""
    out_features, in_features = weight.shape
    tile = tile_outputs()
    out_p, in_p = -(-out_features // tile) * tile, -(-in_features // K_MULTIPLE) * K_MULTIPLE
    padded = torch.zeros(out_p, in_p, dtype=torch.bfloat16)
    padded[:out_features, :in_features] = weight.detach()
    data = padded.view(out_p // tile, tile, in_p).transpose(1, 2).contiguous()  # [out_p / tile, in_p, tile]
    return Tiles(data, out_features, in_features)


def bf16_rows_product(x: torch.Tensor, weight: torch.Tensor | Tiles) -> torch.Tensor:
    """x [N, in] bf16 or float32 @ weight.T -> [N, out] in x's dtype, by the kernel (float32: its sums as they
    are, not rounded to bf16); `weight` as `pack_tiles` gives it (a plain [out, in] weight is packed for this
    call)."""
    tiles = weight if isinstance(weight, Tiles) else pack_tiles(weight)
    out_p, in_p = tiles.data.shape[0] * tiles.data.shape[2], tiles.data.shape[1]
    rows = x.shape[0]
    if x.dtype == torch.float32 and in_p == tiles.in_features and x.is_contiguous():
        x32 = x  # read in place
    else:
        x32 = torch.zeros(rows, in_p) if in_p != tiles.in_features else torch.empty(rows, in_p)  # [N, in_p]
        x32[:, : tiles.in_features] = x
    y = torch.empty(rows, out_p)  # [N, out_p] float32
    kernels, w, x_row0, y_row0 = _kernels(), tiles.data.data_ptr(), x32.data_ptr(), y.data_ptr()
    for start in range(0, rows, MAX_ROWS):  # pointers to the block's first rows (4 bytes a float32)
        block = min(MAX_ROWS, rows - start)
        kernels[block](w, x_row0 + 4 * start * in_p, y_row0 + 4 * start * out_p, out_p, in_p, in_p, out_p)
    y = y[:, : tiles.out_features] if out_p != tiles.out_features else y
    return y.to(x.dtype)


def bf16_rows_linear(
    x: torch.Tensor, weight: torch.Tensor | Tiles, bias: torch.Tensor | None
) -> torch.Tensor:
    """x [..., in] bf16 @ weight.T (+ bias) -> [..., out] bf16, by the kernel."""
    in_features = weight.in_features if isinstance(weight, Tiles) else weight.shape[1]
    y = bf16_rows_product(x.reshape(-1, in_features), weight)  # [N, out]
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], y.shape[-1])


def cached_tiles(layer: nn.Linear) -> Tiles | None:
    """`layer`'s weight packed (`pack_tiles`), kept on the layer while the weight is unchanged; None for an
    inference tensor (no version counter to repack by)."""
    w = layer.weight
    if w.is_inference():
        return None
    key = (w.data_ptr(), w._version)
    cached = getattr(layer, "_tiles", None)
    if cached is None or cached[:2] != key:
        with torch.no_grad():
            cached = layer._tiles = (*key, pack_tiles(w))
    return cached[2]


class BF16RowsLinear(nn.Linear):
    """`nn.Linear` whose bf16 CPU forward without gradients runs the kernel (on its weight, packed on first use)."""

    def __getstate__(self) -> dict:
        """Copies and pickles leave the packed weight out (a copy packs its own)."""
        return {k: v for k, v in super().__getstate__().items() if k != "_tiles"}

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [..., in] -> [..., out]
        tiles = cached_tiles(self) if bf16_cpu_inference(x, self.weight) else None
        if tiles is None:
            return super().forward(x)
        return bf16_rows_linear(x, tiles, self.bias)


def use_bf16_rows_linears(model: nn.Module) -> int:
    """Make every plain `nn.Linear` of a CPU `model` a `BF16RowsLinear` (in place; weights and state dict
    unchanged); return how many changed. Each forward decides: a float32 draft that trains keeps `nn.Linear`'s
    path, its bf16 serving copies (deep copies keep the class) run the kernel. A model on another device, or
    no llvmlite, is left as it is (0)."""
    return retype_cpu_linears(model, BF16RowsLinear, kernel_available)


def kernel_available() -> bool:
    """Whether llvmlite is installed here (looked up, not imported: see `_kernels`; the kernels compile on first
    use, in about a second)."""
    return importlib.util.find_spec("llvmlite") is not None


# ---- the kernel: LLVM IR, one function per number of input rows (1..MAX_ROWS) ------------------------------

Kernel = Callable[
    [int, int, int, int, int, int, int], None
]  # (tiles, x, y, out_p, in_p, ldx, ldy): pointers, sizes


def _kernels() -> dict[int, Kernel]:
    """{rows: the compiled kernel for that many input rows}. Imported and compiled on first use, not with this
    module (a process that forks vLLM's workers must not hold llvmlite's modules, whose attributes break vLLM's
    start-up scan of sys.modules: its Triton kernel overrides), once even when threads ask at the same time (an
    online update's worker and the server)."""
    if not _compiled:
        with _compile_lock:
            if not _compiled:
                _compiled.update(_compile())
    return _compiled


_compiled: dict[int, Kernel] = {}
_compile_lock = threading.Lock()
_keep_alive: list = []


class Race(NamedTuple):
    """A small group's two kernels raced at compile time (`_race`)."""

    plain_s: float  # the fastest call without a prefetch
    prefetching_s: float  # ... and with one
    prefetch: bool  # whether the prefetching kernel serves


_prefetch_races: dict[int, Race] = {}  # by rows


def _compile() -> dict[int, Kernel]:
    """The kernels for 1..MAX_ROWS rows; for rows below `PREFETCH_MIN_ROWS`, the faster of the two here."""
    import llvmlite.binding as llvm

    module, machine = _optimized_module()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _keep_alive.append(engine)  # the execution engine owns the compiled code
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, *[ctypes.c_int64] * 4)

    def kernel(name: str) -> Kernel:
        return signature(engine.get_function_address(name))

    kernels = {n: kernel(f"bf16_rows_{n}") for n in range(1, MAX_ROWS + 1)}
    for rows in range(1, PREFETCH_MIN_ROWS[vector_floats()]):
        prefetching = kernel(f"bf16_rows_{rows}_prefetch")
        race = _prefetch_races[rows] = _race(kernels[rows], prefetching, rows)
        if race.prefetch:
            kernels[rows] = prefetching
    return kernels


def _race(plain: Kernel, prefetching: Kernel, rows: int) -> Race:
    """The fastest of CALIBRATION_ROUNDS calls of each kernel (alternated) over `rows` rows and a weight of
    CALIBRATION_SHAPE, in seconds, and which serves: the prefetching one where its call takes PREFETCH_MARGIN or less
    of the other's."""
    out_p, in_p = CALIBRATION_SHAPE
    w = torch.zeros(out_p * in_p, dtype=torch.bfloat16)  # the tiles' layout; zeros time as any other values
    x, y = torch.ones(rows, in_p), torch.empty(rows, out_p)
    best = [float("inf"), float("inf")]
    for _ in range(CALIBRATION_ROUNDS):
        for i, kernel in enumerate((plain, prefetching)):
            start = time.perf_counter()
            kernel(w.data_ptr(), x.data_ptr(), y.data_ptr(), out_p, in_p, in_p, out_p)
            best[i] = min(best[i], time.perf_counter() - start)
    return Race(best[0], best[1], prefetch=best[1] <= PREFETCH_MARGIN * best[0])


def prefetch_choice() -> dict[str, dict[str, object]]:
    """For each row count whose kernel was raced in this process (none before the kernels' first use): whether the
    prefetching kernel serves, and both kernels' fastest call over the calibration weight (ms), for result files."""
    return {
        str(rows): {
            "prefetch": race.prefetch,
            "ms": [round(race.plain_s * 1e3, 3), round(race.prefetching_s * 1e3, 3)],
        }
        for rows, race in sorted(_prefetch_races.items())
    }


def _cpu() -> tuple[str | None, str]:
    """(the CPU name, its features) the kernels compile for: NUMBA_CPU_NAME and NUMBA_CPU_FEATURES where set
    (numba's rule: a name alone means that CPU's own default features), else this CPU's."""
    import llvmlite.binding as llvm

    name = os.environ.get("NUMBA_CPU_NAME")
    return name, os.environ.get("NUMBA_CPU_FEATURES", "" if name else llvm.get_host_cpu_features().flatten())


@cache
def vector_floats() -> int:
    """float32 lanes of the kernels' vectors: 16 where the features they compile for include AVX-512, else 8
    (AVX2; also for a CPU named without features, whose own are not looked up)."""
    return 16 if "+avx512f" in _cpu()[1].split(",") else 8


def tile_outputs() -> int:
    """Outputs a tile: one load of bf16 weights gives two float32 vectors (even and odd outputs)."""
    return 2 * vector_floats()


def _optimized_module():  # noqa: ANN202 (llvmlite objects, imported on first use)
    """(the kernels' module optimised, the target machine) for `_cpu()`."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    name, features = _cpu()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=name or llvm.get_host_cpu_name(), features=features, opt=3, jit=True
    )
    module = llvm.parse_assembly(kernels_ir(vector_floats()))
    module.verify()
    passes = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(3))
    passes.getModulePassManager().run(module, passes)
    return module, machine


def assembly() -> str:
    """The kernels' machine code as compiled here (e.g. to check which registers it uses)."""
    module, machine = _optimized_module()
    return machine.emit_assembly(module)


def row_groups(rows: int) -> list[int]:
    """How a kernel call splits its input rows into groups that share a tile's loads."""
    return [GROUP_ROWS] * (rows // GROUP_ROWS) + ([rows % GROUP_ROWS] if rows % GROUP_ROWS else [])


def kernels_ir(lanes: int) -> str:
    """The LLVM IR of the kernels `bf16_rows_1` .. `bf16_rows_{MAX_ROWS}`, in vectors of `lanes` float32, and
    `bf16_rows_{n}_prefetch` for n below `PREFETCH_MIN_ROWS`: the same with a prefetching group."""
    declarations = [
        f"declare <{lanes} x float> @llvm.fma.v{lanes}f32(<{lanes} x float>, <{lanes} x float>, <{lanes} x float>)",
        "declare void @llvm.prefetch.p0i8(i8*, i32, i32, i32)",
    ]
    kernels = [_kernel_ir(rows, lanes) for rows in range(1, MAX_ROWS + 1)]
    kernels += [_kernel_ir(rows, lanes, prefetch=True) for rows in range(1, PREFETCH_MIN_ROWS[lanes])]
    return "\n".join(declarations + kernels)


def _kernel_ir(rows: int, lanes: int, prefetch: bool = False) -> str:
    """y[n, o] = sum_k bf16(w)[o, k] x[n, k] for n < rows: w the tiles (i32 words), x float32 [rows, in_p] (row
    stride ldx), y float32 [rows, out_p] (row stride ldy). For each tile: the row groups, one k loop each; the
    first group prefetches where it has `PREFETCH_MIN_ROWS` rows, or where `prefetch` (`_prefetch` in the name)."""
    name = f"bf16_rows_{rows}" + ("_prefetch" if prefetch else "")
    lines = [
        f"define void @{name}(i32* noalias %w, float* noalias %x, float* noalias %y, i64 %O, i64 %K,"
        " i64 %ldx, i64 %ldy) {",
        "entry:",
        *[f"  %xrow{n} = mul i64 %ldx, {n}" for n in range(rows)],
        *[f"  %yrow{n} = mul i64 %ldy, {n}" for n in range(rows)],
        "  br label %tile",
        "tile:",
        "  %o = phi i64 [0, %entry], [%o_next, %tile_end]",
        "  %tile_elements = mul i64 %o, %K",  # the tile at output o starts at o * K bf16, o * K / 2 words
        "  %tile_base = lshr i64 %tile_elements, 1",
    ]
    previous, row0 = "tile", 0
    for g, group in enumerate(row_groups(rows)):
        first_prefetches = prefetch or group >= PREFETCH_MIN_ROWS[lanes]
        lines += _group_ir(f"g{g}", previous, row0, group, lanes, prefetch=g == 0 and first_prefetches)
        previous, row0 = f"g{g}_end", row0 + group
    lines += [
        "  br label %tile_end",
        "tile_end:",
        f"  %o_next = add i64 %o, {2 * lanes}",
        "  %more = icmp ult i64 %o_next, %O",
        "  br i1 %more, label %tile, label %exit",
        "exit:",
        "  ret void",
        "}",
    ]
    return "\n".join(lines)


def _group_ir(tag: str, previous: str, row0: int, group: int, lanes: int, prefetch: bool) -> list[str]:
    """The k loop of one row group over the tile at %o, then its stores: blocks {tag}_loop, {tag}_end."""
    unroll = UNROLL[group]
    f, i32, wide = f"<{lanes} x float>", f"<{lanes} x i32>", f"<{2 * lanes} x float>"
    splat16 = ", ".join(["i32 16"] * lanes)
    high = ", ".join(["i32 -65536"] * lanes)  # 0xFFFF0000
    interleave = ", ".join(f"i32 {j}" for i in range(lanes) for j in (i, i + lanes))  # even, odd -> outputs
    sums = [(n, half, u) for n in range(group) for half in "eo" for u in range(unroll)]
    t = tag
    lines = [
        f"  br label %{t}_loop",
        f"{t}_loop:",
        f"  %{t}_k = phi i64 [0, %{previous}], [%{t}_k_next, %{t}_loop]",
        *[
            f"  %{t}_s{n}{h}{u} = phi {f} [zeroinitializer, %{previous}], [%{t}_s{n}{h}{u}_next, %{t}_loop]"
            for n, h, u in sums
        ],
    ]
    for u in range(unroll):
        lines += [
            f"  %{t}_k{u} = add i64 %{t}_k, {u}",
            f"  %{t}_wk{u} = mul i64 %{t}_k{u}, {lanes}",  # a k row of a tile: 2 lanes bf16, `lanes` words
            f"  %{t}_wi{u} = add i64 %tile_base, %{t}_wk{u}",
            f"  %{t}_wq{u} = getelementptr i32, i32* %w, i64 %{t}_wi{u}",
            f"  %{t}_wp{u} = bitcast i32* %{t}_wq{u} to {i32}*",
            f"  %{t}_words{u} = load {i32}, {i32}* %{t}_wp{u}, align 4",
            f"  %{t}_ebits{u} = shl {i32} %{t}_words{u}, <{splat16}>",
            f"  %{t}_obits{u} = and {i32} %{t}_words{u}, <{high}>",
            f"  %{t}_we{u} = bitcast {i32} %{t}_ebits{u} to {f}",
            f"  %{t}_wo{u} = bitcast {i32} %{t}_obits{u} to {f}",
        ]
        if prefetch:
            lines += [
                f"  %{t}_pq{u} = getelementptr i32, i32* %{t}_wq{u}, i64 {PREFETCH_WORDS}",
                f"  %{t}_pb{u} = bitcast i32* %{t}_pq{u} to i8*",
                # locality 2 (x86 prefetcht1): into L2, not L1, where a tile 16 KiB ahead would evict the
                # lines being multiplied and the input rows; the multiplications then hide the memory's latency
                f"  call void @llvm.prefetch.p0i8(i8* %{t}_pb{u}, i32 0, i32 2, i32 1)",
            ]
        for n in range(group):
            lines += [
                f"  %{t}_xi{n}{u} = add i64 %xrow{row0 + n}, %{t}_k{u}",
                f"  %{t}_xq{n}{u} = getelementptr float, float* %x, i64 %{t}_xi{n}{u}",
                f"  %{t}_xs{n}{u} = load float, float* %{t}_xq{n}{u}, align 4",
                f"  %{t}_x1{n}{u} = insertelement {f} undef, float %{t}_xs{n}{u}, i32 0",
                f"  %{t}_x{n}{u} = shufflevector {f} %{t}_x1{n}{u}, {f} undef, {i32} zeroinitializer",
            ]
    lines += [
        f"  %{t}_s{n}{h}{u}_next = call {f} @llvm.fma.v{lanes}f32({f} %{t}_w{h}{u}, "
        f"{f} %{t}_x{n}{u}, {f} %{t}_s{n}{h}{u})"
        for n, h, u in sums
    ]
    lines += [
        f"  %{t}_k_next = add i64 %{t}_k, {unroll}",
        f"  %{t}_more = icmp ult i64 %{t}_k_next, %K",
        f"  br i1 %{t}_more, label %{t}_loop, label %{t}_end",
        f"{t}_end:",
    ]
    for n in range(group):
        totals = {}
        for h in "eo":
            totals[h] = f"%{t}_s{n}{h}0_next"
            for u in range(1, unroll):
                lines.append(f"  %{t}_t{n}{h}{u} = fadd {f} {totals[h]}, %{t}_s{n}{h}{u}_next")
                totals[h] = f"%{t}_t{n}{h}{u}"
        lines += [
            f"  %{t}_out{n} = shufflevector {f} {totals['e']}, {f} {totals['o']}, <{2 * lanes} x i32> <{interleave}>",
            f"  %{t}_yi{n} = add i64 %yrow{row0 + n}, %o",
            f"  %{t}_yq{n} = getelementptr float, float* %y, i64 %{t}_yi{n}",
            f"  %{t}_yp{n} = bitcast float* %{t}_yq{n} to {wide}*",
            f"  store {wide} %{t}_out{n}, {wide}* %{t}_yp{n}, align 4",
        ]
    return lines
