"""The vLLM side: the target served with the OSD drafter as its speculator (a draft model, vLLM's
`draft_model` method, or an EAGLE-3 head, its `eagle3` method: osd.serving.speculator), requests kept in
flight, and the drafter's weights swapped into the running engine.

The engine runs in its own process (vLLM's EngineCore): it keeps decoding the requests in flight
while this process buffers, distils and exports the draft; `swap_draft` reaches the worker through
`collective_rpc` between two engine steps (osd.serving.worker), so no request is dropped and no
restart happens.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from vllm import LLM, SamplingParams

from osd.serving.acceptance import StepCounts
from osd.serving.speculator import speculative_method
from osd.serving.subvocab import register

WORKER_EXTENSION = "osd.serving.worker.DraftReloadExtension"


def build_engine(
    target: str,
    draft: str | None,
    gamma: int,
    dtype: str = "bfloat16",
    max_model_len: int = 1024,
    seed: int = 0,
    tensor_parallel_size: int = 1,
    enforce_eager: bool = True,
) -> LLM:
    """vLLM serving `target`, with `draft` proposing `gamma` tokens per step (none when gamma is 0 or
    draft is None); per-request acceptance counters on, the draft reload registered. `draft` is the
    folder vLLM loads: an EAGLE-3 head's folder, or a draft model's (one with a sub-vocabulary head goes
    through `served_draft_folder` first)."""
    register()
    speculative = None
    if draft is not None and gamma > 0:
        speculative = {"method": speculative_method(draft), "model": draft, "num_speculative_tokens": gamma}
    return LLM(
        model=target, dtype=dtype, max_model_len=max_model_len, seed=seed, enforce_eager=enforce_eager,
        tensor_parallel_size=tensor_parallel_size, speculative_config=speculative, disable_log_stats=False,
        per_request_spec_decode_metrics="none" if speculative is None else "detailed",  # vLLM refuses it alone
        worker_extension_cls=WORKER_EXTENSION,
    )  # fmt: skip


def swap_draft(llm: LLM, path: str) -> float:
    """Reload the speculator's weights (a draft's or a head's: `osd.serving.distiller.export_draft`) from
    the safetensors file `path` in every worker; returns the slowest worker's reload time in seconds (the
    RPC round trip is a few ms more)."""
    return max(llm.collective_rpc("reload_draft", args=(str(path),)))


def shutdown_engine(llm: LLM) -> None:
    """Stop the engine's processes now (otherwise they stop at interpreter exit, after a wait)."""
    llm.llm_engine.engine_core.shutdown()


def spec_counters(llm: LLM) -> dict[str, Any]:
    """vLLM's cumulative speculative-decoding counters (`vllm:spec_decode_*`, names without the prefix).

    They live in one process-wide Prometheus registry, and a new engine unregisters those of the
    engines built before it: read them from the last engine built (the online loop reads the
    per-request counters instead)."""
    prefix = "vllm:spec_decode_"
    return {
        m.name[len(prefix) :]: getattr(m, "value", getattr(m, "values", None))  # counter or vector
        for m in llm.get_metrics()
        if m.name.startswith(prefix)
    }


@dataclass
class Served:
    """A finished request: the query's index in the stream, its tokens and its acceptance counters."""

    index: int
    prompt_ids: list[int]
    token_ids: list[int]
    counts: StepCounts | None  # vLLM's RequestSpecDecodeMetrics; None without a draft
    latency_s: float  # from submission to the finished output


class RequestPool:
    """At most `concurrency` requests in flight on `llm`'s engine; `poll` runs one engine step."""

    def __init__(self, llm: LLM, params: SamplingParams, concurrency: int) -> None:
        self.engine, self.params, self.concurrency = llm.llm_engine, params, concurrency
        self.in_flight: dict[str, tuple[int, list[int], float]] = {}  # request id -> (index, prompt, start)

    @property
    def has_room(self) -> bool:
        return len(self.in_flight) < self.concurrency

    def submit(self, index: int, prompt_ids: list[int]) -> None:
        request_id = f"q{index}"
        self.in_flight[request_id] = (index, prompt_ids, time.perf_counter())
        self.engine.add_request(request_id, {"prompt_token_ids": prompt_ids}, self.params)

    def stream(self, prompts: Sequence[list[int]]) -> Iterator[Served]:
        """Serve the prompts in order, `concurrency` in flight; yields each request as it finishes
        (the engine's process keeps decoding while the caller works on it)."""
        submitted = 0
        while submitted < len(prompts) or self.in_flight:
            while submitted < len(prompts) and self.has_room:
                self.submit(submitted, prompts[submitted])
                submitted += 1
            yield from self.poll()

    def poll(self) -> list[Served]:
        """The requests that finished in one engine step."""
        done = []
        for out in self.engine.step():
            if not out.finished:
                continue
            index, prompt, start = self.in_flight.pop(out.request_id)
            completion = out.outputs[0]
            done.append(Served(index, prompt, list(completion.token_ids), completion.spec_decode_metrics,
                               time.perf_counter() - start))  # fmt: skip
        return done


def serve_all(
    llm: LLM, prompts: Sequence[list[int]], params: SamplingParams, concurrency: int
) -> list[Served]:
    """Every prompt served through a `RequestPool`; results in prompt order."""
    return sorted(RequestPool(llm, params, concurrency).stream(prompts), key=lambda s: s.index)


def sampling_params(max_new_tokens: int, temperature: float, seed: int | None = None) -> SamplingParams:
    """Greedy at temperature 0; EOS stops a query (vLLM reads the target's generation config)."""
    return SamplingParams(max_tokens=max_new_tokens, temperature=temperature, seed=seed)
