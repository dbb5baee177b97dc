"""Wall-clock cost of model forwards on this machine (for c, verify costs and the adaptive gamma).

Times are the median over repetitions, taking the best of several rounds, because on a shared
machine other processes only ever add time.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable

import torch
from transformers import PreTrainedModel

from osd.spec.batched import RowCache
from osd.spec.cached_model import CachedModel
from osd.spec.eagle3 import Eagle3Head
from osd.spec.head_cache import HeadSequence
from osd.spec.lean_llama import LeanLlamaCache, draft_cache, supports_lean_step, target_cache


def synchronize(device: torch.device) -> None:
    """Wait for queued CUDA work, so that wall-clock timings are honest (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.inference_mode()
def step_time(
    model: PreTrainedModel,
    context: int = 64,
    length: int = 1,
    reps: int = 30,
    rounds: int = 5,
    batch: int = 1,
    padded: bool = False,
) -> float:
    """Seconds for one cached forward of `length` new tokens after `context` tokens, for `batch` rows
    (length 1: a decode step; length gamma + 1: a verification pass).

    padded: pass an attention mask that hides the first slot of every other row, as in a batch of
    left-padded prompts of unequal lengths (the batched engine's case). It changes the attention
    kernel: here a one-token step of the 135M demo target at B = 16 took 41 ms with such a mask and
    67 ms without one (or with an all-ones mask, which transformers drops)."""
    device = model.device
    if model.config.is_encoder_decoder:
        raise ValueError("step_time measures decoder-only models")
    ids = torch.randint(4, model.config.vocab_size, (batch, context + length), device=device)  # [B, T + L]
    cache = model(ids[:, :context], use_cache=True).past_key_values
    new = ids[:, context:]  # [B, L]
    kwargs = {}
    if padded:
        mask = torch.ones_like(ids)  # [B, T + L]
        mask[::2, 0] = 0
        kwargs = {"attention_mask": mask, "position_ids": (mask.cumsum(1) - 1)[:, context:]}
    return _best_median(
        lambda: model(new, past_key_values=cache, use_cache=True, **kwargs),
        lambda: cache.crop(-length),  # transformers 5: drop the tokens just appended, keep the context fixed
        device,
        reps,
        rounds,
    )


@torch.inference_mode()
def target_pass_time(
    target: PreTrainedModel,
    context: int = 64,
    length: int = 1,
    reps: int = 30,
    rounds: int = 5,
    lean: bool = True,
    batch: int = 1,
    padded: bool = False,
) -> float:
    """Seconds for a target pass over `length` new tokens after `context` tokens (length 1: a decode step; gamma +
    1: a verification) as the engine takes it: at B = 1 unpadded through `target_cache`, as `generate` and the
    target-alone baseline do, else over `batch` rows as `generate_batch` does (`rows_pass_time`); the lean step
    where it applies (`lean=False`: HF's forward)."""
    if batch > 1 or padded:
        return rows_pass_time(target, context, length, reps, rounds, batch, padded, lean, pack_plain=False)
    return _sequence_pass_time(target_cache(target, lean=lean), target, context, length, reps, rounds)


def _sequence_pass_time(
    cache: CachedModel | LeanLlamaCache,
    model: PreTrainedModel,
    context: int,
    length: int,
    reps: int,
    rounds: int,
) -> float:
    """Seconds for a pass over `length` new tokens after `context` tokens through `cache`, one sequence's cache of
    `model` (`target_cache`'s or `draft_cache`'s)."""
    ids = _decoder_ids(model, context + length)  # [1, T + L]
    cache.forward(ids[:, :context], 1)
    return _best_median(
        lambda: cache.forward(ids[:, context:], length),
        lambda: cache.crop(context),
        model.device,
        reps,
        rounds,
    )


@torch.inference_mode()
def prefill_time(target: PreTrainedModel, tokens: int, reused: int = 0, reps: int = 3) -> float:
    """Seconds of a target's prefill of a prompt of `tokens` tokens into its cache (`target_cache`'s) whose first
    `reused` positions it holds already (a prompt's leading tokens shared with the one before), the best of `reps`
    after one untimed call."""
    ids = _decoder_ids(target, tokens)  # [1, T]
    cache = target_cache(target, reuse_prompt=False)
    if reused:
        cache.forward(ids[:, :reused], 1)
    return _best_median(
        lambda: cache.forward(ids[:, reused:], 1), lambda: cache.crop(reused), target.device, 1, reps
    )


@torch.inference_mode()
def pass_times(
    target: PreTrainedModel, context: int, max_length: int, reps: int = 3, reused: int = 0
) -> list[float]:
    """Seconds of a target's prefill of `context` tokens (its first `reused` held already, as `prefill_time`), then
    `target_pass_time` for lengths 1..max_length (a decode step, then passes over 2..max_length tokens) after it,
    one round each (for timings taken in turns by the caller, who keeps the best: the prefill is timed once, the
    first call of a model paying its set-up)."""
    ids = _decoder_ids(target, context + max_length)  # [1, T + max_length]
    cache = target_cache(target, reuse_prompt=False)
    if reused:
        cache.forward(ids[:, :reused], 1)
    synchronize(target.device)
    start = time.perf_counter()
    cache.forward(ids[:, reused:context], 1)
    synchronize(target.device)
    prefill = time.perf_counter() - start
    return [prefill] + [
        _best_median(
            lambda n=n: cache.forward(ids[:, context : context + n], n),
            lambda: cache.crop(context),
            target.device,
            reps,
            1,
        )
        for n in range(1, max_length + 1)
    ]


def _decoder_ids(model: PreTrainedModel, length: int, batch: int = 1) -> torch.Tensor:
    """Random token ids [batch, length] for a decoder-only model's timed forwards."""
    if model.config.is_encoder_decoder:
        raise ValueError("the target's timings measure decoder-only models")
    return torch.randint(4, model.config.vocab_size, (batch, length), device=model.device)


def _best_median(
    call: Callable[[], object], reset: Callable[[], None], device: torch.device, reps: int, rounds: int
) -> float:
    """The best over `rounds` of the median seconds of `reps` calls, each followed by an untimed `reset`; one
    untimed call first (the first call of a new shape pays one-off setup)."""
    call()
    reset()
    best = float("inf")
    for _ in range(rounds):
        times = []
        for _ in range(reps):
            synchronize(device)
            start = time.perf_counter()
            call()
            synchronize(device)
            times.append(time.perf_counter() - start)
            reset()
        best = min(best, statistics.median(times))
    return best


def mid_answer_context(prompt_lengths: Iterable[int], max_new_tokens: int) -> int:
    """The cached tokens at which a benchmark times its steps: the median prompt and half an answer."""
    return int(statistics.median(prompt_lengths)) + max_new_tokens // 2


@torch.inference_mode()
def draft_step_time(
    model: PreTrainedModel,
    context: int = 64,
    reps: int = 30,
    rounds: int = 5,
    batch: int = 1,
    padded: bool = False,
) -> float:
    """Seconds for one draft step as the engine takes it: the lean step of `osd.spec.lean_llama` where it
    applies (B = 1 unpadded: `generate`'s cache; else the batched engine's, with `step_time`'s padding mask),
    an EAGLE-3 head's chain step (`head_step_time`), otherwise HF's forward (`step_time`). The model is timed as
    it is: install a saved sub-vocabulary head first (`apply_draft_vocab`), as the engine does."""
    if isinstance(model, Eagle3Head):
        return head_step_time(model, context, reps, rounds)
    if not supports_lean_step(model):
        return step_time(model, context, reps=reps, rounds=rounds, batch=batch, padded=padded)
    if batch == 1 and not padded:  # the lean step, as `generate` steps the draft
        return _sequence_pass_time(draft_cache(model, None), model, context, 1, reps, rounds)
    return rows_pass_time(model, context, 1, reps, rounds, batch, padded, lean=True, pack_plain=True)


@torch.inference_mode()
def rows_pass_time(
    model: PreTrainedModel,
    context: int,
    length: int,
    reps: int,
    rounds: int,
    batch: int,
    padded: bool,
    lean: bool,
    pack_plain: bool,
) -> float:
    """Seconds for a pass over `length` new tokens of each of `batch` rows after `context` tokens, through the
    batched engine's cache (`RowCache`; `lean`, `pack_plain` as `RowCache.start`'s), with `step_time`'s padding
    mask where `padded`."""
    ids = _decoder_ids(model, context + length, batch)  # [B, T + L]
    mask = torch.ones(batch, context, dtype=torch.long)  # [B, T]
    if padded:
        mask[::2, 0] = 0
    rows = RowCache.start(model, ids[:, :context], mask, lean=lean, pack_plain=pack_plain)
    rows.forward(ids[:, :context], mask, 1)
    fed = torch.ones(batch, length, dtype=torch.long)
    return _best_median(
        lambda: rows.forward(ids[:, context:], fed, length),
        lambda: rows.keep(rows.lengths - length),  # drop the fed tokens: their slots are cropped
        model.device,
        reps,
        rounds,
    )


@torch.inference_mode()
def chain_step_time(
    draft: PreTrainedModel | Eagle3Head,
    target: PreTrainedModel,
    context: int = 64,
    gamma: int = 3,
    reps: int = 5,
    rounds: int = 3,
) -> float:
    """Seconds per draft step of a chain of `gamma` proposals taken right after a target pass over gamma + 1
    tokens, as the engine alternates them: the pass evicts the draft's weights from the CPU's caches, so a step
    here costs more than in a loop of draft steps alone (`draft_step_time`). The draft as the engine steps it
    (install a saved sub-vocabulary head first); an EAGLE-3 head is timed by `head_step_time`."""
    if isinstance(draft, Eagle3Head):
        return head_step_time(draft, context, reps * gamma, rounds)
    vocab = min(draft.config.vocab_size, target.config.vocab_size)
    ids = torch.randint(4, vocab, (1, context + gamma + 1), device=target.device)  # [1, T + g + 1]
    verifier = target_cache(target)
    verifier.forward(ids[:, :context], 1)
    cache = draft_cache(draft, None)
    cache.forward(ids[:, :context].to(cache.device), 1)

    def chain() -> None:
        for j in range(gamma):
            cache.forward(ids[:, context + j : context + j + 1].to(cache.device), 1)

    def verify() -> None:  # untimed: the draft's chain is cropped, the target's pass evicts its weights
        cache.crop(context)
        verifier.forward(ids[:, context:], gamma + 1)
        verifier.crop(context)

    verify()
    return _best_median(chain, verify, target.device, reps, rounds) / gamma


@torch.inference_mode()
def pair_costs(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    context: int,
    max_gamma: int,
    reps: int = 30,
    rounds: int = 5,
) -> dict[str, object]:
    """A pair's costs after `context` tokens: the target's and the draft's step (ms, each as the engine steps
    it), c = draft step / target step, and `verify_cost[k]`, a target pass over k + 1 tokens in target
    steps, for k = 1..max_gamma (Eq. 2 charged with it: `osd.cost_model.speedup_measured_verify`)."""
    target_s = target_pass_time(target, context, reps=reps, rounds=rounds)
    draft_s = draft_step_time(draft, context, reps=reps, rounds=rounds)
    verify = {
        k: target_pass_time(target, context, length=k + 1, reps=reps, rounds=rounds) / target_s
        for k in range(1, max_gamma + 1)
    }
    return {
        "target_ms": 1e3 * target_s,
        "draft_ms": 1e3 * draft_s,
        "c": draft_s / target_s,
        "verify_cost": verify,
    }


ISA_LIMITS = (  # the variables of bash_scripts/hold_to_avx2.sh
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "NUMBA_CPU_NAME",
    "NUMBA_CPU_FEATURES",
)


@torch.inference_mode()
def head_step_time(head: Eagle3Head, context: int = 64, reps: int = 30, rounds: int = 5) -> float:
    """Seconds for one step of an EAGLE-3 head's draft chain (it reads its own last state) after `context` entries
    that read the target's states, as `generate` takes it. The token embedding is a stand-in table of the head's
    width: a token's embedding is one row's lookup, whatever the table."""
    H, dtype = head.config.hidden_size, head.fc.weight.dtype
    chain = HeadSequence(head, torch.nn.Embedding(16, H).to(head.device, dtype))
    chain.add_features(torch.randn(1, context, len(head.target_layers) * H, device=head.device, dtype=dtype))
    ids = torch.randint(16, (1, context + 1), device=head.device)  # [1, T + 1]
    chain.forward(ids[:, :context], 1)
    return _best_median(
        lambda: chain.forward(ids[:, context:], 1), lambda: chain.crop(context + 1), head.device, reps, rounds
    )


def machine(device: torch.device | str = "cpu") -> dict[str, object]:
    """What a timing depends on, for result files: the processor, its SIMD level and bfloat16
    instructions (`cpu_bf16_instructions`: AVX512-BF16 or AMX; without them bf16 matmuls convert to
    float32 and run slower), torch's version and threads, and the GPU when `device` is one.

    Figures taken on different machines do not compare: on a 2-core AVX2 VM the bf16 demo target
    decodes a token in 84 ms and verifies 4 in 200 (2.4 steps), where an AVX512-BF16 VM took 49 ms
    and 1.1 steps; bf16 greedy outputs differ between the two as well (the kernels round
    differently, so near-ties break differently)."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            fields = dict(
                line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line
            )
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        cpu, flags = fields.get("model name", cpu), set(fields.get("flags", "").split())
    except OSError:  # not Linux: the name alone
        pass
    info: dict[str, object] = {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_instructions": sorted(flags & {"avx512_bf16", "amx_bf16"}),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    limits = {k: os.environ[k] for k in ISA_LIMITS if k in os.environ}
    if limits:  # an older CPU emulated: the instruction sets torch, oneDNN, MKL and LLVM were held to
        info["isa_limits"] = limits
    device = torch.device(device)
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
